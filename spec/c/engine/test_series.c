#include <moonflow/moonflow.h>

#include "test.h"

static char trace[256];
static size_t trace_len;

static void note(char c)
{
    if (trace_len + 1 < sizeof trace)
        trace[trace_len++] = c;
    trace[trace_len] = 0;
}

static void reset_trace(void)
{
    trace_len = 0;
    trace[0] = 0;
}

static void on_task_note(mf_task_t *task)
{
    note(*(const char *)task->user);
}

static void on_series_note(mf_series_t *series)
{
    note('$');
}

static mf_task_t *noted_timer(mf_loop_t *loop, uint64_t ms, const char *tag)
{
    return mf_task_timer_create(loop, ms, on_task_note, (void *)tag);
}

TEST(series_runs_tasks_in_order_then_its_callback)
{
    mf_loop_t *loop = mf_loop_create();
    reset_trace();
    mf_series_t *s = mf_series_create(loop, on_series_note);
    /* Later tasks have shorter delays: only order of the series decides. */
    mf_series_push_back(s, noted_timer(loop, 20, "a"));
    mf_series_push_back(s, noted_timer(loop, 10, "b"));
    mf_series_push_back(s, mf_task_empty_create(loop, on_task_note, "c"));
    mf_series_push_back(s, noted_timer(loop, 0, "d"));
    mf_series_start(s);
    ASSERT_STR_EQ(trace, ""); /* nothing runs inside the start call */
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(trace, "abcd$");
    mf_loop_destroy(loop);
}

static void on_push_from_callback(mf_task_t *task)
{
    mf_series_t *s = mf_series_of(task);
    mf_loop_t *loop = mf_task_loop(task);
    note('a');
    mf_series_push_back(s, mf_task_empty_create(loop, on_task_note, "z"));
    mf_series_push_front(s, mf_task_empty_create(loop, on_task_note, "f"));
}

TEST(callbacks_push_tasks_to_front_and_back_of_their_series)
{
    mf_loop_t *loop = mf_loop_create();
    reset_trace();
    mf_series_t *s = mf_series_create(loop, on_series_note);
    mf_series_push_back(
        s, mf_task_empty_create(loop, on_push_from_callback, NULL));
    mf_series_push_back(s, mf_task_empty_create(loop, on_task_note, "m"));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(trace, "afmz$");
    mf_loop_destroy(loop);
}

static int final_state = -1;
static size_t final_finished;

static void on_series_record(mf_series_t *series)
{
    note('$');
    final_state = mf_series_state(series);
    final_finished = mf_series_finished_count(series);
}

static void on_cancel_rest(mf_task_t *task)
{
    note('b');
    mf_series_cancel(mf_series_of(task));
}

TEST(cancel_skips_the_rest_and_runs_the_series_callback)
{
    mf_loop_t *loop = mf_loop_create();
    reset_trace();
    mf_series_t *s = mf_series_create(loop, on_series_record);
    mf_series_push_back(s, noted_timer(loop, 1, "a"));
    mf_series_push_back(s, mf_task_empty_create(loop, on_cancel_rest, NULL));
    mf_series_push_back(s, noted_timer(loop, 1, "c"));
    mf_series_push_back(s, noted_timer(loop, 1000, "d"));
    mf_series_start(s);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_STR_EQ(trace, "ab$");
    ASSERT_EQ(final_state, MF_STATE_CANCELED);
    ASSERT_EQ(final_finished, 2);
    mf_loop_destroy(loop);
}

static void *seen_context;

static void on_set_context(mf_task_t *task)
{
    mf_series_set_context(mf_series_of(task), task->user);
}

static void on_read_context(mf_series_t *series)
{
    seen_context = mf_series_context(series);
}

TEST(series_context_is_shared_by_its_callbacks)
{
    mf_loop_t *loop = mf_loop_create();
    static int payload = 42;
    mf_series_t *s = mf_series_create(loop, on_read_context);
    mf_series_push_back(s,
                        mf_task_empty_create(loop, on_set_context, &payload));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(seen_context == &payload);
    mf_loop_destroy(loop);
}

static void *seen_cb_arg;

static void on_read_cb_arg(mf_series_t *series)
{
    seen_cb_arg = mf_series_callback_arg(series);
    seen_context = mf_series_context(series);
}

TEST(series_callback_arg_is_kept_apart_from_the_context)
{
    mf_loop_t *loop = mf_loop_create();
    static int owner = 7, payload = 42;
    mf_series_t *s = mf_series_create(loop, on_read_cb_arg);
    ASSERT(mf_series_callback_arg(s) == NULL);
    mf_series_set_callback_arg(s, &owner);
    /* A task's callback sets the context; the callback's argument stays. */
    mf_series_push_back(s,
                        mf_task_empty_create(loop, on_set_context, &payload));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(seen_cb_arg == &owner);
    ASSERT(seen_context == &payload);
    mf_loop_destroy(loop);
}

static int failing_cb_state;

static void on_first_failure(mf_series_t *series)
{
    failing_cb_state = mf_series_state(series);
    final_finished = mf_series_finished_count(series);
}

TEST(series_result_is_its_first_failure_and_the_flow_goes_on)
{
    mf_loop_t *loop = mf_loop_create();
    mf_series_t *s = mf_series_create(loop, on_first_failure);
    mf_task_t *slow = mf_task_timer_create(loop, 5000, NULL, NULL);
    mf_task_set_timeout(slow, 10);
    mf_series_push_back(s, slow);
    mf_series_push_back(s, mf_task_empty_create(loop, NULL, NULL));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(failing_cb_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(final_finished, 2);
    mf_loop_destroy(loop);
}

#define LONG_SERIES 100000
static int long_steps;
static uintptr_t stack_low = UINTPTR_MAX, stack_high;

static void on_long_step(mf_task_t *task)
{
    volatile char marker;
    uintptr_t here = (uintptr_t)&marker;
    if (here < stack_low)
        stack_low = here;
    if (here > stack_high)
        stack_high = here;
    if (++long_steps < LONG_SERIES)
        mf_series_push_back(
            mf_series_of(task),
            mf_task_empty_create(mf_task_loop(task), on_long_step, NULL));
}

TEST(a_hundred_thousand_step_series_does_not_grow_the_stack)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_start(mf_task_empty_create(loop, on_long_step, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(long_steps, LONG_SERIES);
    ASSERT(stack_high - stack_low < 4096);
    mf_loop_destroy(loop);
}

static int empty_series_done;

static void on_empty_series(mf_series_t *series)
{
    empty_series_done += (int)(1 + mf_series_finished_count(series));
}

TEST(an_empty_series_completes_with_its_callback)
{
    mf_loop_t *loop = mf_loop_create();
    mf_series_start(mf_series_create(loop, on_empty_series));
    ASSERT_EQ(empty_series_done, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(empty_series_done, 1);
    mf_loop_destroy(loop);
}

TEST(a_task_never_started_is_released_by_destroy)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_destroy(mf_task_timer_create(loop, 10, NULL, NULL));
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    mf_parallel_add_task(par, mf_task_empty_create(loop, NULL, NULL));
    mf_task_destroy(mf_parallel_task(par));
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    mf_loop_destroy(loop);
}
