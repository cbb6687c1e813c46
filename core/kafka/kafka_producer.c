/*
 * kafka_producer.c — the process's producer handles and the way their
 * reports reach the loops.
 *
 * Owns: the registry of producer handles (one per property list,
 * refcounted, under one mutex: opening and closing are not the hot path),
 * each handle's rd_kafka_t, the loops' Kafka slot (mf__kafka_loop_t) and
 * each loop's report mailbox.
 *
 * How a report travels. Delivery reports (a batch of messages each) and
 * errors land on librdkafka's main queue, which writes to the handle's
 * eventfd when it becomes non-empty. One loop of those producing on the
 * handle, the poller, watches that eventfd and drains the queue on its own
 * thread (mf__kafka_waker_t); while no loop does (none produced yet, the
 * poller's loop is gone, the handle is closing) the main queue is forwarded
 * to the background queue, whose thread calls mf__kafka_background() for
 * every event, admin results included (they always come that way). Either
 * way, for each message the outcome its opaque points to is filled, and the
 * outcome's report goes to its loop when that was the last message the
 * report waited for: deferred on the poller's own loop (no system call),
 * posted (mf_loop_post: lock-free, no allocation) to any other. One
 * hand-over per message produced alone, one per batch task. The task is
 * touched only there, on its loop. Why a poller: the background thread
 * was one more thread woken per delivery report, between the broker's
 * thread and the loop.
 *
 * Lifetimes. Reports come from a mailbox of the loop (malloc'd, in chunks
 * reused through a free list, so a steady stream of messages allocates
 * nothing). The mailbox is refcounted: one reference for the living loop,
 * one per report out in librdkafka. When the loop is destroyed the mailbox
 * is marked dead under its mutex, which the poller or the background
 * thread holds while it posts: a report for a dead loop is dropped, never posted, and the last
 * report to come back frees the mailbox. A task that gives up (cancel,
 * timeout) unhooks itself from its report on its loop; the report is then
 * dropped when it arrives.
 *
 * May call: the engine and librdkafka.
 */
#include "kafka/kafka_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- the loop's slot -------------------------------------------------- */

static void mf__kafka_watches_release(mf_loop_t *loop, mf__kafka_loop_t *kl);
static void mf__kafka_watches_idle(mf__kafka_loop_t *kl);

#define MF__REPORTS_PER_CHUNK 64
/* A report keeps a batch's outcome array of up to this many messages for
 * the next batch (steady batches allocate nothing); a bigger one is freed
 * when the report goes back. */
#define MF__OUTCOMES_KEPT 8192

typedef struct mf__kafka_chunk {
    struct mf__kafka_chunk *next;
    mf__kafka_report_t reports[MF__REPORTS_PER_CHUNK];
} mf__kafka_chunk_t;

typedef struct mf__kafka_mailbox {
    pthread_mutex_t lock; /* alive vs. the posts of other threads */
    bool alive;
    mf_loop_t *loop;
    atomic_uint refs; /* the loop's + one per report out in librdkafka */
    size_t waiting; /* reports a task waits for: loop thread only */
    mf__kafka_report_t *free; /* loop thread only */
    mf__kafka_chunk_t *chunks;
} mf__kafka_mailbox_t;

static void mf__kafka_mailbox_free(mf__kafka_mailbox_t *box)
{
    while (box->chunks) {
        mf__kafka_chunk_t *c = box->chunks;
        box->chunks = c->next;
        for (size_t i = 0; i < MF__REPORTS_PER_CHUNK; i++) {
            free(c->reports[i].detail); /* of reports dropped for a dead loop */
            mf_free(c->reports[i].outcomes);
        }
        mf_free(c);
    }
    pthread_mutex_destroy(&box->lock);
    mf_free(box);
}

static void mf__kafka_mailbox_unref(mf__kafka_mailbox_t *box)
{
    if (atomic_fetch_sub_explicit(&box->refs, 1, memory_order_acq_rel) == 1)
        mf__kafka_mailbox_free(box);
}

