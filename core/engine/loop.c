/*
 * loop.c — the event loop: phases, timers, posts, epoll (edge-triggered).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loop_int.h"
#include "moonflow/error.h"

/* ---- epoll: the only place the loop talks to the poller --------------- */

static uint32_t mf__epoll_bits(unsigned events)
{
    uint32_t bits = EPOLLET;
    if (events & MF_IO_READ)
        bits |= EPOLLIN | EPOLLRDHUP;
    if (events & MF_IO_WRITE)
        bits |= EPOLLOUT;
    return bits;
}

static unsigned mf__io_bits(uint32_t bits)
{
    unsigned events = 0;
    if (bits & (EPOLLIN | EPOLLRDHUP))
        events |= MF_IO_READ;
    if (bits & EPOLLRDHUP)
        events |= MF_IO_RDHUP;
    if (bits & EPOLLOUT)
        events |= MF_IO_WRITE;
    if (bits & EPOLLERR)
        events |= MF_IO_ERROR;
    if (bits & EPOLLHUP)
        events |= MF_IO_HUP;
    return events;
}

static int mf__epoll_ctl(mf_loop_t *loop, int op, mf_io_t *io, unsigned ev)
{
    struct epoll_event event = {.events = mf__epoll_bits(ev), .data.ptr = io};
    if (epoll_ctl(loop->epfd, op, io->fd, &event) < 0)
        return mf_err_from_errno(errno);
    return 0;
}

static void mf__poll(mf_loop_t *loop, int timeout_ms)
{
    int n;
    do {
        n = epoll_wait(loop->epfd, loop->events, MF_LOOP_MAX_EVENTS,
                       timeout_ms);
    } while (n < 0 && errno == EINTR);
    /* The wait may have slept long: callbacks must see the time they run
     * at, or a deadline they set would lie in the past. */
    if (timeout_ms != 0)
        mf_loop_update_time(loop);
    if (n <= 0)
        return;
    loop->polled = loop->events;
    loop->npolled = n;
    for (loop->polled_pos = 0; loop->polled_pos < n; loop->polled_pos++) {
        struct epoll_event *ev = &loop->events[loop->polled_pos];
        mf_io_t *io = ev->data.ptr;
        if (io)
            io->cb(io, mf__io_bits(ev->events));
    }
    loop->polled = NULL;
    loop->npolled = 0;
}

/* ---- I/O watchers ------------------------------------------------------ */

void mf_io_init(mf_io_t *io, int fd, mf_io_cb cb, void *data)
{
    io->fd = fd;
    io->_events = 0;
    io->_unref = false;
    io->cb = cb;
    io->data = data;
}

static bool mf__io_counts(const mf_loop_t *loop, const mf_io_t *io)
{
    return io != &loop->mailbox_io && !io->_unref;
}

void mf_io_set_ref(mf_loop_t *loop, mf_io_t *io, bool ref)
{
    if (io->_unref == !ref)
        return;
    if (io->_events && io != &loop->mailbox_io)
        loop->active_io += ref ? 1 : -1;
    io->_unref = !ref;
}

int mf_io_start(mf_loop_t *loop, mf_io_t *io, unsigned events)
{
    events &= MF_IO_READ | MF_IO_WRITE;
    if (events == io->_events)
        return 0;
    int op = io->_events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    int rc = mf__epoll_ctl(loop, op, io, events);
    if (rc < 0)
        return rc;
    if (!io->_events && mf__io_counts(loop, io))
        loop->active_io++;
    io->_events = events;
    return 0;
}

void mf_io_stop(mf_loop_t *loop, mf_io_t *io)
{
    if (!io->_events)
        return;
    struct epoll_event unused = {0};
    /* EBADF/ENOENT: the fd was closed first; the kernel dropped it already. */
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, &unused);
    if (mf__io_counts(loop, io))
        loop->active_io--;
    io->_events = 0;
    /* An event for this watcher may wait later in the current batch: void it
     * so its owner may free the watcher right now. */
    for (int i = loop->polled_pos + 1; i < loop->npolled; i++)
        if (loop->polled[i].data.ptr == io)
            loop->polled[i].data.ptr = NULL;
}

/* ---- time and timers ------------------------------------------------- */

