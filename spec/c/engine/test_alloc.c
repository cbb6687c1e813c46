/* Steady state makes no malloc per task: every engine allocation goes
 * through mf_xmalloc, which counts; after a warm-up the count must not move
 * while thousands more flows run. */
#include <moonflow/moonflow.h>

#include "test.h"

static int flows_done;

static void on_flow_done(mf_series_t *series)
{
    flows_done++;
}

static void start_mixed_flow(mf_loop_t *loop)
{
    mf_series_t *s = mf_series_create(loop, on_flow_done);
    for (int i = 0; i < 5; i++)
        mf_series_push_back(s, mf_task_empty_create(loop, NULL, NULL));
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    for (int i = 0; i < 6; i++) /* > inline capacity: the array grows */
        mf_parallel_add_task(par, mf_task_timer_create(loop, 0, NULL, NULL));
    mf_series_push_back(s, mf_parallel_task(par));
    mf_task_t *counter = mf_task_counter_create(loop, 1, NULL, NULL);
    mf_task_counter_count(counter);
    mf_series_push_back(s, counter);
    mf_task_t *timed = mf_task_timer_create(loop, 0, NULL, NULL);
    mf_task_set_timeout(timed, 1000);
    mf_series_push_back(s, timed);
    mf_series_start(s);
}

static void run_flows(mf_loop_t *loop, int n)
{
    for (int i = 0; i < n; i++)
        start_mixed_flow(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

TEST(steady_state_flows_make_no_malloc)
{
    mf_loop_t *loop = mf_loop_create();
    run_flows(loop, 200); /* warm the free lists and the timer heap */
    uint64_t before = mf_alloc_count();
    for (int round = 0; round < 50; round++)
        run_flows(loop, 200);
    uint64_t mallocs = mf_alloc_count() - before;
    ASSERT_EQ(flows_done, 51 * 200);
    ASSERT_EQ(mallocs, 0);
    mf_loop_destroy(loop);
}

static void noop(void *arg)
{
    (void)arg;
}

TEST(steady_state_go_tasks_make_no_malloc)
{
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(2);
    mf_loop_set_pool(loop, pool);
    for (int i = 0; i < 100; i++)
        mf_task_start(mf_task_go_create(loop, noop, NULL, NULL, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    uint64_t before = mf_alloc_count();
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 100; i++)
            mf_task_start(mf_task_go_create(loop, noop, NULL, NULL, NULL));
        mf_loop_run(loop, MF_RUN_DEFAULT);
    }
    ASSERT_EQ(mf_alloc_count() - before, 0);
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
}

TEST(injected_failures_fail_the_checked_allocations_then_stop)
{
    mf_alloc_fail_next(2);
    ASSERT(mf_try_malloc(64) == NULL);
    ASSERT(mf_try_malloc(1 << 20) == NULL);
    void *p = mf_try_malloc(64); /* the third one succeeds again */
    ASSERT(p != NULL);
    mf_free(p);
    mf_alloc_fail_next(5);
    mf_alloc_fail_next(0); /* disarmed */
    p = mf_try_malloc(64);
    ASSERT(p != NULL);
    mf_free(p);
}