static void mf__kafka_loop_dtor(mf_loop_t *loop, void *ext)
{
    (void)loop;
    mf__kafka_loop_t *kl = ext;
    if (kl->consumers_dtor)
        kl->consumers_dtor(loop, kl->consumers);
    mf__kafka_watches_release(loop, kl);
    mf__kafka_mailbox_t *box = kl->mailbox;
    if (box) {
        pthread_mutex_lock(&box->lock);
        box->alive = false; /* from now on its reports are dropped */
        pthread_mutex_unlock(&box->lock);
        mf__kafka_mailbox_unref(box);
    }
    mf_free(kl);
}

/* A protocol client's state (loop.h). */
#define MF_KAFKA_LOOP_RANK 24
static mf_loop_key_t mf__kafka_loop_key =
    MF_LOOP_KEY_INIT(MF_KAFKA_LOOP_RANK, mf__kafka_loop_dtor);

mf__kafka_loop_t *mf__kafka_loop(mf_loop_t *loop)
{
    mf__kafka_loop_t *kl = mf_loop_get(loop, &mf__kafka_loop_key);
    if (!kl) {
        kl = mf_xcalloc(1, sizeof *kl);
        mf_loop_set(loop, &mf__kafka_loop_key, kl);
    }
    return kl;
}

static mf__kafka_mailbox_t *mf__kafka_mailbox(mf_loop_t *loop)
{
    mf__kafka_loop_t *kl = mf__kafka_loop(loop);
    if (!kl->mailbox) {
        mf__kafka_mailbox_t *box = mf_xcalloc(1, sizeof *box);
        pthread_mutex_init(&box->lock, NULL);
        box->alive = true;
        box->loop = loop;
        atomic_init(&box->refs, 1);
        kl->mailbox = box;
    }
    return kl->mailbox;
}

/* ---- reports --------------------------------------------------------------
 */

static void mf__kafka_report_grow(mf__kafka_mailbox_t *box)
{
    mf__kafka_chunk_t *c = mf_xcalloc(1, sizeof *c);
    c->next = box->chunks;
    box->chunks = c;
    for (size_t i = 0; i < MF__REPORTS_PER_CHUNK; i++) {
        c->reports[i].next_free = box->free;
        box->free = &c->reports[i];
    }
}

static void mf__kafka_report_put(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    free(r->detail);
    r->detail = NULL;
    if (r->capacity > MF__OUTCOMES_KEPT) {
        mf_free(r->outcomes);
        r->outcomes = NULL;
        r->capacity = 0;
    }
    r->task = NULL;
    r->next_free = box->free;
    box->free = r;
}

/* A task of box's loop waits for a report no more (it arrived, or the task
 * gave up): when none waits, the loop stops polling (see
 * mf__kafka_watches_idle). */
static void mf__kafka_report_unwait(mf__kafka_mailbox_t *box)
{
    mf_loop_unref(box->loop);
    if (--box->waiting == 0)
        mf__kafka_watches_idle(mf__kafka_loop(box->loop));
}

/* On the loop: the report's answer, for its task if it still waits. */
static void mf__kafka_report_delivered(mf_post_t *post)
{
    mf__kafka_report_t *r = post->data;
    if (r->task) {
        mf__kafka_report_unwait(r->box);
        r->arrived(r);
    }
    mf__kafka_report_put(r);
}

mf__kafka_report_t *mf__kafka_report_take(mf_loop_t *loop, mf_task_t *task,
                                          void (*arrived)(mf__kafka_report_t *))
{
    mf__kafka_mailbox_t *box = mf__kafka_mailbox(loop);
    if (!box->free)
        mf__kafka_report_grow(box);
    mf__kafka_report_t *r = box->free;
    box->free = r->next_free;
    box->waiting++;
    r->next_free = NULL;
    r->box = box;
    r->task = task;
    r->arrived = arrived;
    r->one = (mf__kafka_outcome_t){r, RD_KAFKA_RESP_ERR_NO_ERROR, -1, -1};
    atomic_init(&r->remaining, 1);
    r->detail = NULL;
    atomic_fetch_add_explicit(&box->refs, 1, memory_order_relaxed);
    mf_loop_ref(loop);
    return r;
}

