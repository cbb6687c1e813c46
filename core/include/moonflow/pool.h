/*
 * moonflow/pool.h — the compute pool: M threads for blocking and CPU work.
 *
 * A job is embedded by its owner (the go task, a file read ...). The pool
 * runs job->fn on one of its threads, then posts the job back to the loop
 * that submitted it, where job->done runs: completions always land on the
 * submitting thread. Submitting never allocates. The pool keeps the
 * submitting loop alive (mf_loop_ref) while a job is out.
 *
 * Threads: mf_pool_submit from any loop thread; create/destroy from the
 * owner thread. Ownership: the pool never frees jobs.
 */
#ifndef MOONFLOW_POOL_H
#define MOONFLOW_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "loop.h"

MF_EXTERN_C_BEGIN

typedef struct mf_pool_job mf_pool_job_t;

struct mf_pool_job {
    struct mf_pool_job *_next;
    mf_loop_t *_loop;
    mf_post_t _post;
    void (*fn)(mf_pool_job_t *job);   /* runs on a pool thread */
    void (*done)(mf_pool_job_t *job); /* then on the submitting loop */
};

/* Starts nthreads threads (0: number of online cores). NULL on failure. */
MF_API mf_pool_t *mf_pool_create(unsigned nthreads);
/* Runs every queued job, then joins the threads and frees the pool. The
 * jobs' completions are posted to their loops, which must still exist (they
 * need not be running). */
MF_API void mf_pool_destroy(mf_pool_t *pool);
MF_API unsigned mf_pool_threads(const mf_pool_t *pool);

/* What the pool is doing (a backlog is the first sign of a blocked pool). */
typedef struct mf_pool_stats {
    unsigned threads;
    size_t queued;      /* jobs waiting for a thread */
    unsigned active;    /* jobs running */
    uint64_t completed; /* jobs run since the pool started (a job counts
                           once its thread is back for the next one) */
} mf_pool_stats_t;
/* Any thread; takes the pool's mutex for a moment. */
MF_API void mf_pool_stats(mf_pool_t *pool, mf_pool_stats_t *out);
/* Queues the job (fn and done set by the caller). Loop thread of `loop`. */
MF_API void mf_pool_submit(mf_pool_t *pool, mf_loop_t *loop,
                           mf_pool_job_t *job);

MF_EXTERN_C_END

#endif /* MOONFLOW_POOL_H */
