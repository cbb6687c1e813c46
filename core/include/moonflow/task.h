/*
 * moonflow/task.h — the task: one asynchronous operation with a callback.
 *
 * Life of a task: created (idle) → started by its series → done. When done it
 * has a state (mf_state_t) and an error (MF_E* code); then its callback runs;
 * then the task is destroyed and its series moves on. A callback reads the
 * results it needs; the task does not outlive its callback.
 *
 * Threads: a task belongs to the loop it was created on. It is dispatched,
 * completed, called back and destroyed on that loop's thread only.
 *
 * Ownership: a created task is owned by the caller until it is pushed onto a
 * series (mf_series_push_back/front, mf_parallel_add_task) or started with
 * mf_task_start; from then on the series owns it. A created task that is
 * never started must be released with mf_task_destroy.
 *
 * ---------------------------------------------------------------------
 * How a new task kind plugs in (HTTP, Redis, MySQL, Kafka, DNS ...)
 * ---------------------------------------------------------------------
 * The flow engine knows nothing of protocols. A kind is a struct that embeds
 * mf_task_t as its first member plus an mf_task_ops_t table:
 *
 *   typedef struct { mf_task_t base; mf_io_t io; ... } my_task_t;
 *   static const mf_task_ops_t my_ops = {"my", my_dispatch, my_cancel,
 *                                        my_destroy};
 *   my_task_t *t = mf_loop_alloc(loop, sizeof *t);   // free-list memory
 *   mf_task_init(&t->base, &my_ops, loop, cb, user);
 *
 * - dispatch(task): start the operation, on the loop thread: register an
 *   mf_io_t, arm an mf_timer_t, submit a job to the pool, post a message ...
 *   When the operation ends, call mf_task_complete(task, state, error)
 *   exactly once. Calling it from inside dispatch is allowed: completion is
 *   always deferred to the loop's ready queue, never run in the caller.
 * - cancel(task) (optional): the engine gave up on the task (per-task timeout
 *   or loop shutdown). Stop the operation quickly and still call
 *   mf_task_complete once (its state is then ignored). If the operation cannot
 *   be stopped (a go task already running on the pool), just let it finish.
 * - destroy(task): release the kind's resources and the memory
 *   (mf_loop_free(loop, t, sizeof *t)). Called once, after the callback ran
 *   and the kind has completed, or for a task that was never dispatched.
 *
 * The adapters for the planned kinds all reduce to these three calls:
 * - hiredis: our socket's mf_io_t feeds bytes to redisReader; a full reply
 *   calls mf_task_complete. addRead/addWrite map to mf_io_start.
 * - mariadb-connector-c non-blocking API: mysql_*_start returns a wait mask
 *   (MYSQL_WAIT_READ/WRITE/TIMEOUT) mapped to mf_io_start + mf_timer_start;
 *   the watcher callback calls mysql_*_cont; status 0 completes the task.
 * - librdkafka: rd_kafka_queue_io_event_enable writes to a pipe/eventfd we
 *   watch with mf_io_t; the callback polls the queue and completes tasks.
 * - HTTP client/server: mf_io_t on the socket, a pure parser over buffers.
 * None of them changes series.c, parallel.c or task.c.
 */
#ifndef MOONFLOW_TASK_H
#define MOONFLOW_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "error.h"
#include "list.h"
#include "loop.h"

MF_EXTERN_C_BEGIN

typedef struct mf_task mf_task_t;
typedef struct mf_series mf_series_t;
typedef struct mf_parallel mf_parallel_t;

/* Runs on the loop thread after the task is done. The task is destroyed
 * when the callback returns; copy what you need. */
typedef void (*mf_task_cb)(mf_task_t *task);

typedef struct mf_task_ops {
    const char *name;
    void (*dispatch)(mf_task_t *task);
    void (*cancel)(mf_task_t *task); /* may be NULL */
    void (*destroy)(mf_task_t *task);
} mf_task_ops_t;

/* Embedded by every task kind as its first member. Fields starting with '_'
 * are the engine's; kinds and users go through the functions below. */
