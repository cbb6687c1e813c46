/*
 * task.c — task lifecycle: dispatch, completion, timeout, cancel, release.
 *
 * A task's memory is released only when both sides are through with it: the
 * flow (its callback has run) and the kind (it called mf_task_complete). They
 * differ when a timeout or cancel decides the result while the operation is
 * still out (a go task running on the pool): the flow moves on at once and
 * the late completion frees the task.
 */
#include "flow_int.h"
#include "loop_int.h"

static void mf__task_timed_out(mf_timer_t *timer);

void mf_task_init(mf_task_t *task, const mf_task_ops_t *ops, mf_loop_t *loop,
                  mf_task_cb cb, void *user)
{
    task->_ops = ops;
    task->_loop = loop;
    task->_series = NULL;
    mf_list_init(&task->_link);
    task->_cb = cb;
    task->user = user;
    task->_state = MF_STATE_SUCCESS;
    task->_error = 0;
    task->_flags = 0;
    task->_timeout_ms = 0;
    task->_started_ns = 0;
    task->_trace = loop->trace;
    if (MF_UNLIKELY(task->_trace != NULL))
        task->_trace->refs++;
    mf_timer_init(&task->_timer, mf__task_timed_out, task);
}

mf_task_trace_t *mf_loop_set_trace(mf_loop_t *loop, mf_task_trace_t *trace)
{
    mf_task_trace_t *prev = loop->trace;
    loop->trace = trace;
    return prev;
}

void mf_task_trace_unref(mf_task_trace_t *trace)
{
    if (--trace->refs == 0)
        trace->release(trace);
}

mf_task_t *mf_task_parent(const mf_task_t *task)
{
    const mf_series_t *s = task->_series;
    return s ? s->parent : NULL;
}

void mf_loop_observe_tasks(mf_loop_t *loop, const mf_task_observer_t *observer)
{
    loop->observer = observer;
}

static void mf__observe_start(const mf_task_observer_t *o, mf_task_t *task)
{
    task->_started_ns = mf_monotonic_ns();
    if (o->started)
        o->started(o->ud, task);
}

static void mf__observe_end(const mf_task_observer_t *o, mf_task_t *task)
{
    if (o->finished)
        o->finished(o->ud, task, mf_monotonic_ns() - task->_started_ns);
}

/* Records the result once and queues the task for its callback. */
static void mf__task_decide(mf_task_t *task, int state, int error)
{
    task->_flags |= MF_TASK_F_FINISHED;
    task->_state = state;
    task->_error = error;
    mf_loop_t *loop = task->_loop;
    mf_timer_stop(loop, &task->_timer);
    mf_list_push_back(&loop->ready, &task->_link);
}

static void mf__task_release(mf_task_t *task)
{
    mf_task_trace_t *trace = task->_trace;
    task->_ops->destroy(task);
    if (MF_UNLIKELY(trace != NULL))
        mf_task_trace_unref(trace);
}

void mf_task_complete(mf_task_t *task, int state, int error)
{
    task->_flags |= MF_TASK_F_KIND_DONE;
    if (task->_flags & MF_TASK_F_FLOW_DONE) {
        mf__task_release(task); /* late completion after a timeout */
        return;
    }
    if (task->_flags & MF_TASK_F_FINISHED)
        return; /* timeout or cancel decided first; finish will release */
    mf__task_decide(task, state, error);
}

/* Decides a result the kind did not produce, then asks the kind to stop. */
static void mf__task_abandon(mf_task_t *task, int state, int error)
{
    mf__task_decide(task, state, error);
    if (task->_ops->cancel && !(task->_flags & MF_TASK_F_KIND_DONE))
        task->_ops->cancel(task);
}

static void mf__task_timed_out(mf_timer_t *timer)
{
    mf_task_t *task = timer->data;
    mf__task_abandon(task, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
}

void mf_task_cancel(mf_task_t *task)
{
    if (!(task->_flags & MF_TASK_F_STARTED)) {
        task->_flags |= MF_TASK_F_CANCEL;
        return;
    }
    if (task->_flags & MF_TASK_F_FINISHED)
        return;
    mf__task_abandon(task, MF_STATE_CANCELED, MF_ECANCELED);
}

void mf__task_dispatch(mf_task_t *task)
{
    task->_flags |= MF_TASK_F_STARTED;
    if (MF_UNLIKELY(task->_loop->observer != NULL))
        mf__observe_start(task->_loop->observer, task);
    if (task->_flags & MF_TASK_F_CANCEL) {
        task->_flags |= MF_TASK_F_KIND_DONE;
        mf__task_decide(task, MF_STATE_CANCELED, MF_ECANCELED);
        return;
    }
    if (task->_timeout_ms)
        mf_timer_start(task->_loop, &task->_timer, task->_timeout_ms);
    task->_ops->dispatch(task);
}

void mf__task_finish(mf_task_t *task)
{
    mf_series_t *series = task->_series;
    if (task->_state != MF_STATE_SUCCESS && series->state == MF_STATE_SUCCESS) {
        series->state = task->_state;
        series->error = task->_error;
    }
    series->current = NULL;
    if (MF_UNLIKELY(task->_started_ns != 0) && task->_loop->observer)
        mf__observe_end(task->_loop->observer, task);
    if (task->_cb)
        task->_cb(task);
    series->finished++;
    if (task->_flags & MF_TASK_F_KIND_DONE)
        mf__task_release(task);
    else
        task->_flags |= MF_TASK_F_FLOW_DONE;
}

void mf_task_destroy(mf_task_t *task)
{
    if (task)
        mf__task_release(task);
}