void mf_loop_update_time(mf_loop_t *loop)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    loop->now_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    loop->now = loop->now_ns / 1000000u;
}

uint64_t mf_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t mf_loop_now(const mf_loop_t *loop)
{
    return loop->now;
}

uint64_t mf_loop_now_ns(const mf_loop_t *loop)
{
    return loop->now_ns;
}

void mf_timer_init(mf_timer_t *timer, mf_timer_cb cb, void *data)
{
    timer->_deadline = 0;
    timer->_seq = 0;
    timer->_index = UINT32_MAX;
    timer->_unref = false;
    timer->cb = cb;
    timer->data = data;
}

void mf_timer_set_ref(mf_loop_t *loop, mf_timer_t *timer, bool ref)
{
    if (timer->_unref == !ref)
        return;
    if (mf_timer_active(timer))
        loop->unref_timers += ref ? -1 : 1;
    timer->_unref = !ref;
}

static void mf__timer_remove(mf_loop_t *loop, mf_timer_t *timer)
{
    mf__timer_heap_remove(&loop->timers, timer);
    if (timer->_unref)
        loop->unref_timers--;
}

void mf_timer_start(mf_loop_t *loop, mf_timer_t *timer, uint64_t timeout_ms)
{
    if (mf_timer_active(timer))
        mf__timer_remove(loop, timer);
    timer->_deadline = loop->now + timeout_ms;
    timer->_seq = loop->timer_seq++;
    mf__timer_heap_insert(&loop->timers, timer);
    if (timer->_unref)
        loop->unref_timers++;
}

void mf_timer_stop(mf_loop_t *loop, mf_timer_t *timer)
{
    if (mf_timer_active(timer))
        mf__timer_remove(loop, timer);
}

/* Fires due timers in deadline order. Timers started during this phase wait
 * for the next one, so a callback re-arming with 0 ms cannot spin here. */
static void mf__run_timers(mf_loop_t *loop)
{
    uint64_t phase_seq = loop->timer_seq;
    mf_timer_t *timer;
    while ((timer = mf__timer_heap_min(&loop->timers)) != NULL) {
        if (timer->_deadline > loop->now || timer->_seq >= phase_seq)
            break;
        mf__timer_remove(loop, timer);
        timer->cb(timer);
    }
}

static int mf__next_timeout(const mf_loop_t *loop)
{
    mf_timer_t *timer = mf__timer_heap_min(&loop->timers);
    if (!timer)
        return -1;
    if (timer->_deadline <= loop->now)
        return 0;
    uint64_t diff = timer->_deadline - loop->now;
    return diff > INT32_MAX ? INT32_MAX : (int)diff;
}

/* ---- posts ------------------------------------------------------------- */

void mf_loop_post(mf_loop_t *loop, mf_post_t *post)
{
    mf__mailbox_push(&loop->mailbox, post);
}

void mf_loop_defer(mf_loop_t *loop, mf_post_t *post)
{
    mf_list_push_back(&loop->deferred, &post->_link);
}

static void mf__drain_mailbox(mf_loop_t *loop)
{
    unsigned budget = MF_LOOP_PHASE_BUDGET * 16;
    mf_post_t *post;
    loop->mailbox_more = false;
    while ((post = mf__mailbox_pop(&loop->mailbox)) != NULL) {
        post->cb(post);
        if (--budget == 0) {
            loop->mailbox_more = true;
            return;
        }
    }
}

static void mf__mailbox_ready(mf_io_t *io, unsigned events)
{
    mf_loop_t *loop = io->data;
    (void)events;
    mf__mailbox_ack(&loop->mailbox);
    mf__drain_mailbox(loop);
}

/* Deferred callbacks and finished tasks, each bounded. Returns how many
 * ran; *more says whether work is left over (the loop then polls without
 * blocking). */
/* One pass: the deferred callbacks, then the finished tasks, each list
 * until it is empty or `budget` entries ran. */
static unsigned mf__run_pending_pass(mf_loop_t *loop, unsigned budget)
{
    unsigned ran = 0, left = budget;
    mf_list_t *node;
    while (left && (node = mf_list_pop_front(&loop->deferred)) != NULL) {
        mf_post_t *post = mf_container_of(node, mf_post_t, _link);
        post->cb(post);
        left--;
        ran++;
    }
    if (!mf_list_empty(&loop->ready))
        ran += loop->run_ready(loop, budget);
    return ran;
}

