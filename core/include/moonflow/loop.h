/*
 * moonflow/loop.h — the event loop: one per thread, nothing shared.
 *
 * A loop owns an epoll instance (edge-triggered), a timer min-heap, a mailbox
 * (eventfd + lock-free MPSC queue) that other threads post to, a same-thread
 * deferred queue, the ready queue of finished tasks, and a per-loop allocator
 * with size-class free lists for tasks, series and other hot objects.
 *
 * Each iteration runs fixed phases: update time, expired timers, mailbox,
 * deferred callbacks and finished tasks (bounded), then poll for I/O.
 *
 * Threads: every function here must be called on the loop's own thread,
 * except mf_loop_post and mf_loop_stop, which are safe from any thread.
 *
 * Ownership: mf_io_t, mf_timer_t and mf_post_t are embedded by their users;
 * the loop only links them and never frees them. The user keeps them alive
 * while started/posted. Objects from mf_loop_alloc belong to the loop and go
 * back with mf_loop_free on the same loop.
 */
#ifndef MOONFLOW_LOOP_H
#define MOONFLOW_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "list.h"

MF_EXTERN_C_BEGIN

typedef struct mf_loop mf_loop_t;
typedef struct mf_pool mf_pool_t;

/* ---- I/O watchers --------------------------------------------------- */

enum {
    MF_IO_READ = 1,  /* EPOLLIN */
    MF_IO_WRITE = 4, /* EPOLLOUT */
    MF_IO_ERROR = 8, /* EPOLLERR (reported, never requested) */
    MF_IO_HUP = 16,  /* EPOLLHUP (reported, never requested) */
    MF_IO_RDHUP = 32 /* EPOLLRDHUP: the peer shut down writing (with READ) */
};

typedef struct mf_io mf_io_t;
/* Called on the loop thread with the MF_IO_* bits that became ready. The
 * watcher is edge-triggered: read/write until EAGAIN before returning. */
typedef void (*mf_io_cb)(mf_io_t *io, unsigned events);

struct mf_io {
    int fd;
    unsigned _events; /* registered interest; 0 when stopped */
    bool _unref;      /* does not keep mf_loop_run alive */
    mf_io_cb cb;
    void *data; /* user data */
};

MF_API void mf_io_init(mf_io_t *io, int fd, mf_io_cb cb, void *data);
/* Registers or changes the interest set (MF_IO_READ|MF_IO_WRITE). Returns 0 or
 * a negative MF_E* code. A started watcher keeps mf_loop_run alive. */
MF_API int mf_io_start(mf_loop_t *loop, mf_io_t *io, unsigned events);
/* Unregisters; safe to call on a stopped watcher and from its callback. */
MF_API void mf_io_stop(mf_loop_t *loop, mf_io_t *io);
/* Whether a started watcher keeps mf_loop_run(MF_RUN_DEFAULT) alive
 * (default: yes). Pools unref their idle connections. */
MF_API void mf_io_set_ref(mf_loop_t *loop, mf_io_t *io, bool ref);

/* ---- Timers ---------------------------------------------------------- */

typedef struct mf_timer mf_timer_t;
typedef void (*mf_timer_cb)(mf_timer_t *timer);

struct mf_timer {
    uint64_t _deadline; /* loop time in ms */
    uint64_t _seq;      /* insertion order: equal deadlines fire FIFO */
    uint32_t _index;    /* position in the heap; UINT32_MAX when stopped */
    bool _unref;        /* does not keep mf_loop_run alive */
    mf_timer_cb cb;
    void *data;
};

MF_API void mf_timer_init(mf_timer_t *timer, mf_timer_cb cb, void *data);
/* (Re)arms the timer to fire once, timeout_ms after the loop's current time.
 * O(log n). A running timer keeps mf_loop_run alive. */
MF_API void mf_timer_start(mf_loop_t *loop, mf_timer_t *timer,
                           uint64_t timeout_ms);
/* Disarms; O(log n); harmless when not running. */
MF_API void mf_timer_stop(mf_loop_t *loop, mf_timer_t *timer);
/* Whether the timer keeps mf_loop_run(MF_RUN_DEFAULT) alive while running
 * (default: yes). Set before starting it. */
MF_API void mf_timer_set_ref(mf_loop_t *loop, mf_timer_t *timer, bool ref);
static inline bool mf_timer_active(const mf_timer_t *timer)
{
    return timer->_index != UINT32_MAX;
}

/* ---- Posted callbacks (mailbox and deferred queue) ------------------- */

typedef struct mf_post mf_post_t;
typedef void (*mf_post_cb)(mf_post_t *post);

/* The link is embedded so that posting never allocates (Workflow's msgqueue
 * linkoff). A post may be reused once its callback has started. */
struct mf_post {
    struct mf_post *_next; /* mailbox link (atomic) */
    mf_list_t _link;       /* deferred-queue link */
    mf_post_cb cb;
    void *data;
};

static inline void mf_post_init(mf_post_t *post, mf_post_cb cb, void *data)
{
    post->_next = NULL;
    mf_list_init(&post->_link);
    post->cb = cb;
    post->data = data;
}

/* ---- The loop -------------------------------------------------------- */

typedef enum mf_run_mode {
    MF_RUN_DEFAULT, /* until stopped or nothing keeps the loop alive */
    MF_RUN_ONCE,    /* one iteration, blocking for I/O if needed */
    MF_RUN_NOWAIT,  /* one iteration, never blocking */
    MF_RUN_FOREVER  /* until mf_loop_stop, even with nothing to do */
} mf_run_mode_t;