void mf__kafka_report_expect(mf__kafka_report_t *r, size_t n)
{
    if (n > r->capacity) {
        mf_free(r->outcomes);
        r->outcomes = mf_xmalloc(n * sizeof *r->outcomes);
        r->capacity = n;
    }
    for (size_t i = 0; i < n; i++)
        r->outcomes[i] = (mf__kafka_outcome_t){r, 0, -1, -1};
    /* One more than the messages: held until every one was offered. */
    atomic_store_explicit(&r->remaining, n + 1, memory_order_relaxed);
}

bool mf__kafka_report_sent(mf__kafka_report_t *r, size_t refused)
{
    return atomic_fetch_sub_explicit(&r->remaining, refused + 1,
                                     memory_order_acq_rel) == refused + 1;
}

void mf__kafka_report_unused(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    mf__kafka_report_unwait(box);
    mf__kafka_report_put(r);
    atomic_fetch_sub_explicit(&box->refs, 1, memory_order_relaxed);
}

bool mf__kafka_report_abandon(mf__kafka_report_t **slot)
{
    mf__kafka_report_t *r = *slot;
    if (!r)
        return false;
    *slot = NULL;
    if (r->task)
        mf__kafka_report_unwait(r->box);
    r->task = NULL;
    return true;
}

/* On the background thread: hands r to its loop, or drops it when the loop
 * is gone. */
static void mf__kafka_report_post(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    pthread_mutex_lock(&box->lock);
    if (box->alive) {
        mf_post_init(&r->post, mf__kafka_report_delivered, r);
        mf_loop_post(box->loop, &r->post);
    }
    pthread_mutex_unlock(&box->lock);
    mf__kafka_mailbox_unref(box);
}

/* ---- the handle ------------------------------------------------------------
 */

struct mf_kafka {
    mf_kafka_t *next; /* the registry */
    unsigned refs;    /* under the registry's lock */
    rd_kafka_t *rk;
    atomic_uint in_flight; /* messages handed to librdkafka, not reported */
    atomic_uint admin_out; /* admin requests awaiting their result */
    size_t nprops;
    mf_kafka_prop_t *props; /* the key: names and values, copied */
    struct mf__kafka_waker *waker;
};

static pthread_mutex_t mf__kafka_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mf_kafka_t *mf__kafka_registry;

rd_kafka_t *mf__kafka_rk(const mf_kafka_t *k)
{
    return k->rk;
}

void mf__kafka_message_out(mf_kafka_t *k, int delta)
{
    atomic_fetch_add_explicit(&k->in_flight, (unsigned)delta,
                              memory_order_relaxed);
}

void mf__kafka_admin_out(mf_kafka_t *k, int delta)
{
    atomic_fetch_add_explicit(&k->admin_out, (unsigned)delta,
                              memory_order_relaxed);
}

unsigned mf_kafka_in_flight(const mf_kafka_t *k)
{
    return atomic_load_explicit(&((mf_kafka_t *)k)->in_flight,
                                memory_order_relaxed);
}

/* Lets go of the lock of box and of n of its references (reports handed
 * out under it). */
static void mf__kafka_mailbox_release(mf__kafka_mailbox_t *box, unsigned n)
{
    if (!box)
        return;
    pthread_mutex_unlock(&box->lock);
    if (atomic_fetch_sub_explicit(&box->refs, n, memory_order_acq_rel) == n)
        mf__kafka_mailbox_free(box);
}

/* Hands r to its loop: deferred when that is self, the loop this runs on
 * (the poller's), posted otherwise. */
