/*
 * moonflow/tasks.h — the built-in task kinds: empty, timer, counter, go.
 *
 * Every factory returns a created (idle) task owned by the caller until it
 * is pushed onto a series or started (see task.h). Factories never fail on
 * bad input: problems show in the task's completion (e.g. a go task on a loop
 * without a compute pool ends MF_STATE_SYS_ERROR / MF_ENOPOOL).
 */
#ifndef MOONFLOW_TASKS_H
#define MOONFLOW_TASKS_H

#include "task.h"

/* Done as soon as it is dispatched (Workflow's empty task): a placeholder or
 * a synchronisation point in a flow. */
MF_API mf_task_t *mf_task_empty_create(mf_loop_t *loop, mf_task_cb cb,
                                       void *user);

/* Done after ms milliseconds of loop time. Canceled early: MF_STATE_CANCELED.
 */
MF_API mf_task_t *mf_task_timer_create(mf_loop_t *loop, uint64_t ms,
                                       mf_task_cb cb, void *user);

/* Done when mf_task_counter_count has been called target times (counts made
 * before the task starts are kept). target 0: done at once. Counting after
 * the task is done is a bug: the task no longer exists. Loop thread only;
 * from another thread, post to the loop and count there. */
MF_API mf_task_t *mf_task_counter_create(mf_loop_t *loop, unsigned target,
                                         mf_task_cb cb, void *user);
MF_API void mf_task_counter_count(mf_task_t *counter);

/* Runs fn(arg) on the loop's compute pool; the task completes on the loop
 * that started it. fn must not touch loop objects (it runs on another
 * thread). A per-task timeout ends the task early, but fn runs to its end. */
typedef void (*mf_go_fn)(void *arg);
MF_API mf_task_t *mf_task_go_create(mf_loop_t *loop, mf_go_fn fn, void *arg,
                                    mf_task_cb cb, void *user);

#endif /* MOONFLOW_TASKS_H */
