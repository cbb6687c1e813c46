/*
 * moonflow/tasks.h — the basic task kinds: empty, timer, counter (the go task
 * is in go.h).
 *
 * Every factory returns a created (idle) task owned by the caller until it
 * is pushed onto a series or started (see task.h). Factories never fail on
 * bad input: problems show in the task's completion (e.g. a go task on a loop
 * without a compute pool ends MF_STATE_SYS_ERROR / MF_ENOPOOL).
 */
#ifndef MOONFLOW_TASKS_H
#define MOONFLOW_TASKS_H

#include "task.h"

MF_EXTERN_C_BEGIN

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

MF_EXTERN_C_END

#endif /* MOONFLOW_TASKS_H */