static bool mf__pending(const mf_loop_t *loop)
{
    return !mf_list_empty(&loop->deferred) || !mf_list_empty(&loop->ready);
}

static unsigned mf__run_pending(mf_loop_t *loop, bool *more)
{
    /* A finished task often defers its successor's start (a coroutine
     * resumed by a reply sends the next query): passes repeat while work
     * remains, so that start does not wait for an extra, empty poll. The
     * budget still bounds what runs between two polls. */
    unsigned ran = 0;
    do
        ran += mf__run_pending_pass(loop, MF_LOOP_PHASE_BUDGET);
    while (ran < MF_LOOP_PHASE_BUDGET && mf__pending(loop));
    *more = mf__pending(loop);
    return ran;
}

/* ---- loop-local storage ------------------------------------------------ */

/* Ids handed out so far; taken under the lock so a key that two workers
 * meet at once takes one id, not two (cold: once per key per process). */
static unsigned mf__loop_keys_taken;
static pthread_mutex_t mf__loop_keys_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned mf__loop_key_take(mf_loop_key_t *key)
{
    pthread_mutex_lock(&mf__loop_keys_lock);
    unsigned id = __atomic_load_n(&key->_id, __ATOMIC_RELAXED);
    if (!id) {
        if (mf__loop_keys_taken == MF_LOOP_KEYS) {
            fprintf(stderr, "moonflow: more than MF_LOOP_KEYS (%d) loop keys\n",
                    MF_LOOP_KEYS);
            abort();
        }
        id = ++mf__loop_keys_taken;
        __atomic_store_n(&key->_id, id, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mf__loop_keys_lock);
    return id;
}

void *mf_loop_get(const mf_loop_t *loop, mf_loop_key_t *key)
{
    /* A key never taken has no value on any loop. */
    unsigned id = __atomic_load_n(&key->_id, __ATOMIC_RELAXED);
    return id ? loop->values[id - 1] : NULL;
}

void mf_loop_set(mf_loop_t *loop, mf_loop_key_t *key, void *value)
{
    unsigned id = __atomic_load_n(&key->_id, __ATOMIC_RELAXED);
    if (!id)
        id = mf__loop_key_take(key);
    loop->values[id - 1] = value;
    loop->value_keys[id - 1] = key;
}

/* The not yet destroyed value to go next: highest rank, then newest key. */
static int mf__loop_value_next(const mf_loop_t *loop, uint64_t done)
{
    int next = -1;
    for (int i = 0; i < MF_LOOP_KEYS; i++) {
        if (!loop->values[i] || (done >> i & 1))
            continue;
        if (next < 0 ||
            loop->value_keys[i]->rank >= loop->value_keys[next]->rank)
            next = i;
    }
    return next;
}

/* Picks again after each dtor, which may clear or set other values (as the
 * old fixed slots were read afresh one by one). */
static void mf__loop_values_destroy(mf_loop_t *loop)
{
    uint64_t done = 0;
    for (int i; (i = mf__loop_value_next(loop, done)) >= 0;) {
        done |= UINT64_C(1) << i;
        if (loop->value_keys[i]->dtor)
            loop->value_keys[i]->dtor(loop, loop->values[i]);
    }
}

/* ---- the loop ---------------------------------------------------------- */

mf_loop_t *mf_loop_create(void)
{
    mf_loop_t *loop = mf_xcalloc(1, sizeof(*loop));
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0 || mf__mailbox_init(&loop->mailbox) < 0) {
        if (loop->epfd >= 0)
            close(loop->epfd);
        mf_free(loop);
        return NULL;
    }
    mf__timer_heap_init(&loop->timers);
    mf_list_init(&loop->deferred);
    mf_list_init(&loop->ready);
    mf__slab_init(&loop->slab);
    atomic_init(&loop->stop_requested, 0);
    mf_io_init(&loop->mailbox_io, loop->mailbox.efd, mf__mailbox_ready, loop);
    if (mf_io_start(loop, &loop->mailbox_io, MF_IO_READ) < 0) {
        mf__mailbox_close(&loop->mailbox);
        close(loop->epfd);
        mf_free(loop);
        return NULL;
    }
    mf_loop_update_time(loop);
    return loop;
}

