/*
 * moonflow/go.h — the go task: a C function run on the loop's compute pool.
 *
 * The factory returns a created (idle) task owned by the caller until it is
 * pushed onto a series or started (see task.h). A go task on a loop without
 * a compute pool ends MF_STATE_SYS_ERROR / MF_ENOPOOL; the factory never
 * fails. The function's argument stays the caller's.
 */
#ifndef MOONFLOW_GO_H
#define MOONFLOW_GO_H

#include "task.h"

MF_EXTERN_C_BEGIN

/* Runs fn(arg) on the loop's compute pool; the task completes on the loop
 * that started it. fn must not touch loop objects (it runs on another
 * thread). A per-task timeout ends the task early, but fn runs to its end. */
typedef void (*mf_go_fn)(void *arg);
MF_API mf_task_t *mf_task_go_create(mf_loop_t *loop, mf_go_fn fn, void *arg,
                                    mf_task_cb cb, void *user);

MF_EXTERN_C_END

#endif /* MOONFLOW_GO_H */
