/*
 * test_task_observer.c — mf_loop_observe_tasks: every task of the loop
 * reported as it starts and ends, with its kind, its final state and the
 * time since its dispatch; parallel branches overlap; a timed-out and a
 * canceled task report their state; no report once the observer is gone.
 */
#include <moonflow/moonflow.h>

#include "test.h"

#define MAX_SEEN 32

typedef struct seen {
    const char *kind;
    int state;
    uint64_t ms;
} seen_t;

typedef struct observed {
    int started;
    int finished;
    seen_t end[MAX_SEEN];
} observed_t;

static void on_start(void *ud, mf_task_t *task)
{
    observed_t *o = ud;
    ASSERT(mf_task_kind(task) != NULL);
    o->started++;
}

static void on_end(void *ud, mf_task_t *task, uint64_t ns)
{
    observed_t *o = ud;
    ASSERT(o->finished < MAX_SEEN);
    o->end[o->finished++] =
        (seen_t){mf_task_kind(task), mf_task_state(task), ns / 1000000};
}

static const seen_t *find(const observed_t *o, const char *kind, int nth)
{
    for (int i = 0; i < o->finished; i++)
        if (strcmp(o->end[i].kind, kind) == 0 && nth-- == 0)
            return &o->end[i];
    MF_TEST_FAIL("no %s task #%d among %d", kind, nth, o->finished);
    return NULL;
}

TEST(reports_each_task_with_its_kind_state_and_time)
{
    mf_loop_t *loop = mf_loop_create();
    observed_t o = {0};
    mf_task_observer_t observer = {on_start, on_end, &o};
    mf_loop_observe_tasks(loop, &observer);
    mf_series_t *s = mf_series_create(loop, NULL);
    mf_series_push_back(s, mf_task_timer_create(loop, 20, NULL, NULL));
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    mf_parallel_add_task(par, mf_task_timer_create(loop, 40, NULL, NULL));
    mf_parallel_add_task(par, mf_task_timer_create(loop, 60, NULL, NULL));
    mf_series_push_back(s, mf_parallel_task(par));
    mf_task_t *slow = mf_task_timer_create(loop, 1000, NULL, NULL);
    mf_task_set_timeout(slow, 10);
    mf_series_push_back(s, slow);
    mf_series_push_back(s, mf_task_empty_create(loop, NULL, NULL));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    /* timer 20, the parallel and its two timers, the slow one, empty */
    ASSERT_EQ(o.started, 6);
    ASSERT_EQ(o.finished, 6);
    /* Timers count whole ms of the loop's clock, durations are read to the
     * ns: a timer of N ms may show N - 1 once truncated. */
    ASSERT(find(&o, "timer", 0)->ms >= 20 - 1);
    const seen_t *par_end = find(&o, "parallel", 0);
    /* The branches overlap: the parallel takes the longer one, not both. */
    ASSERT(par_end->ms >= 60 - 1 && par_end->ms < 95);
    ASSERT_EQ(par_end->state, MF_STATE_SUCCESS);
    const seen_t *timed_out = find(&o, "timer", 3);
    ASSERT_EQ(timed_out->state, MF_STATE_TIMEOUT);
    ASSERT(timed_out->ms >= 10 - 1 && timed_out->ms < 500);
    ASSERT_EQ(find(&o, "empty", 0)->state, MF_STATE_SUCCESS);
    mf_loop_destroy(loop);
}

TEST(a_task_canceled_before_it_runs_reports_canceled)
{
    mf_loop_t *loop = mf_loop_create();
    observed_t o = {0};
    mf_task_observer_t observer = {NULL, on_end, &o};
    mf_loop_observe_tasks(loop, &observer);
    mf_task_t *t = mf_task_timer_create(loop, 1000, NULL, NULL);
    mf_task_cancel(t);
    mf_task_start(t);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(o.finished, 1);
    ASSERT_EQ(o.end[0].state, MF_STATE_CANCELED);
    mf_loop_destroy(loop);
}

TEST(nothing_is_reported_without_an_observer)
{
    mf_loop_t *loop = mf_loop_create();
    observed_t o = {0};
    mf_task_observer_t observer = {on_start, on_end, &o};
    mf_loop_observe_tasks(loop, &observer);
    mf_loop_observe_tasks(loop, NULL);
    mf_task_start(mf_task_timer_create(loop, 1, NULL, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(o.started, 0);
    ASSERT_EQ(o.finished, 0);
    mf_loop_destroy(loop);
}

/* ---- trace contexts ----------------------------------------------------- */

typedef struct ctx {
    mf_task_trace_t base;
    int released;
} ctx_t;

static void ctx_release(mf_task_trace_t *t)
{
    ((ctx_t *)t)->released++;
}

static mf_task_t *parent_seen[8];
static int parents;

static void on_start_parent(void *ud, mf_task_t *task)
{
    (void)ud;
    if (mf_task_trace(task) && parents < 8)
        parent_seen[parents++] = mf_task_parent(task);
}

TEST(tasks_made_under_a_trace_hold_it_until_released)
{
    mf_loop_t *loop = mf_loop_create();
    ctx_t c = {{1, ctx_release}, 0}; /* the caller's own count */
    mf_task_observer_t observer = {on_start_parent, NULL, NULL};
    mf_loop_observe_tasks(loop, &observer);
    ASSERT(mf_loop_set_trace(loop, &c.base) == NULL);
    mf_series_t *s = mf_series_create(loop, NULL);
    mf_task_t *first = mf_task_timer_create(loop, 5, NULL, NULL);
    mf_series_push_back(s, first);
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    mf_parallel_add_task(par, mf_task_timer_create(loop, 5, NULL, NULL));
    mf_task_t *par_task = mf_parallel_task(par);
    mf_series_push_back(s, par_task);
    mf_task_t *never = mf_task_empty_create(loop, NULL, NULL);
    ASSERT(mf_loop_set_trace(loop, NULL) == &c.base);
    mf_task_t *untraced = mf_task_empty_create(loop, NULL, NULL);
    ASSERT(mf_task_trace(untraced) == NULL);
    ASSERT(mf_task_trace(first) == &c.base);
    ASSERT_EQ(c.base.refs, 1 + 4); /* timer, parallel, its timer, empty */
    mf_task_destroy(never);        /* never started: released all the same */
    mf_task_destroy(untraced);
    ASSERT_EQ(c.base.refs, 4);
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(c.base.refs, 1);
    ASSERT_EQ(c.released, 0);
    mf_task_trace_unref(&c.base); /* the caller's: the last one */
    ASSERT_EQ(c.released, 1);
    /* the first timer and the parallel sit in the top series; the
     * parallel's branch has the parallel above it */
    ASSERT_EQ(parents, 3);
    ASSERT(parent_seen[0] == NULL);
    ASSERT(parent_seen[1] == NULL);
    ASSERT(parent_seen[2] == par_task);
    mf_loop_destroy(loop);
}
