/*
 * parallel.c — a task that runs several series side by side.
 *
 * The parallel owns its series and keeps them (finished, empty) until the
 * parallel itself is destroyed, after its callback: that is how the callback
 * reads each series' state, error and context.
 */
#include "flow_int.h"
#include "loop_int.h"
#include "moonflow/parallel.h"

#define MF_PARALLEL_INLINE 4

struct mf_parallel {
    mf_task_t task; /* first: a parallel is a task */
    mf_series_t **series;
    size_t count;
    size_t capacity;
    size_t nleft;
    mf_series_t *inline_series[MF_PARALLEL_INLINE];
};

/* A branch has finished: the last one completes the parallel. */
static void mf__parallel_series_done(mf_task_t *task, mf_series_t *series)
{
    mf_parallel_t *par = (mf_parallel_t *)task;
    (void)series;
    if (--par->nleft == 0)
        mf_task_complete(&par->task, MF_STATE_SUCCESS, 0);
}

static const mf_series_parent_ops_t mf__parallel_parent_ops = {
    mf__parallel_series_done};

static void mf__parallel_dispatch(mf_task_t *task)
{
    mf_parallel_t *par = (mf_parallel_t *)task;
    par->nleft = par->count;
    if (par->count == 0) {
        mf_task_complete(task, MF_STATE_SUCCESS, 0);
        return;
    }
    /* Copy the count: an empty series may finish inside the loop below. */
    size_t count = par->count;
    for (size_t i = 0; i < count; i++)
        mf__series_advance(par->series[i]);
}

/* Timeout or cancel: stop every branch; the parallel completes (for the
 * kind's side) when the last branch has wound down. */
static void mf__parallel_cancel(mf_task_t *task)
{
    mf_parallel_t *par = (mf_parallel_t *)task;
    for (size_t i = 0; i < par->count; i++)
        mf__series_abort(par->series[i]);
}

static void mf__parallel_destroy(mf_task_t *task)
{
    mf_parallel_t *par = (mf_parallel_t *)task;
    mf_loop_t *loop = task->_loop;
    for (size_t i = 0; i < par->count; i++)
        mf__series_destroy(par->series[i]);
    if (par->series != par->inline_series)
        mf_loop_free(loop, par->series, par->capacity * sizeof(*par->series));
    mf_loop_free(loop, par, sizeof(*par));
}

static const mf_task_ops_t mf__parallel_ops = {
    "parallel", mf__parallel_dispatch, mf__parallel_cancel,
    mf__parallel_destroy};

mf_parallel_t *mf_parallel_create(mf_loop_t *loop, mf_task_cb cb, void *user)
{
    mf_parallel_t *par = mf_loop_alloc(loop, sizeof(*par));
    mf_task_init(&par->task, &mf__parallel_ops, loop, cb, user);
    par->series = par->inline_series;
    par->count = 0;
    par->capacity = MF_PARALLEL_INLINE;
    par->nleft = 0;
    return par;
}

static void mf__parallel_grow(mf_parallel_t *par)
{
    mf_loop_t *loop = par->task._loop;
    size_t capacity = par->capacity * 2;
    mf_series_t **grown = mf_loop_alloc(loop, capacity * sizeof(*grown));
    for (size_t i = 0; i < par->count; i++)
        grown[i] = par->series[i];
    if (par->series != par->inline_series)
        mf_loop_free(loop, par->series, par->capacity * sizeof(*par->series));
    par->series = grown;
    par->capacity = capacity;
}

void mf_parallel_add_series(mf_parallel_t *par, mf_series_t *series)
{
    if (par->count == par->capacity)
        mf__parallel_grow(par);
    series->parent_ops = &mf__parallel_parent_ops;
    series->parent = &par->task;
    par->series[par->count++] = series;
}

mf_series_t *mf_parallel_add_task(mf_parallel_t *par, mf_task_t *task)
{
    mf_series_t *series = mf_series_create(par->task._loop, NULL);
    mf_series_push_back(series, task);
    mf_parallel_add_series(par, series);
    return series;
}

size_t mf_parallel_size(const mf_parallel_t *par)
{
    return par->count;
}

mf_series_t *mf_parallel_series_at(const mf_parallel_t *par, size_t index)
{
    return index < par->count ? par->series[index] : NULL;
}

mf_task_t *mf_parallel_task(mf_parallel_t *par)
{
    return &par->task;
}

mf_parallel_t *mf_parallel_from_task(mf_task_t *task)
{
    return task->_ops == &mf__parallel_ops ? (mf_parallel_t *)task : NULL;
}

mf_parallel_t *mf_series_parallel(const mf_series_t *series)
{
    return series->parent_ops == &mf__parallel_parent_ops
               ? (mf_parallel_t *)series->parent
               : NULL;
}