static void mf__kafka_report_hand(mf__kafka_report_t *r, mf_loop_t *self)
{
    mf_post_init(&r->post, mf__kafka_report_delivered, r);
    if (r->box->loop == self)
        mf_loop_defer(self, &r->post);
    else
        mf_loop_post(r->box->loop, &r->post);
}

/* One delivery-report event: a batch of messages, mostly for one loop.
 * Each message fills its outcome; a report whose last message this was
 * goes to its loop. Each mailbox's lock is taken once per run of posted
 * reports, not once per report; r is not touched once posted (its loop may
 * reuse it at once). self: the loop this runs on, NULL off any loop. */
static void mf__kafka_deliveries(mf_kafka_t *k, rd_kafka_event_t *ev,
                                 mf_loop_t *self)
{
    /* Out of flight before any task can see its outcome. */
    mf__kafka_message_out(k, -(int)rd_kafka_event_message_count(ev));
    mf__kafka_mailbox_t *box = NULL;
    unsigned held = 0;
    const rd_kafka_message_t *m;
    while ((m = rd_kafka_event_message_next(ev)) != NULL) {
        mf__kafka_outcome_t *o = m->_private;
        o->err = m->err;
        o->partition = m->partition;
        o->offset = m->offset;
        mf__kafka_report_t *r = o->report;
        if (atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) !=
            1)
            continue; /* more of its batch to come */
        if (r->box != box) {
            mf__kafka_mailbox_release(box, held);
            box = r->box;
            held = 0;
            pthread_mutex_lock(&box->lock);
        }
        held++;
        if (box->alive)
            mf__kafka_report_hand(r, self);
    }
    mf__kafka_mailbox_release(box, held);
}

static void mf__kafka_create_topics_result(mf_kafka_t *k, rd_kafka_event_t *ev)
{
    mf__kafka_report_t *r = rd_kafka_event_opaque(ev);
    const rd_kafka_CreateTopics_result_t *res =
        rd_kafka_event_CreateTopics_result(ev);
    size_t n = 0;
    const rd_kafka_topic_result_t **topics =
        res ? rd_kafka_CreateTopics_result_topics(res, &n) : NULL;
    const char *words = rd_kafka_event_error_string(ev);
    r->one.err = rd_kafka_event_error(ev);
    if (!r->one.err && n > 0) {
        r->one.err = rd_kafka_topic_result_error(topics[0]);
        words = rd_kafka_topic_result_error_string(topics[0]);
    }
    if (r->one.err && words)
        r->detail = strdup(words); /* NULL on OOM: librdkafka's words then */
    mf__kafka_admin_out(k, -1);
    mf__kafka_report_post(r);
}

/* One event of the main queue or the background queue, on the poller's
 * loop (self) or on a thread of librdkafka (self NULL). */
static void mf__kafka_event(mf_kafka_t *k, rd_kafka_event_t *ev,
                            mf_loop_t *self)
{
    switch (rd_kafka_event_type(ev)) {
    case RD_KAFKA_EVENT_DR:
        mf__kafka_deliveries(k, ev, self);
        break;
    case RD_KAFKA_EVENT_CREATETOPICS_RESULT:
        mf__kafka_create_topics_result(k, ev);
        break;
    case RD_KAFKA_EVENT_ERROR:
        /* Transient errors are librdkafka's to retry (and to log); they
         * reach a message's report only when it gives up. A fatal one (the
         * idempotent producer's) fails every message after it: say so. */
        if (rd_kafka_event_error_is_fatal(ev))
            fprintf(stderr, "moonflow: kafka: %s: fatal: %s\n",
                    rd_kafka_name(mf__kafka_rk(k)),
                    rd_kafka_event_error_string(ev));
        break;
    default:
        break;
    }
    rd_kafka_event_destroy(ev);
}

/* librdkafka's background thread. */
static void mf__kafka_background(rd_kafka_t *rk, rd_kafka_event_t *ev,
                                 void *opaque)
{
    (void)rk;
    mf__kafka_event(opaque, ev, NULL);
}

/* ---- the poller --------------------------------------------------------
 */

