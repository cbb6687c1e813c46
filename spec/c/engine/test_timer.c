#include <moonflow/moonflow.h>

#include "test.h"

#define NTIMERS 10000

typedef struct order_check {
    mf_loop_t *loop;
    uint64_t last_deadline;
    uint64_t last_seq;
    int fired;
    int out_of_order;
    int early;
} order_check_t;

static order_check_t check;
static mf_timer_t timers[NTIMERS];
static char canceled[NTIMERS];

static void on_fire(mf_timer_t *t)
{
    int index = (int)(t - timers);
    if (canceled[index])
        check.out_of_order++; /* a canceled timer must never fire */
    if (t->_deadline < check.last_deadline ||
        (t->_deadline == check.last_deadline && t->_seq < check.last_seq))
        check.out_of_order++;
    if (mf_loop_now(check.loop) < t->_deadline)
        check.early++;
    check.last_deadline = t->_deadline;
    check.last_seq = t->_seq;
    check.fired++;
}

TEST(ten_thousand_random_timers_fire_in_deadline_order)
{
    mf_loop_t *loop = mf_loop_create();
    memset(&check, 0, sizeof check);
    check.loop = loop;
    srand(12345);
    for (int i = 0; i < NTIMERS; i++) {
        mf_timer_init(&timers[i], on_fire, NULL);
        mf_timer_start(loop, &timers[i], (uint64_t)(rand() % 150));
        canceled[i] = 0;
    }
    int ncanceled = 0;
    for (int i = 0; i < NTIMERS; i += 3) {
        mf_timer_stop(loop, &timers[i]);
        ASSERT(!mf_timer_active(&timers[i]));
        canceled[i] = 1;
        ncanceled++;
    }
    /* Restarting moves a timer, stopped or not: these fire once, at the new
     * deadline. */
    for (int i = 1; i < NTIMERS; i += 97) {
        mf_timer_start(loop, &timers[i], 200);
        if (canceled[i]) {
            canceled[i] = 0;
            ncanceled--;
        }
    }
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_EQ(check.fired, NTIMERS - ncanceled);
    ASSERT_EQ(check.out_of_order, 0);
    ASSERT_EQ(check.early, 0);
    mf_loop_destroy(loop);
}

static int stopped_fired;
static mf_timer_t victim;

static void on_victim(mf_timer_t *t)
{
    (void)t;
    stopped_fired++;
}

static void on_killer(mf_timer_t *t)
{
    mf_timer_stop(t->data, &victim);
}

TEST(a_timer_stopped_by_an_earlier_callback_in_the_same_phase_does_not_fire)
{
    mf_loop_t *loop = mf_loop_create();
    mf_timer_t killer;
    mf_timer_init(&killer, on_killer, loop);
    mf_timer_init(&victim, on_victim, NULL);
    mf_timer_start(loop, &killer, 5);
    mf_timer_start(loop, &victim, 5); /* same deadline, later seq */
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(stopped_fired, 0);
    mf_loop_destroy(loop);
}

static int rearm_count;

static void on_rearm(mf_timer_t *t)
{
    if (++rearm_count < 100)
        mf_timer_start(t->data, t, 0);
}

TEST(a_timer_rearmed_with_zero_from_its_callback_fires_once_per_iteration)
{
    mf_loop_t *loop = mf_loop_create();
    mf_timer_t t;
    mf_timer_init(&t, on_rearm, loop);
    mf_timer_start(loop, &t, 0);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_ONCE), 1);
    ASSERT(rearm_count >= 1 && rearm_count <= 2);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(rearm_count, 100);
    mf_loop_destroy(loop);
}

static uint64_t timer_task_started, timer_task_done;
static int timer_task_state = -1;

static void on_timer_task(mf_task_t *task)
{
    timer_task_done = mf_loop_now(mf_task_loop(task));
    timer_task_state = mf_task_state(task);
}

TEST(timer_task_completes_after_its_delay)
{
    mf_loop_t *loop = mf_loop_create();
    timer_task_started = mf_loop_now(loop);
    mf_task_start(mf_task_timer_create(loop, 30, on_timer_task, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(timer_task_state, MF_STATE_SUCCESS);
    ASSERT(timer_task_done - timer_task_started >= 30);
    mf_loop_destroy(loop);
}

TEST(default_run_returns_when_nothing_is_alive)
{
    mf_loop_t *loop = mf_loop_create();
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_NOWAIT), 0);
    mf_loop_destroy(loop);
}

TEST(loop_time_in_ns_is_the_same_clock_read_as_in_ms)
{
    mf_loop_t *loop = mf_loop_create();
    for (int i = 0; i < 100; i++) {
        uint64_t before = mf_monotonic_ns();
        mf_loop_update_time(loop);
        uint64_t after = mf_monotonic_ns();
        uint64_t ns = mf_loop_now_ns(loop);
        ASSERT(ns >= before && ns <= after);
        ASSERT_EQ(mf_loop_now(loop), ns / 1000000u);
    }
    mf_loop_destroy(loop);
}
