/*
 * tasks.c — the loop-only built-in kinds: empty, timer, counter.
 * Each lives in the loop's free lists; none allocates per use once warm.
 */
#include "moonflow/tasks.h"

/* ---- empty ---------------------------------------------------------- */

static void mf__empty_dispatch(mf_task_t *task)
{
    mf_task_complete(task, MF_STATE_SUCCESS, 0);
}

static void mf__empty_destroy(mf_task_t *task)
{
    mf_loop_free(task->_loop, task, sizeof(*task));
}

static const mf_task_ops_t mf__empty_ops = {"empty", mf__empty_dispatch, NULL,
                                            mf__empty_destroy};

mf_task_t *mf_task_empty_create(mf_loop_t *loop, mf_task_cb cb, void *user)
{
    mf_task_t *task = mf_loop_alloc(loop, sizeof(*task));
    mf_task_init(task, &mf__empty_ops, loop, cb, user);
    return task;
}

/* ---- timer ---------------------------------------------------------- */

typedef struct mf_timer_task {
    mf_task_t base;
    mf_timer_t timer;
    uint64_t ms;
} mf_timer_task_t;

static void mf__timer_task_fired(mf_timer_t *timer)
{
    mf_timer_task_t *t = timer->data;
    mf_task_complete(&t->base, MF_STATE_SUCCESS, 0);
}

static void mf__timer_task_dispatch(mf_task_t *task)
{
    mf_timer_task_t *t = (mf_timer_task_t *)task;
    mf_timer_start(task->_loop, &t->timer, t->ms);
}

static void mf__timer_task_cancel(mf_task_t *task)
{
    mf_timer_task_t *t = (mf_timer_task_t *)task;
    mf_timer_stop(task->_loop, &t->timer);
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__timer_task_destroy(mf_task_t *task)
{
    mf_timer_task_t *t = (mf_timer_task_t *)task;
    mf_timer_stop(task->_loop, &t->timer);
    mf_loop_free(task->_loop, t, sizeof(*t));
}

static const mf_task_ops_t mf__timer_task_ops = {
    "timer", mf__timer_task_dispatch, mf__timer_task_cancel,
    mf__timer_task_destroy};

mf_task_t *mf_task_timer_create(mf_loop_t *loop, uint64_t ms, mf_task_cb cb,
                                void *user)
{
    mf_timer_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    mf_task_init(&t->base, &mf__timer_task_ops, loop, cb, user);
    mf_timer_init(&t->timer, mf__timer_task_fired, t);
    t->ms = ms;
    return &t->base;
}

/* ---- counter -------------------------------------------------------- */

typedef struct mf_counter_task {
    mf_task_t base;
    unsigned target;
    unsigned count;
    bool dispatched;
} mf_counter_task_t;

static void mf__counter_dispatch(mf_task_t *task)
{
    mf_counter_task_t *c = (mf_counter_task_t *)task;
    c->dispatched = true;
    if (c->count >= c->target)
        mf_task_complete(task, MF_STATE_SUCCESS, 0);
}

static void mf__counter_destroy(mf_task_t *task)
{
    mf_loop_free(task->_loop, task, sizeof(mf_counter_task_t));
}

/* No cancel hook: after a timeout the counter stays alive until its last
 * count, so counts that arrive late still land on live memory. */
static const mf_task_ops_t mf__counter_ops = {"counter", mf__counter_dispatch,
                                              NULL, mf__counter_destroy};

mf_task_t *mf_task_counter_create(mf_loop_t *loop, unsigned target,
                                  mf_task_cb cb, void *user)
{
    mf_counter_task_t *c = mf_loop_alloc(loop, sizeof(*c));
    mf_task_init(&c->base, &mf__counter_ops, loop, cb, user);
    c->target = target;
    c->count = 0;
    c->dispatched = false;
    return &c->base;
}

void mf_task_counter_count(mf_task_t *task)
{
    mf_counter_task_t *c = (mf_counter_task_t *)task;
    if (task->_ops != &mf__counter_ops)
        return;
    if (++c->count == c->target && c->dispatched)
        mf_task_complete(task, MF_STATE_SUCCESS, 0);
}