/* Creates a loop. Returns NULL only if the kernel refuses epoll/eventfd. */
MF_API mf_loop_t *mf_loop_create(void);
/* Frees the loop and all memory of its allocator. Call after the loop has
 * stopped running; every user object must already be stopped. */
MF_API void mf_loop_destroy(mf_loop_t *loop);
/* Runs iterations per mode. Returns 0 when the loop became idle or stopped,
 * 1 when MF_RUN_ONCE/NOWAIT returned with work still alive. */
MF_API int mf_loop_run(mf_loop_t *loop, mf_run_mode_t mode);
/* Asks the loop to return from mf_loop_run after the current iteration.
 * Thread-safe. */
MF_API void mf_loop_stop(mf_loop_t *loop);

/* Posts a callback to run on the loop's thread. Safe from any thread,
 * lock-free, never allocates; wakes the loop with its eventfd only when it
 * may be sleeping. Ordering: FIFO per posting thread. */
MF_API void mf_loop_post(mf_loop_t *loop, mf_post_t *post);
/* Same-thread deferral: runs the callback in the loop's next deferred phase,
 * never inside the caller. Loop thread only. */
MF_API void mf_loop_defer(mf_loop_t *loop, mf_post_t *post);

/* Cached loop time in milliseconds (CLOCK_MONOTONIC), updated per iteration. */
MF_API uint64_t mf_loop_now(const mf_loop_t *loop);
/* The same cached clock read in nanoseconds: where the loop's time is
 * turned into another clock's (the epoch for ngx.now), the milliseconds'
 * truncation would be counted twice. */
MF_API uint64_t mf_loop_now_ns(const mf_loop_t *loop);
/* The time now in nanoseconds of CLOCK_MONOTONIC (a clock read, not the
 * loop's cached time), for durations finer than a millisecond; any thread. */
MF_API uint64_t mf_monotonic_ns(void);
MF_API void mf_loop_update_time(mf_loop_t *loop);

/* Keeps mf_loop_run(MF_RUN_DEFAULT) alive for work the loop cannot see (e.g.
 * a job running on the compute pool). Every ref is matched by an unref. */
MF_API void mf_loop_ref(mf_loop_t *loop);
MF_API void mf_loop_unref(mf_loop_t *loop);

/* True when called on the thread currently running this loop. */
MF_API bool mf_loop_on_thread(const mf_loop_t *loop);

/* The compute pool that go tasks started on this loop use (not owned). */
MF_API void mf_loop_set_pool(mf_loop_t *loop, mf_pool_t *pool);
MF_API mf_pool_t *mf_loop_pool(const mf_loop_t *loop);

/* Worker index this loop serves (0 for a standalone loop). */
MF_API unsigned mf_loop_index(const mf_loop_t *loop);
MF_API void mf_loop_set_index(mf_loop_t *loop, unsigned index);

/* ---- Loop-local storage ----------------------------------------------
 *
 * Modules with per-loop state (the DNS resolver, the HTTP client's pools,
 * TLS contexts, a Lua host ...) keep it in the loop under a key of their
 * own, created lazily on first use; the engine knows none of them.
 *
 * Rank convention (prose, not an enum: each module defines its rank beside
 * its key). Higher ranks are destroyed first, so a value whose teardown
 * still calls into another's ranks above it:
 *   10..19  services any other value's teardown may still use (the DNS
 *           resolver);
 *   20..39  protocol clients' per-loop state (connection pools, TLS
 *           contexts, registries), then the keepalive pool of streams
 *           above them, which closes streams of all of them;
 *   40+     bindings that drive everything above (the Lua host). */

/* A per-loop value's destructor: runs in mf_loop_destroy while the loop can
 * still stop watchers and timers. */
typedef void (*mf_loop_value_dtor)(mf_loop_t *loop, void *value);
/* A key names one kind of per-loop value (as pthread_key_t names a thread's);
 * a module keeps one static key. Its id is taken at first use, once, from a
 * process-wide counter (atomic: workers may race). rank orders teardown:
 * mf_loop_destroy runs the dtors of higher ranks first (a module above
 * another picks a higher rank), equal ranks newest-key-first. At most
 * MF_LOOP_KEYS keys per process; one more aborts. */
typedef struct mf_loop_key {
    unsigned _id; /* 0 until first use (accessed atomically) */
    int rank;
    mf_loop_value_dtor dtor;
} mf_loop_key_t;
/* clang-format off */
#define MF_LOOP_KEY_INIT(rank, dtor) { 0, (rank), (dtor) }
/* clang-format on */
#define MF_LOOP_KEYS 64
/* The loop's value under key; NULL until set. Cheap: one relaxed load and
 * an index. Loop thread only. */
MF_API void *mf_loop_get(const mf_loop_t *loop, mf_loop_key_t *key);
/* Sets (or with NULL clears) the loop's value under key; the loop calls the
 * key's dtor on a non-NULL value when it is destroyed. Loop thread only. */
MF_API void mf_loop_set(mf_loop_t *loop, mf_loop_key_t *key, void *value);

/* Per-loop allocator: size-class free lists carved from large slabs. No
 * malloc once the working set is warm. Loop thread only; sizes above
 * MF_LOOP_ALLOC_MAX fall through to mf_xmalloc. The same size must be passed
 * to mf_loop_free. Never fails (aborts on OOM like mf_xmalloc). */
#define MF_LOOP_ALLOC_MAX 16384
MF_API void *mf_loop_alloc(mf_loop_t *loop, size_t size);
MF_API void mf_loop_free(mf_loop_t *loop, void *p, size_t size);

MF_EXTERN_C_END

#endif /* MOONFLOW_LOOP_H */