/* A handle's main queue and the loops that produce on it. Refcounted: the
 * handle's reference and one per loop's watch, so that the eventfd stays
 * open (and its number unused) until no loop watches it. */
typedef struct mf__kafka_waker {
    pthread_mutex_t lock; /* the fields below; held while draining */
    mf_kafka_t *k;
    rd_kafka_queue_t *queue; /* the main queue; NULL once the handle closes */
    rd_kafka_queue_t *bg;    /* the background queue */
    int efd;                 /* librdkafka writes to it (queue non-empty) */
    struct mf__kafka_watch *poller; /* NULL: forwarded to the background */
    atomic_bool polled;             /* poller != NULL, read without the lock */
    atomic_uint refs;
} mf__kafka_waker_t;

/* A loop's tie to one handle's waker (the loop's slot lists them). */
typedef struct mf__kafka_watch {
    struct mf__kafka_watch *next; /* the loop's list */
    mf__kafka_waker_t *w;
    mf_loop_t *loop;
    mf_io_t io;    /* on w->efd once this watch was the poller */
    bool watching; /* io started: stopped on its loop only */
    bool polling;  /* claimed by this loop, maybe resigned since (close) */
} mf__kafka_watch_t;

static void mf__kafka_waker_unref(mf__kafka_waker_t *w)
{
    if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
        return;
    close(w->efd);
    pthread_mutex_destroy(&w->lock);
    mf_free(w);
}

/* Takes every event the main queue holds (w->lock held, the queue open). */
static void mf__kafka_drain(mf__kafka_waker_t *w, mf_loop_t *self)
{
    rd_kafka_event_t *ev;
    while ((ev = rd_kafka_queue_poll(w->queue, 0)) != NULL)
        mf__kafka_event(w->k, ev, self);
}

/* The poller's loop: the main queue became non-empty. The eventfd is
 * emptied first: an event that comes after the last poll writes it again. */
