/*
 * workers.c — N loop threads sharing one compute pool; the wait group.
 */
#include <pthread.h>
#include <time.h>

#include "moonflow/workers.h"

typedef struct mf_worker {
    mf_loop_t *loop;
    pthread_t thread;
    bool started;
} mf_worker_t;

struct mf_workers {
    unsigned count;
    mf_worker_t *workers;
    mf_pool_t *pool;
};

typedef struct mf_worker_call {
    mf_post_t post;
    mf_loop_t *loop;
    mf_worker_fn fn;
    void *arg;
} mf_worker_call_t;

static void *mf__worker_main(void *arg)
{
    mf_worker_t *worker = arg;
    mf_loop_run(worker->loop, MF_RUN_FOREVER);
    return NULL;
}

static int mf__workers_start(mf_workers_t *w, unsigned npool)
{
    w->pool = mf_pool_create(npool);
    if (!w->pool)
        return -1;
    for (unsigned i = 0; i < w->count; i++) {
        mf_worker_t *worker = &w->workers[i];
        worker->loop = mf_loop_create();
        if (!worker->loop)
            return -1;
        mf_loop_set_pool(worker->loop, w->pool);
        mf_loop_set_index(worker->loop, i);
        if (pthread_create(&worker->thread, NULL, mf__worker_main, worker))
            return -1;
        worker->started = true;
    }
    return 0;
}

mf_workers_t *mf_workers_create(const mf_workers_opts_t *opts)
{
    mf_workers_t *w = mf_xcalloc(1, sizeof(*w));
    w->count = opts && opts->nloops ? opts->nloops : mf_cpu_count();
    w->workers = mf_xcalloc(w->count, sizeof(*w->workers));
    if (mf__workers_start(w, opts ? opts->npool : 0) < 0) {
        mf_workers_destroy(w);
        return NULL;
    }
    return w;
}

/* Loops stop first, so nothing submits to the pool while it drains; the
 * pool's last completions land in mailboxes nobody reads, and go with the
 * loops' memory. */
void mf_workers_destroy(mf_workers_t *w)
{
    if (!w)
        return;
    for (unsigned i = 0; i < w->count; i++)
        if (w->workers[i].started)
            mf_loop_stop(w->workers[i].loop);
    for (unsigned i = 0; i < w->count; i++)
        if (w->workers[i].started)
            pthread_join(w->workers[i].thread, NULL);
    mf_pool_destroy(w->pool);
    for (unsigned i = 0; i < w->count; i++)
        mf_loop_destroy(w->workers[i].loop);
    mf_free(w->workers);
    mf_free(w);
}

unsigned mf_workers_count(const mf_workers_t *w)
{
    return w->count;
}

mf_loop_t *mf_workers_loop(const mf_workers_t *w, unsigned index)
{
    return index < w->count ? w->workers[index].loop : NULL;
}

mf_pool_t *mf_workers_pool(const mf_workers_t *w)
{
    return w->pool;
}

static void mf__worker_call_run(mf_post_t *post)
{
    mf_worker_call_t *call = mf_container_of(post, mf_worker_call_t, post);
    call->fn(call->loop, call->arg);
    mf_free(call);
}

void mf_workers_call(mf_workers_t *w, unsigned index, mf_worker_fn fn,
                     void *arg)
{
    mf_worker_call_t *call = mf_xmalloc(sizeof(*call));
    call->loop = w->workers[index % w->count].loop;
    call->fn = fn;
    call->arg = arg;
    mf_post_init(&call->post, mf__worker_call_run, NULL);
    mf_loop_post(call->loop, &call->post);
}

/* ---- wait group ------------------------------------------------------- */

void mf_waitgroup_init(mf_waitgroup_t *wg, long count)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* timed waits */
    pthread_mutex_init(&wg->_mutex, NULL);
    pthread_cond_init(&wg->_cond, &attr);
    pthread_condattr_destroy(&attr);
    wg->_count = count;
}

void mf_waitgroup_add(mf_waitgroup_t *wg, long n)
{
    pthread_mutex_lock(&wg->_mutex);
    wg->_count += n;
    if (wg->_count <= 0)
        pthread_cond_broadcast(&wg->_cond);
    pthread_mutex_unlock(&wg->_mutex);
}

void mf_waitgroup_done(mf_waitgroup_t *wg)
{
    mf_waitgroup_add(wg, -1);
}

void mf_waitgroup_wait(mf_waitgroup_t *wg)
{
    pthread_mutex_lock(&wg->_mutex);
    while (wg->_count > 0)
        pthread_cond_wait(&wg->_cond, &wg->_mutex);
    pthread_mutex_unlock(&wg->_mutex);
}

long mf_waitgroup_wait_for(mf_waitgroup_t *wg, uint32_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&wg->_mutex);
    while (wg->_count > 0 &&
           pthread_cond_timedwait(&wg->_cond, &wg->_mutex, &until) == 0)
        ;
    long left = wg->_count > 0 ? wg->_count : 0;
    pthread_mutex_unlock(&wg->_mutex);
    return left;
}

void mf_waitgroup_close(mf_waitgroup_t *wg)
{
    pthread_cond_destroy(&wg->_cond);
    pthread_mutex_destroy(&wg->_mutex);
}
