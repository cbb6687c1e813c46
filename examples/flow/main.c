/*
 * examples/flow — a small program on the engine: a series that waits, then
 * fans out a parallel of compute (go) tasks and timers, and reports each
 * branch's result. Run: build/examples/flow_example
 */
#include <stdio.h>

#include <moonflow/moonflow.h>

static unsigned long fib(unsigned n)
{
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

typedef struct job {
    unsigned n;
    unsigned long result;
} job_t;

static void compute(void *arg)
{
    job_t *job = arg;
    job->result = fib(job->n);
}

static void on_started(mf_task_t *task)
{
    printf("timer: %s after 50 ms, fanning out\n",
           mf_state_name(mf_task_state(task)));
}

static void on_branch(mf_task_t *task)
{
    job_t *job = task->user;
    if (job)
        printf("  go task fib(%u) = %lu (%s)\n", job->n, job->result,
               mf_state_name(mf_task_state(task)));
    else
        printf("  timer branch: %s (%s)\n", mf_state_name(mf_task_state(task)),
               mf_strerror(mf_task_error(task)));
}

static void on_parallel(mf_task_t *task)
{
    mf_parallel_t *par = mf_parallel_from_task(task);
    printf("parallel done: %zu branches\n", mf_parallel_size(par));
    for (size_t i = 0; i < mf_parallel_size(par); i++)
        printf("  branch %zu: %s\n", i,
               mf_state_name(mf_series_state(mf_parallel_series_at(par, i))));
}

static void on_series(mf_series_t *series)
{
    printf("series done: %zu tasks ran, result %s\n",
           mf_series_finished_count(series),
           mf_state_name(mf_series_state(series)));
}

int main(void)
{
    static job_t jobs[3] = {{30, 0}, {32, 0}, {25, 0}};
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(0);
    mf_loop_set_pool(loop, pool);

    mf_series_t *flow = mf_series_create(loop, on_series);
    mf_series_push_back(flow, mf_task_timer_create(loop, 50, on_started, NULL));
    mf_parallel_t *fan = mf_parallel_create(loop, on_parallel, NULL);
    for (int i = 0; i < 3; i++)
        mf_parallel_add_task(fan, mf_task_go_create(loop, compute, &jobs[i],
                                                    on_branch, &jobs[i]));
    mf_task_t *slow = mf_task_timer_create(loop, 10000, on_branch, NULL);
    mf_task_set_timeout(slow, 100); /* gives up after 100 ms: "timeout" */
    mf_parallel_add_task(fan, slow);
    mf_series_push_back(flow, mf_parallel_task(fan));
    mf_series_start(flow);

    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
    return 0;
}