static void mf__kafka_watch_ready(mf_io_t *io, unsigned events)
{
    (void)events;
    mf__kafka_watch_t *x = io->data;
    mf__kafka_waker_t *w = x->w;
    uint64_t v;
    while (read(w->efd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
    pthread_mutex_lock(&w->lock);
    if (w->poller == x && w->queue)
        mf__kafka_drain(w, x->loop);
    pthread_mutex_unlock(&w->lock);
}

/* x's loop becomes the poller if there is none (w->lock held): the main
 * queue stops going to the background thread, and what it holds already
 * is taken at once (the eventfd may have been written while nobody
 * watched). A watcher that cannot start leaves the background thread in
 * charge: slower, never stuck. */
static void mf__kafka_watch_claim(mf__kafka_waker_t *w, mf__kafka_watch_t *x)
{
    if (w->poller || !w->queue)
        return;
    if (!x->watching) {
        mf_io_init(&x->io, w->efd, mf__kafka_watch_ready, x);
        if (mf_io_start(x->loop, &x->io, MF_IO_READ) < 0)
            return;
        /* A waiting task keeps the loop alive, not the fd. */
        mf_io_set_ref(x->loop, &x->io, false);
        x->watching = true;
    }
    w->poller = x;
    x->polling = true;
    atomic_store_explicit(&w->polled, true, memory_order_relaxed);
    rd_kafka_queue_forward(w->queue, NULL);
    mf__kafka_drain(w, x->loop);
}

/* Nobody polls the main queue from now on (w->lock held): the background
 * thread takes it, and what it holds. The poller's watcher stays (inert)
 * until its loop drops it: this may run on another thread. */
static void mf__kafka_watch_resign(mf__kafka_waker_t *w)
{
    w->poller = NULL;
    atomic_store_explicit(&w->polled, false, memory_order_relaxed);
    if (w->queue)
        rd_kafka_queue_forward(w->queue, w->bg);
}

/* x's loop stops watching the eventfd (on that loop). Only the poller's
 * loop may watch it: epoll reports an edge only if the fd is still
 * readable when the loop collects it, so a loop that read the eventfd
 * without draining the queue would take the poller's wake-up away. */
static void mf__kafka_watch_unwatch(mf__kafka_watch_t *x)
{
    if (x->watching)
        mf_io_stop(x->loop, &x->io);
    x->watching = false;
}

/* Drops x (on its loop): it lets go of the poller's part if it had it. */
static void mf__kafka_watch_free(mf__kafka_watch_t *x)
{
    mf__kafka_waker_t *w = x->w;
    pthread_mutex_lock(&w->lock);
    if (w->poller == x)
        mf__kafka_watch_resign(w);
    pthread_mutex_unlock(&w->lock);
    mf__kafka_watch_unwatch(x);
    mf__kafka_waker_unref(w);
    mf_free(x);
}

/* The loop waits for no report any more: the loop stops polling the
 * queues it polled, so that the reports of other loops never wait for a
 * loop that has no reason to run; its next produce claims them again. */
static void mf__kafka_watches_idle(mf__kafka_loop_t *kl)
{
    for (mf__kafka_watch_t *x = kl->watches; x; x = x->next) {
        if (!x->polling)
            continue;
        x->polling = false;
        pthread_mutex_lock(&x->w->lock);
        if (x->w->poller == x)
            mf__kafka_watch_resign(x->w);
        pthread_mutex_unlock(&x->w->lock);
        mf__kafka_watch_unwatch(x);
    }
}

static void mf__kafka_watches_release(mf_loop_t *loop, mf__kafka_loop_t *kl)
{
    (void)loop;
    while (kl->watches) {
        mf__kafka_watch_t *x = kl->watches;
        kl->watches = x->next;
        mf__kafka_watch_free(x);
    }
}

/* The loop's watch of w, made first in its list; the watches of closed
 * handles are dropped on the way (their eventfds closed). */
static mf__kafka_watch_t *mf__kafka_watch_of(mf_loop_t *loop,
                                             mf__kafka_loop_t *kl,
                                             mf__kafka_waker_t *w)
{
    mf__kafka_watch_t *found = NULL, **p = &kl->watches;
    while (*p) {
        mf__kafka_watch_t *x = *p;
        pthread_mutex_lock(&x->w->lock);
        bool closed = x->w->queue == NULL;
        pthread_mutex_unlock(&x->w->lock);
        if (x->w == w && !closed) {
            found = x;
            *p = x->next;
        } else if (closed) {
            *p = x->next;
            mf__kafka_watch_free(x);
        } else {
            p = &x->next;
        }
    }
    if (!found) {
        found = mf_xcalloc(1, sizeof *found);
        found->w = w;
        found->loop = loop;
        atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed);
    }
    found->next = kl->watches;
    kl->watches = found;
    return found;
}

void mf__kafka_watch(mf_loop_t *loop, mf_kafka_t *k)
{
    mf__kafka_waker_t *w = k->waker;
    mf__kafka_loop_t *kl = mf__kafka_loop(loop);
    if (kl->watches && kl->watches->w == w &&
        atomic_load_explicit(&w->polled, memory_order_relaxed))
        return; /* a loop polls already: this one's or another's */
    mf__kafka_watch_t *x = mf__kafka_watch_of(loop, kl, w);
    pthread_mutex_lock(&w->lock);
    mf__kafka_watch_claim(w, x);
    pthread_mutex_unlock(&w->lock);
}

/* The handle's waker; its main queue goes to the background thread until
 * a loop claims it. */
static mf__kafka_waker_t *mf__kafka_waker_new(mf_kafka_t *k, char *errbuf,
                                              size_t errlen)
{
    static const uint64_t one = 1; /* an eventfd takes 8-byte writes */
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        snprintf(errbuf, errlen, "wake-up fd: %s", strerror(errno));
        return NULL;
    }
    mf__kafka_waker_t *w = mf_xcalloc(1, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    w->k = k;
    w->efd = efd;
    atomic_init(&w->polled, false);
    atomic_init(&w->refs, 1);
    w->queue = rd_kafka_queue_get_main(k->rk);
    w->bg = rd_kafka_queue_get_background(k->rk);
    rd_kafka_queue_io_event_enable(w->queue, efd, &one, sizeof one);
    pthread_mutex_lock(&w->lock);
    mf__kafka_watch_resign(w);
    pthread_mutex_unlock(&w->lock);
    return w;
}

/* Closing: the background thread takes the main queue for good (the
 * reports left, the purge's), before the queue goes. */
static void mf__kafka_waker_close(mf__kafka_waker_t *w)
{
    pthread_mutex_lock(&w->lock);
    mf__kafka_watch_resign(w);
    pthread_mutex_unlock(&w->lock);
}

/* After the last report: the queue goes (the watches may outlive it). */
static void mf__kafka_waker_release(mf__kafka_waker_t *w)
{
    pthread_mutex_lock(&w->lock);
    rd_kafka_queue_io_event_enable(w->queue, -1, NULL, 0);
    rd_kafka_queue_destroy(w->queue);
    rd_kafka_queue_destroy(w->bg);
    w->queue = NULL;
    w->k = NULL;
    pthread_mutex_unlock(&w->lock);
    mf__kafka_waker_unref(w);
}

/* ---- open and close
 * ---------------------------------------------------------- */

/* moonflow's producer defaults where the caller gives none. The last one
 * bounds how late a message's timeout is seen: librdkafka fails a queued
 * message past message.timeout.ms only when its broker's thread wakes, and
 * the thread of a broker that is down sleeps its reconnect backoff, which
 * grows up to reconnect.backoff.max.ms (10 s by librdkafka's default: a
 * message failed up to 10 s late). At 500 ms it fails at most about half a
 * second late, for one connection attempt every 500 ms to a broker that is
 * down. It must stay last: it is left out when the caller sets
 * reconnect.backoff.ms, which librdkafka wants no higher than the max. */
static const mf_kafka_prop_t mf__kafka_producer_defaults[] = {
    {"enable.idempotence", "true"},
    {"message.timeout.ms", "30000"},
    {"reconnect.backoff.max.ms", "500"}};

static size_t mf__kafka_producer_ndefaults(const mf_kafka_prop_t *props,
                                           size_t n)
{
    size_t all = MF_ARRAY_SIZE(mf__kafka_producer_defaults);
    return mf__kafka_props_have(props, n, "reconnect.backoff.ms") ? all - 1
                                                                  : all;
}

static bool mf__kafka_same_props(const mf_kafka_t *k,
                                 const mf_kafka_prop_t *props, size_t n)
{
    if (k->nprops != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!props[i].name || !props[i].value ||
            strcmp(k->props[i].name, props[i].name) != 0 ||
            strcmp(k->props[i].value, props[i].value) != 0)
            return false;
    return true;
}

static char *mf__kafka_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mf_xmalloc(n), s, n);
}