struct mf_task {
    const mf_task_ops_t *_ops;
    mf_loop_t *_loop;
    mf_series_t *_series;
    mf_list_t _link; /* series queue, then the loop's ready queue */
    mf_task_cb _cb;
    void *user; /* free for the creator of the task */
    int _state;
    int _error;
    uint32_t _flags;
    uint32_t _timeout_ms;         /* 0: no timeout */
    mf_timer_t _timer;            /* per-task timeout */
    uint64_t _started_ns;         /* dispatch time while observed; 0: not */
    struct mf_task_trace *_trace; /* the loop's when made; NULL: none */
};

MF_API void mf_task_init(mf_task_t *task, const mf_task_ops_t *ops,
                         mf_loop_t *loop, mf_task_cb cb, void *user);

/* Called by the kind when its operation ends; exactly once per dispatch.
 * The first of completion and timeout decides the task's result. */
MF_API void mf_task_complete(mf_task_t *task, int state, int error);

/* Gives up on a running task: it ends with MF_STATE_CANCELED / MF_ECANCELED
 * (the kind's cancel hook is asked to stop). No effect once done. */
MF_API void mf_task_cancel(mf_task_t *task);

/* A per-task timeout, set before the task starts: if the kind has not
 * completed within ms, the task ends with MF_STATE_TIMEOUT / MF_ETIMEDOUT and
 * the flow continues; the callback decides what happens next. */
static inline void mf_task_set_timeout(mf_task_t *task, uint32_t ms)
{
    task->_timeout_ms = ms;
}

/* Starts the task in a new series of its own (Workflow's task->start()). */
MF_API void mf_task_start(mf_task_t *task);

/* Releases a task that was created but never handed to a series. */
MF_API void mf_task_destroy(mf_task_t *task);

static inline int mf_task_state(const mf_task_t *task)
{
    return task->_state;
}
static inline int mf_task_error(const mf_task_t *task)
{
    return task->_error;
}
static inline mf_loop_t *mf_task_loop(const mf_task_t *task)
{
    return task->_loop;
}
/* The series the task runs in (valid in callbacks). */
static inline mf_series_t *mf_series_of(const mf_task_t *task)
{
    return task->_series;
}
static inline const char *mf_task_kind(const mf_task_t *task)
{
    return task->_ops->name;
}
static inline void mf_task_set_callback(mf_task_t *task, mf_task_cb cb)
{
    task->_cb = cb;
}

/* ---- observing a loop's tasks (metrics, traces) ----------------------
 * An observer sees every task of its loop start and end, on the loop's
 * thread: started() just before the kind's dispatch, finished() once the
 * result is decided, before the task's callback, with the time since its
 * dispatch (CLOCK_MONOTONIC). Either may be NULL. Without an observer a
 * task costs one branch more at each end; with one, two clock reads. A task
 * dispatched before the observer was set is not reported at its end. */
typedef struct mf_task_observer {
    void (*started)(void *ud, mf_task_t *task);
    void (*finished)(void *ud, mf_task_t *task, uint64_t ns);
    void *ud;
} mf_task_observer_t;

/* From now on; NULL: none. The observer is the caller's: it must outlive
 * its use (set NULL before freeing it). */
MF_API void mf_loop_observe_tasks(mf_loop_t *loop,
                                  const mf_task_observer_t *observer);

/* The parallel or graph task whose branch (node) runs task, or NULL for a
 * task of a top-level series: the tree a trace draws. */
MF_API mf_task_t *mf_task_parent(const mf_task_t *task);

/* ---- tasks made for one piece of work (a request's trace) ------------
 * A trace context is the caller's struct embedding mf_task_trace_t. While
 * it is set on a loop (mf_loop_set_trace, around the code that makes tasks
 * for that work), every task made on the loop holds it, one count each,
 * until the task is released; release(t) runs when the count drops to 0
 * (the caller holds a count of its own while it may still set it). An
 * observer finds a task's context with mf_task_trace. Loop thread only. */
typedef struct mf_task_trace {
    unsigned refs;
    void (*release)(struct mf_task_trace *t);
} mf_task_trace_t;

/* Sets the loop's context (NULL: none) and returns the one it replaces. */
MF_API mf_task_trace_t *mf_loop_set_trace(mf_loop_t *loop,
                                          mf_task_trace_t *trace);
static inline mf_task_trace_t *mf_task_trace(const mf_task_t *task)
{
    return task->_trace;
}
/* Drops one count; the last one runs release. */
MF_API void mf_task_trace_unref(mf_task_trace_t *trace);

MF_EXTERN_C_END

#endif /* MOONFLOW_TASK_H */
