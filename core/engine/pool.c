/*
 * pool.c — the compute pool: a FIFO of embedded jobs under one mutex, and M
 * threads. The critical section is a pointer push or pop (and the counts
 * of mf_pool_stats); the jobs' completions go back through the lock-free
 * mailbox of their loops. A thread takes the mutex once more after each
 * job, to count it done.
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

static mf_pool_job_t *mf__pool_take(mf_pool_t *pool)
{
    pthread_mutex_lock(&pool->mutex);
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

/* A thread is through with its job. */
static void mf__pool_done(mf_pool_t *pool)
{
    pthread_mutex_lock(&pool->mutex);
    pool->active--;
    pool->completed++;
    pthread_mutex_unlock(&pool->mutex);
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
    while ((job = mf__pool_take(pool)) != NULL) {
        job->fn(job);
        mf__pool_done(pool);
        mf_post_init(&job->_post, mf__pool_job_delivered, job);
        mf_loop_post(job->_loop, &job->_post);
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