static void mf__kafka_handle_free(mf_kafka_t *k)
{
    for (size_t i = 0; i < k->nprops; i++) {
        mf_free((void *)k->props[i].name);
        mf_free((void *)k->props[i].value);
    }
    mf_free(k->props);
    mf_free(k);
}

static rd_kafka_t *mf__kafka_new_rk(mf_kafka_t *k, const mf_kafka_prop_t *props,
                                    size_t n, char *errbuf, size_t errlen)
{
    if (!mf__kafka_props_have(props, n, "bootstrap.servers") &&
        !mf__kafka_props_have(props, n, "metadata.broker.list")) {
        snprintf(errbuf, errlen, "bootstrap.servers: required");
        return NULL;
    }
    rd_kafka_conf_t *conf = mf__kafka_conf_new(
        props, n, mf__kafka_producer_defaults,
        mf__kafka_producer_ndefaults(props, n), errbuf, errlen);
    if (!conf)
        return NULL;
    rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR |
                                       RD_KAFKA_EVENT_CREATETOPICS_RESULT);
    rd_kafka_conf_set_background_event_cb(conf, mf__kafka_background);
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errbuf, errlen);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    return rk;
}

static mf_kafka_t *mf__kafka_handle_new(const mf_kafka_prop_t *props, size_t n,
                                        char *errbuf, size_t errlen)
{
    mf_kafka_t *k = mf_xcalloc(1, sizeof *k);
    atomic_init(&k->in_flight, 0);
    atomic_init(&k->admin_out, 0);
    k->props = mf_xcalloc(n ? n : 1, sizeof *k->props);
    for (size_t i = 0; i < n; i++) {
        if (!props[i].name || !props[i].value)
            break; /* mf__kafka_conf_new refuses it below, by name */
        k->props[i].name = mf__kafka_strdup(props[i].name);
        k->props[i].value = mf__kafka_strdup(props[i].value);
        k->nprops = i + 1;
    }
    k->rk = mf__kafka_new_rk(k, props, n, errbuf, errlen);
    if (!k->rk) {
        mf__kafka_handle_free(k);
        return NULL;
    }
    k->waker = mf__kafka_waker_new(k, errbuf, errlen);
    if (!k->waker) {
        rd_kafka_destroy(k->rk);
        mf__kafka_handle_free(k);
        return NULL;
    }
    k->refs = 1;
    return k;
}