void mf_loop_destroy(mf_loop_t *loop)
{
    if (!loop)
        return;
    mf__loop_values_destroy(loop);
    mf_io_stop(loop, &loop->mailbox_io);
    mf__mailbox_close(&loop->mailbox);
    close(loop->epfd);
    mf__timer_heap_close(&loop->timers);
    mf__slab_close(&loop->slab);
    mf_free(loop);
}

static bool mf__loop_alive(const mf_loop_t *loop)
{
    return loop->active_io > 0 || loop->timers.size > loop->unref_timers ||
           loop->refs > 0 || !mf_list_empty(&loop->deferred) ||
           !mf_list_empty(&loop->ready) || loop->mailbox_more;
}

static bool mf__stop_requested(mf_loop_t *loop)
{
    return atomic_load_explicit(&loop->stop_requested, memory_order_acquire);
}

static int mf__poll_timeout(mf_loop_t *loop, mf_run_mode_t mode, bool more)
{
    if (mode == MF_RUN_NOWAIT || more || loop->mailbox_more ||
        mf__stop_requested(loop))
        return 0;
    return mf__next_timeout(loop);
}

/* One iteration; returns how many callbacks ran before the poll. */
static unsigned mf__loop_iterate(mf_loop_t *loop, mf_run_mode_t mode,
                                 bool *alive)
{
    bool more;
    mf_loop_update_time(loop);
    uint64_t seq = loop->timer_seq;
    size_t timers_before = loop->timers.size;
    mf__run_timers(loop);
    if (loop->mailbox_more)
        mf__drain_mailbox(loop);
    unsigned ran = mf__run_pending(loop, &more);
    ran +=
        (unsigned)(timers_before > loop->timers.size || seq != loop->timer_seq);
    *alive = mf__loop_alive(loop);
    if (mode != MF_RUN_FOREVER && !*alive)
        return ran;
    /* ONCE blocks only when nothing was ready (libuv's can_sleep). */
    bool nowait = mode == MF_RUN_NOWAIT || (mode == MF_RUN_ONCE && ran);
    mf__poll(loop, nowait ? 0 : mf__poll_timeout(loop, mode, more));
    return ran;
}

int mf_loop_run(mf_loop_t *loop, mf_run_mode_t mode)
{
    loop->thread = pthread_self();
    loop->has_thread = true;
    bool alive = true, more;
    while (!mf__stop_requested(loop)) {
        mf__loop_iterate(loop, mode, &alive);
        if (mode == MF_RUN_DEFAULT && !alive)
            break;
        if (mode == MF_RUN_ONCE || mode == MF_RUN_NOWAIT) {
            /* Deliver what the poll made ready before returning. */
            mf_loop_update_time(loop);
            mf__run_timers(loop);
            mf__run_pending(loop, &more);
            alive = mf__loop_alive(loop);
            break;
        }
    }
    atomic_store_explicit(&loop->stop_requested, 0, memory_order_release);
    return alive ? 1 : 0;
}

void mf_loop_stop(mf_loop_t *loop)
{
    atomic_store_explicit(&loop->stop_requested, 1, memory_order_release);
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(loop->mailbox.efd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
}

void mf_loop_ref(mf_loop_t *loop)
{
    loop->refs++;
}

void mf_loop_unref(mf_loop_t *loop)
{
    loop->refs--;
}

bool mf_loop_on_thread(const mf_loop_t *loop)
{
    return loop->has_thread && pthread_equal(loop->thread, pthread_self());
}

void mf_loop_set_pool(mf_loop_t *loop, mf_pool_t *pool)
{
    loop->pool = pool;
}

mf_pool_t *mf_loop_pool(const mf_loop_t *loop)
{
    return loop->pool;
}

unsigned mf_loop_index(const mf_loop_t *loop)
{
    return loop->index;
}

void mf_loop_set_index(mf_loop_t *loop, unsigned index)
{
    loop->index = index;
}

void *mf_loop_alloc(mf_loop_t *loop, size_t size)
{
    return mf__slab_alloc(&loop->slab, size);
}

void mf_loop_free(mf_loop_t *loop, void *p, size_t size)
{
    mf__slab_free(&loop->slab, p, size);
}
