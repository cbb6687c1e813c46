/*
 * moonflow/series.h — series: tasks run in order (parallels, series side by
 * side, are in parallel.h).
 *
 * Series: an ordered queue of tasks run one after the other. After each
 * task's callback the next task starts. A callback may push tasks to the
 * front or back of its own series (dynamic flows), read or set the series'
 * context, or cancel the rest. When the queue is empty the series' callback
 * runs, then the series is destroyed — unless it belongs to a parallel, which
 * keeps it until the parallel's own callback has run, so that callback can
 * read every series' result.
 *
 * A series' result is the state and error of its first task that did not
 * succeed (MF_STATE_SUCCESS when all did). A series canceled before all its
 * tasks ran, without any failure before, ends MF_STATE_CANCELED.
 *
 * Threads: loop thread only. Ownership: the series owns its queued tasks;
 * a parallel owns its series; the context pointer is the user's (never freed
 * by the engine). Series and parallels come from the loop's free lists.
 */
#ifndef MOONFLOW_SERIES_H
#define MOONFLOW_SERIES_H

#include <stddef.h>

#include "task.h"

MF_EXTERN_C_BEGIN

/* Runs when the series has no task left (or was canceled). */
typedef void (*mf_series_cb)(mf_series_t *series);

/* Creates an empty, idle series on the loop. */
MF_API mf_series_t *mf_series_create(mf_loop_t *loop, mf_series_cb cb);
MF_API void mf_series_push_back(mf_series_t *series, mf_task_t *task);
MF_API void mf_series_push_front(mf_series_t *series, mf_task_t *task);
/* Starts a top-level series (those in parallels are started by the
 * parallel). An empty series completes at once (deferred). */
MF_API void mf_series_start(mf_series_t *series);
/* Drops every task not yet started (their callbacks do not run); the running
 * task finishes normally; then the series callback runs. */
MF_API void mf_series_cancel(mf_series_t *series);
MF_API bool mf_series_canceled(const mf_series_t *series);

/* The series callback's own argument, as a closure carries its data: the
 * code that created the series finds its state here in the callback,
 * while the context stays free for the tasks and their callbacks to share.
 * NULL unless set. */
MF_API void mf_series_set_callback_arg(mf_series_t *series, void *arg);
MF_API void *mf_series_callback_arg(const mf_series_t *series);

MF_API void mf_series_set_context(mf_series_t *series, void *context);
MF_API void *mf_series_context(const mf_series_t *series);
MF_API int mf_series_state(const mf_series_t *series);
MF_API int mf_series_error(const mf_series_t *series);
/* Tasks of this series whose callbacks have run. */
MF_API size_t mf_series_finished_count(const mf_series_t *series);
MF_API mf_loop_t *mf_series_loop(const mf_series_t *series);
/* The parallel this series belongs to, or NULL. */
MF_API mf_parallel_t *mf_series_parallel(const mf_series_t *series);

MF_EXTERN_C_END

#endif /* MOONFLOW_SERIES_H */
