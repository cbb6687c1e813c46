/*
 * moonflow/parallel.h — parallels: series side by side.
 *
 * A parallel is a task that holds several series and is done when all of
 * them are. Parallels go into series like any task, and series into
 * parallels, to any depth. Completion climbs this tree in a loop, never by
 * recursion, so depth and length do not grow the stack.
 *
 * Threads: loop thread only. Ownership: a parallel owns its series (and
 * keeps them until its own callback has run, so that callback can read every
 * series' result); the parallel itself belongs to the series it is pushed
 * on, like any task. Parallels come from the loop's free lists.
 */
#ifndef MOONFLOW_PARALLEL_H
#define MOONFLOW_PARALLEL_H

#include <stddef.h>

#include "series.h"

MF_EXTERN_C_BEGIN

/* A parallel is a task: its callback receives the mf_task_t; use
 * mf_parallel_from_task to get the parallel back. An empty parallel is done
 * at once. Its state is MF_STATE_SUCCESS; each series carries its own. */
MF_API mf_parallel_t *mf_parallel_create(mf_loop_t *loop, mf_task_cb cb,
                                         void *user);
/* Adds a series (the parallel takes ownership). Before the parallel starts. */
MF_API void mf_parallel_add_series(mf_parallel_t *par, mf_series_t *series);
/* Convenience: wraps the task in a new series and adds it. Returns it. */
MF_API mf_series_t *mf_parallel_add_task(mf_parallel_t *par, mf_task_t *task);
MF_API size_t mf_parallel_size(const mf_parallel_t *par);
MF_API mf_series_t *mf_parallel_series_at(const mf_parallel_t *par,
                                          size_t index);
MF_API mf_task_t *mf_parallel_task(mf_parallel_t *par);
MF_API mf_parallel_t *mf_parallel_from_task(mf_task_t *task);

MF_EXTERN_C_END

#endif /* MOONFLOW_PARALLEL_H */
