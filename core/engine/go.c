/*
 * go.c — the go task: a C function run on the compute pool, completed on
 * the loop that started it.
 */
#include "moonflow/pool.h"
#include "moonflow/go.h"

typedef struct mf_go_task {
    mf_task_t base;
    mf_pool_job_t job;
    mf_go_fn fn;
    void *arg;
} mf_go_task_t;

static void mf__go_run(mf_pool_job_t *job)
{
    mf_go_task_t *t = mf_container_of(job, mf_go_task_t, job);
    t->fn(t->arg);
}

static void mf__go_done(mf_pool_job_t *job)
{
    mf_go_task_t *t = mf_container_of(job, mf_go_task_t, job);
    mf_task_complete(&t->base, MF_STATE_SUCCESS, 0);
}

static void mf__go_dispatch(mf_task_t *task)
{
    mf_go_task_t *t = (mf_go_task_t *)task;
    mf_pool_t *pool = mf_loop_pool(task->_loop);
    if (!pool) {
        mf_task_complete(task, MF_STATE_SYS_ERROR, MF_ENOPOOL);
        return;
    }
    t->job.fn = mf__go_run;
    t->job.done = mf__go_done;
    mf_pool_submit(pool, task->_loop, &t->job);
}

static void mf__go_destroy(mf_task_t *task)
{
    mf_loop_free(task->_loop, task, sizeof(mf_go_task_t));
}

/* No cancel hook: a function already on the pool cannot be stopped; a
 * timeout lets the flow go on and the late completion frees the task. */
static const mf_task_ops_t mf__go_ops = {"go", mf__go_dispatch, NULL,
                                         mf__go_destroy};

mf_task_t *mf_task_go_create(mf_loop_t *loop, mf_go_fn fn, void *arg,
                             mf_task_cb cb, void *user)
{
    mf_go_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    mf_task_init(&t->base, &mf__go_ops, loop, cb, user);
    t->fn = fn;
    t->arg = arg;
    return &t->base;
}