mf_kafka_t *mf_kafka_open(const mf_kafka_prop_t *props, size_t n, char *errbuf,
                          size_t errlen)
{
    pthread_mutex_lock(&mf__kafka_registry_lock);
    mf_kafka_t *k = mf__kafka_registry;
    while (k && !mf__kafka_same_props(k, props, n))
        k = k->next;
    if (k) {
        k->refs++;
    } else if ((k = mf__kafka_handle_new(props, n, errbuf, errlen)) != NULL) {
        k->next = mf__kafka_registry;
        mf__kafka_registry = k;
    }
    pthread_mutex_unlock(&mf__kafka_registry_lock);
    return k;
}

static void mf__kafka_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded) until the background thread has handed every report out:
 * after rd_kafka_destroy, what is left on its queue is dropped unseen. */
static void mf__kafka_drain_reports(mf_kafka_t *k, int max_ms)
{
    for (int waited = 0; waited < max_ms; waited++) {
        if (atomic_load(&k->in_flight) == 0 && atomic_load(&k->admin_out) == 0)
            return;
        mf__kafka_sleep_ms(1);
    }
    fprintf(stderr,
            "moonflow: kafka: %u messages and %u admin requests still out at "
            "close\n",
            atomic_load(&k->in_flight), atomic_load(&k->admin_out));
}

static void mf__kafka_handle_close(mf_kafka_t *k, int timeout_ms)
{
    /* No loop may be left to poll (this one may be the poller, blocked
     * here): the background thread takes what remains. */
    mf__kafka_waker_close(k->waker);
    if (atomic_load(&k->in_flight) > 0)
        rd_kafka_flush(k->rk, timeout_ms > 0 ? timeout_ms : 0);
    /* What flush left fails with _PURGE_*: MF_ECLOSED on its loop. */
    rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    mf__kafka_drain_reports(k, 5000);
    mf__kafka_waker_release(k->waker);
    rd_kafka_destroy(k->rk);
    mf__kafka_handle_free(k);
}

void mf_kafka_close(mf_kafka_t *k, int timeout_ms)
{
    if (!k)
        return;
    pthread_mutex_lock(&mf__kafka_registry_lock);
    bool last = --k->refs == 0;
    if (last) {
        mf_kafka_t **p = &mf__kafka_registry;
        while (*p != k)
            p = &(*p)->next;
        *p = k->next;
    }
    pthread_mutex_unlock(&mf__kafka_registry_lock);
    if (last)
        mf__kafka_handle_close(k, timeout_ms);
}
