/*
 * flow_int.h — what task.c, series.c, parallel.c and graph.c share: the
 * series body, the interface of a series' parent, task flags, and the steps
 * of the completion climb. Not a public header.
 *
 * The climb (Workflow's subtask_done, without recursion): a kind calls
 * mf_task_complete → the task goes on the loop's ready queue → the loop runs
 * the ready phase series.c gave it → the callback runs, the task is
 * released (task.c), the series dispatches its next task or finishes;
 * a finishing series tells its parent (mf_series_parent_ops_t: a parallel
 * counts down, a graph releases the nodes after it), and the parent's own
 * completion goes through the ready queue again. Every step returns to the
 * loop, so no chain of steps ever nests on the stack.
 */
#ifndef MF_FLOW_INT_H
#define MF_FLOW_INT_H

#include "moonflow/series.h"

enum {
    MF_TASK_F_STARTED = 1u << 0,   /* dispatched by its series */
    MF_TASK_F_FINISHED = 1u << 1,  /* result decided, on the ready queue */
    MF_TASK_F_KIND_DONE = 1u << 2, /* the kind called mf_task_complete */
    MF_TASK_F_FLOW_DONE = 1u << 3, /* callback ran; waiting for the kind */
    MF_TASK_F_CANCEL = 1u << 4     /* canceled before it was dispatched */
};

/* A flow that runs series as its parts (a parallel, a graph) is their
 * parent: a task, and one function the series calls when it has finished
 * (after its callback). The parent keeps the series; series.c and task.c
 * know no kind of parent. */
typedef struct mf_series_parent_ops {
    void (*series_done)(mf_task_t *parent, mf_series_t *series);
} mf_series_parent_ops_t;

struct mf_series {
    mf_loop_t *loop;
    mf_list_t queue; /* tasks not yet started */
    mf_task_t *current;
    mf_series_cb cb;
    void *cb_arg; /* the callback's own argument (its closure) */
    void *context;
    const mf_series_parent_ops_t *parent_ops; /* NULL: top level */
    mf_task_t *parent; /* the parallel or graph it is part of, or NULL */
    size_t finished;
    int state;
    int error;
    bool canceled;
    mf_post_t start_post;
};

/* task.c */
void mf__task_dispatch(mf_task_t *task);
/* A finished task: its result goes to its series, its callback runs, and it
 * is released unless its kind is still out. The series' next step is the
 * caller's (series.c's ready phase). */
void mf__task_finish(mf_task_t *task);
/* series.c */
/* Sets up a series the caller embeds (a graph's node). */
void mf__series_init(mf_series_t *series, mf_loop_t *loop, mf_series_cb cb);
void mf__series_advance(mf_series_t *series);
/* Releases the tasks still queued (not started, no callbacks). */
void mf__series_close(mf_series_t *series);
void mf__series_destroy(mf_series_t *series);
/* Cancels the rest of the series and its running task (an enclosing
 * parallel gave up). */
void mf__series_abort(mf_series_t *series);

#endif /* MF_FLOW_INT_H */
