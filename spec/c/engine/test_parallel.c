#include <moonflow/moonflow.h>

#include "test.h"

static int series_done;
static int parallel_seen_series_done = -1;
static int results[3];
static int branch_contexts[3];

static void on_branch_done(mf_series_t *series)
{
    series_done++;
}

static void on_parallel(mf_task_t *task)
{
    mf_parallel_t *par = mf_parallel_from_task(task);
    parallel_seen_series_done = series_done;
    ASSERT_EQ(mf_parallel_size(par), 3);
    for (size_t i = 0; i < 3; i++) {
        mf_series_t *s = mf_parallel_series_at(par, i);
        results[i] = mf_series_state(s);
        branch_contexts[i] = *(int *)mf_series_context(s);
    }
    ASSERT(mf_parallel_series_at(par, 3) == NULL);
}

TEST(parallel_completes_when_all_series_are_done_and_reports_each)
{
    static int ids[3] = {10, 11, 12};
    mf_loop_t *loop = mf_loop_create();
    mf_parallel_t *par = mf_parallel_create(loop, on_parallel, NULL);
    for (int i = 0; i < 3; i++) {
        mf_series_t *s = mf_series_create(loop, on_branch_done);
        mf_series_set_context(s, &ids[i]);
        mf_task_t *t =
            mf_task_timer_create(loop, (uint64_t)(30 - 10 * i), NULL, NULL);
        if (i == 1) /* this branch fails: a timeout shorter than its timer */
            mf_task_set_timeout(t, 5);
        mf_series_push_back(s, t);
        mf_parallel_add_series(par, s);
    }
    mf_task_start(mf_parallel_task(par));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(parallel_seen_series_done, 3);
    ASSERT_EQ(results[0], MF_STATE_SUCCESS);
    ASSERT_EQ(results[1], MF_STATE_TIMEOUT);
    ASSERT_EQ(results[2], MF_STATE_SUCCESS);
    ASSERT_EQ(branch_contexts[0], 10);
    ASSERT_EQ(branch_contexts[2], 12);
    mf_loop_destroy(loop);
}

/* parallel{ series{ timer, parallel{ series{ timer, parallel{ 3 x timer } },
 *                                    series{ empty } } },
 *           series{ timer } } */
static int leaf_done, inner_done, middle_done, outer_done;
static int order_ok = 1;

static void on_leaf(mf_task_t *task)
{
    leaf_done++;
}

static void on_inner(mf_task_t *task)
{
    if (leaf_done != 3)
        order_ok = 0;
    inner_done++;
}

static void on_middle(mf_task_t *task)
{
    if (inner_done != 1)
        order_ok = 0;
    middle_done++;
}

static void on_outer(mf_task_t *task)
{
    if (middle_done != 1 || leaf_done != 3)
        order_ok = 0;
    outer_done++;
}

TEST(parallel_inside_series_inside_parallel_three_levels)
{
    mf_loop_t *loop = mf_loop_create();
    mf_parallel_t *inner = mf_parallel_create(loop, on_inner, NULL);
    for (int i = 0; i < 3; i++)
        mf_parallel_add_task(
            inner, mf_task_timer_create(loop, (uint64_t)i * 3, on_leaf, NULL));
    mf_parallel_t *middle = mf_parallel_create(loop, on_middle, NULL);
    mf_series_t *ms = mf_series_create(loop, NULL);
    mf_series_push_back(ms, mf_task_timer_create(loop, 2, NULL, NULL));
    mf_series_push_back(ms, mf_parallel_task(inner));
    mf_parallel_add_series(middle, ms);
    mf_parallel_add_task(middle, mf_task_empty_create(loop, NULL, NULL));
    mf_parallel_t *outer = mf_parallel_create(loop, on_outer, NULL);
    mf_series_t *os = mf_series_create(loop, NULL);
    mf_series_push_back(os, mf_task_timer_create(loop, 1, NULL, NULL));
    mf_series_push_back(os, mf_parallel_task(middle));
    mf_parallel_add_series(outer, os);
    mf_parallel_add_task(outer, mf_task_timer_create(loop, 1, NULL, NULL));
    mf_task_start(mf_parallel_task(outer));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(leaf_done, 3);
    ASSERT_EQ(inner_done, 1);
    ASSERT_EQ(middle_done, 1);
    ASSERT_EQ(outer_done, 1);
    ASSERT(order_ok);
    mf_loop_destroy(loop);
}

static int empty_parallel_done;

static void on_empty_parallel(mf_task_t *task)
{
    empty_parallel_done = mf_parallel_size(mf_parallel_from_task(task)) == 0;
}

TEST(an_empty_parallel_is_done_at_once)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_start(
        mf_parallel_task(mf_parallel_create(loop, on_empty_parallel, NULL)));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(empty_parallel_done, 1);
    mf_loop_destroy(loop);
}

static int wide_done;

static void on_wide(mf_task_t *task)
{
    mf_parallel_t *par = mf_parallel_from_task(task);
    for (size_t i = 0; i < mf_parallel_size(par); i++)
        if (mf_series_finished_count(mf_parallel_series_at(par, i)) == 1)
            wide_done++;
}

TEST(a_wide_parallel_of_a_thousand_branches)
{
    mf_loop_t *loop = mf_loop_create();
    mf_parallel_t *par = mf_parallel_create(loop, on_wide, NULL);
    for (int i = 0; i < 1000; i++)
        mf_parallel_add_task(par,
                             i % 2 ? mf_task_empty_create(loop, NULL, NULL)
                                   : mf_task_timer_create(loop, 1, NULL, NULL));
    mf_task_start(mf_parallel_task(par));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(wide_done, 1000);
    mf_loop_destroy(loop);
}

static int timed_parallel_state = -1;
static int slow_branch_state = -1;
static uint64_t timed_parallel_at;

static void on_slow_branch(mf_task_t *task)
{
    slow_branch_state = mf_task_state(task);
}

static void on_timed_parallel(mf_task_t *task)
{
    timed_parallel_state = mf_task_state(task);
    timed_parallel_at = mf_loop_now(mf_task_loop(task));
}

TEST(a_parallel_that_times_out_cancels_its_branches)
{
    mf_loop_t *loop = mf_loop_create();
    uint64_t start = mf_loop_now(loop);
    mf_parallel_t *par = mf_parallel_create(loop, on_timed_parallel, NULL);
    mf_parallel_add_task(
        par, mf_task_timer_create(loop, 5000, on_slow_branch, NULL));
    mf_task_set_timeout(mf_parallel_task(par), 20);
    mf_task_start(mf_parallel_task(par));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_update_time(loop);
    ASSERT_EQ(timed_parallel_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(slow_branch_state, MF_STATE_CANCELED);
    ASSERT(timed_parallel_at - start >= 20);
    ASSERT(mf_loop_now(loop) - start < 2000); /* did not wait for 5 s */
    mf_loop_destroy(loop);
}
