/*
 * lua/serve/observe.c — the worker's task observer (moonflow/task.h):
 * every task of the worker's loop, at its start and at its result, goes to
 * the metrics (its count and duration by kind and state, metrics.c) and,
 * when it was made for a traced request, to that request's trace
 * (trace.c). Set only when the config turns either on: otherwise a task
 * costs the engine one branch at each end and nothing here.
 *
 * Owns: nothing (the observer struct is the worker's). May call: metrics.c
 * and trace.c.
 */
#include "serve.h"

static void mf__observe_started(void *ud, mf_task_t *task)
{
    (void)ud;
    if (mf_task_trace(task)) /* only serve's traces are set on its loops */
        mf_serve_trace_started(task);
}

static void mf__observe_finished(void *ud, mf_task_t *task, uint64_t ns)
{
    mf_serve_worker_t *w = ud;
    if (w->mstate)
        mf_serve_metrics_task(w, task, ns);
    if (mf_task_trace(task))
        mf_serve_trace_finished(task, ns);
}

void mf_serve_observe_open(mf_serve_worker_t *w)
{
    if (!w->mstate && w->trace_fd < 0)
        return;
    w->observer = (mf_task_observer_t){
        w->trace_fd >= 0 ? mf__observe_started : NULL, mf__observe_finished, w};
    mf_loop_observe_tasks(w->loop, &w->observer);
}

void mf_serve_observe_close(mf_serve_worker_t *w)
{
    mf_loop_observe_tasks(w->loop, NULL);
}
