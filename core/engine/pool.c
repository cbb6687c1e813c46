/*
 * pool.c — the compute pool: a FIFO of embedded jobs under one mutex, and M
 * threads. The critical section is a pointer push or pop (and the counts
 * of mf_pool_stats: a job is counted done when its thread comes back for
 * the next one, under the same lock); the jobs' completions go back
 * through the lock-free mailbox of their loops.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "moonflow/pool.h"

struct mf_pool {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    mf_pool_job_t *head;
    mf_pool_job_t *tail;
    bool stopping;
    unsigned nthreads;
    pthread_t *threads;
    /* counted under the mutex the queue takes anyway (mf_pool_stats) */
    size_t queued;
    unsigned active;
    uint64_t completed;
};

static void mf__pool_job_delivered(mf_post_t *post)
{
    mf_pool_job_t *job = post->data;
    mf_loop_unref(job->_loop);
    job->done(job);
}

/* The next job; ran_one: the thread is through with its last one, counted
 * here under the lock the queue takes anyway. */
static mf_pool_job_t *mf__pool_take(mf_pool_t *pool, bool ran_one)
{
    pthread_mutex_lock(&pool->mutex);
    if (ran_one) {
        pool->active--;
        pool->completed++;
    }
    while (!pool->head && !pool->stopping)
        pthread_cond_wait(&pool->cond, &pool->mutex);
    mf_pool_job_t *job = pool->head;
    if (job) {
        pool->head = job->_next;
        if (!pool->head)
            pool->tail = NULL;
        pool->queued--;
        pool->active++;
    }
    pthread_mutex_unlock(&pool->mutex);
    return job;
}

void mf_pool_stats(mf_pool_t *pool, mf_pool_stats_t *out)
{
    pthread_mutex_lock(&pool->mutex);
    out->threads = pool->nthreads;
    out->queued = pool->queued;
    out->active = pool->active;
    out->completed = pool->completed;
    pthread_mutex_unlock(&pool->mutex);
}

static void *mf__pool_thread(void *arg)
{
    mf_pool_t *pool = arg;
    mf_pool_job_t *job;
    bool ran_one = false;
    while ((job = mf__pool_take(pool, ran_one)) != NULL) {
        job->fn(job);
        mf_post_init(&job->_post, mf__pool_job_delivered, job);
        mf_loop_post(job->_loop, &job->_post);
        ran_one = true;
    }
    return NULL;
}

mf_pool_t *mf_pool_create(unsigned nthreads)
{
    mf_pool_t *pool = mf_xcalloc(1, sizeof(*pool));
    pool->nthreads = nthreads ? nthreads : mf_cpu_count();
    pool->threads = mf_xcalloc(pool->nthreads, sizeof(*pool->threads));
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->cond, NULL);
    for (unsigned i = 0; i < pool->nthreads; i++) {
        if (pthread_create(&pool->threads[i], NULL, mf__pool_thread, pool)) {
            pool->nthreads = i;
            mf_pool_destroy(pool);
            return NULL;
        }
    }
    return pool;
}

void mf_pool_destroy(mf_pool_t *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mutex);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->mutex);
    for (unsigned i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->mutex);
    mf_free(pool->threads);
    mf_free(pool);
}

unsigned mf_pool_threads(const mf_pool_t *pool)
{
    return pool->nthreads;
}

void mf_pool_submit(mf_pool_t *pool, mf_loop_t *loop, mf_pool_job_t *job)
{
    job->_loop = loop;
    job->_next = NULL;
    mf_loop_ref(loop);
    pthread_mutex_lock(&pool->mutex);
    if (pool->tail)
        pool->tail->_next = job;
    else
        pool->head = job;
    pool->tail = job;
    pool->queued++;
    pthread_cond_signal(&pool->cond);
    pthread_mutex_unlock(&pool->mutex);
}
