/*
 * moonflow/workers.h — N worker threads, each running its own loop, plus one
 * shared compute pool; and a wait group to wait for them from outside.
 *
 * A connection, and every task it starts, lives on one worker for its whole
 * life: to hand work to worker k, post to its loop (mf_workers_call). The
 * workers object owns its loops and its pool.
 */
#ifndef MOONFLOW_WORKERS_H
#define MOONFLOW_WORKERS_H

#include <pthread.h>

#include "loop.h"
#include "pool.h"

MF_EXTERN_C_BEGIN

typedef struct mf_workers mf_workers_t;

typedef struct mf_workers_opts {
    unsigned nloops; /* 0: number of online cores */
    unsigned npool;  /* compute pool threads; 0: number of cores */
} mf_workers_opts_t;

/* Starts the threads; every loop runs MF_RUN_FOREVER. NULL on failure. */
MF_API mf_workers_t *mf_workers_create(const mf_workers_opts_t *opts);
/* Stops every loop after its current iteration, joins the threads, drains and
 * destroys the pool, destroys the loops. Flows still running are abandoned:
 * finish them first (a wait group) for a clean shutdown. */
MF_API void mf_workers_destroy(mf_workers_t *workers);
MF_API unsigned mf_workers_count(const mf_workers_t *workers);
MF_API mf_loop_t *mf_workers_loop(const mf_workers_t *workers, unsigned index);
MF_API mf_pool_t *mf_workers_pool(const mf_workers_t *workers);
/* Runs fn(loop, arg) on worker index's thread. Thread-safe. Allocates one
 * small message: for hot paths embed an mf_post_t and use mf_loop_post. */
typedef void (*mf_worker_fn)(mf_loop_t *loop, void *arg);
MF_API void mf_workers_call(mf_workers_t *workers, unsigned index,
                            mf_worker_fn fn, void *arg);

/* Wait group: a count that threads decrement; a waiter blocks until zero.
 * For the thread that owns the workers (main), never for a loop thread. */
typedef struct mf_waitgroup {
    pthread_mutex_t _mutex;
    pthread_cond_t _cond;
    long _count;
} mf_waitgroup_t;

MF_API void mf_waitgroup_init(mf_waitgroup_t *wg, long count);
MF_API void mf_waitgroup_add(mf_waitgroup_t *wg, long n);
MF_API void mf_waitgroup_done(mf_waitgroup_t *wg);
MF_API void mf_waitgroup_wait(mf_waitgroup_t *wg);
/* Waits at most ms for the count to reach zero; returns the count left
 * (0: done). */
MF_API long mf_waitgroup_wait_for(mf_waitgroup_t *wg, uint32_t ms);
MF_API void mf_waitgroup_close(mf_waitgroup_t *wg);

MF_EXTERN_C_END

#endif /* MOONFLOW_WORKERS_H */
