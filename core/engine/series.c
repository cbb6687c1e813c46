/*
 * series.c — ordered queues of tasks.
 */
#include "flow_int.h"
#include "loop_int.h"

static void mf__series_started(mf_post_t *post);
static unsigned mf__series_run_ready(mf_loop_t *loop, unsigned budget);

void mf__series_init(mf_series_t *series, mf_loop_t *loop, mf_series_cb cb)
{
    series->loop = loop;
    mf_list_init(&series->queue);
    series->current = NULL;
    series->cb = cb;
    series->cb_arg = NULL;
    series->context = NULL;
    series->parent_ops = NULL;
    series->parent = NULL;
    series->finished = 0;
    series->state = MF_STATE_SUCCESS;
    series->error = 0;
    series->canceled = false;
    mf_post_init(&series->start_post, mf__series_started, series);
    /* Every task that reaches the ready queue was dispatched by a series,
     * so the loop has its ready phase by then (the loop names no flow
     * function). */
    loop->run_ready = mf__series_run_ready;
}

mf_series_t *mf_series_create(mf_loop_t *loop, mf_series_cb cb)
{
    mf_series_t *series = mf_loop_alloc(loop, sizeof(*series));
    mf__series_init(series, loop, cb);
    return series;
}

void mf_series_push_back(mf_series_t *series, mf_task_t *task)
{
    task->_series = series;
    mf_list_push_back(&series->queue, &task->_link);
}

void mf_series_push_front(mf_series_t *series, mf_task_t *task)
{
    task->_series = series;
    mf_list_push_front(&series->queue, &task->_link);
}

/* Top-level series start on the next loop phase, never inside the caller. */
void mf_series_start(mf_series_t *series)
{
    mf_loop_defer(series->loop, &series->start_post);
}

static void mf__series_started(mf_post_t *post)
{
    mf__series_advance(post->data);
}

void mf_series_cancel(mf_series_t *series)
{
    series->canceled = true;
}

bool mf_series_canceled(const mf_series_t *series)
{
    return series->canceled;
}

static void mf__series_drop_pending(mf_series_t *series)
{
    mf_list_t *node;
    while ((node = mf_list_pop_front(&series->queue)) != NULL)
        mf_task_destroy(mf_container_of(node, mf_task_t, _link));
}

/* Every task of the series has run (or the rest was canceled). */
static void mf__series_done(mf_series_t *series)
{
    if (series->cb)
        series->cb(series);
    /* Tasks pushed by the series callback itself have nowhere to run. */
    mf__series_drop_pending(series);
    if (series->parent_ops)
        series->parent_ops->series_done(series->parent, series);
    else
        mf__series_destroy(series);
}

void mf__series_advance(mf_series_t *series)
{
    if (series->canceled && !mf_list_empty(&series->queue)) {
        mf__series_drop_pending(series);
        if (series->state == MF_STATE_SUCCESS) {
            series->state = MF_STATE_CANCELED;
            series->error = MF_ECANCELED;
        }
    }
    mf_list_t *node = mf_list_pop_front(&series->queue);
    if (!node) {
        mf__series_done(series);
        return;
    }
    mf_task_t *task = mf_container_of(node, mf_task_t, _link);
    series->current = task;
    mf__task_dispatch(task);
}

/* The loop's ready phase: up to budget finished tasks, oldest first, each
 * finished (task.c: callback, release), then its series takes its next
 * step. */
static unsigned mf__series_run_ready(mf_loop_t *loop, unsigned budget)
{
    unsigned ran = 0;
    mf_list_t *node;
    while (ran < budget && (node = mf_list_pop_front(&loop->ready)) != NULL) {
        mf_task_t *task = mf_container_of(node, mf_task_t, _link);
        mf_series_t *series = task->_series; /* the task may be released */
        mf__task_finish(task);
        mf__series_advance(series);
        ran++;
    }
    return ran;
}

void mf_task_start(mf_task_t *task)
{
    mf_series_t *series = mf_series_create(task->_loop, NULL);
    mf_series_push_back(series, task);
    mf_series_start(series);
}

void mf__series_close(mf_series_t *series)
{
    mf__series_drop_pending(series);
}

void mf__series_destroy(mf_series_t *series)
{
    mf__series_drop_pending(series);
    mf_loop_free(series->loop, series, sizeof(*series));
}

void mf_series_set_callback_arg(mf_series_t *series, void *arg)
{
    series->cb_arg = arg;
}

void *mf_series_callback_arg(const mf_series_t *series)
{
    return series->cb_arg;
}

void mf_series_set_context(mf_series_t *series, void *context)
{
    series->context = context;
}

void *mf_series_context(const mf_series_t *series)
{
    return series->context;
}

int mf_series_state(const mf_series_t *series)
{
    return series->state;
}

int mf_series_error(const mf_series_t *series)
{
    return series->error;
}

size_t mf_series_finished_count(const mf_series_t *series)
{
    return series->finished;
}

mf_loop_t *mf_series_loop(const mf_series_t *series)
{
    return series->loop;
}

void mf__series_abort(mf_series_t *series)
{
    series->canceled = true;
    if (series->current)
        mf_task_cancel(series->current);
}
