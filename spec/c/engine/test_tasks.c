#include <pthread.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

static int counter_state = -1;
static int counter_done_after;
static int ticks;

static void on_counter(mf_task_t *task)
{
    counter_state = mf_task_state(task);
    counter_done_after = ticks;
}

static void on_tick(mf_task_t *task)
{
    ticks++;
    mf_task_counter_count(task->user);
}

TEST(counter_task_is_done_after_its_target_count)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_t *counter = mf_task_counter_create(loop, 4, on_counter, NULL);
    /* One count before the counter starts is kept. */
    mf_task_counter_count(counter);
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    for (int i = 0; i < 3; i++)
        mf_parallel_add_task(par, mf_task_timer_create(loop, (uint64_t)(5 * i),
                                                       on_tick, counter));
    mf_task_start(mf_parallel_task(par));
    mf_task_start(counter);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(counter_state, MF_STATE_SUCCESS);
    ASSERT_EQ(counter_done_after, 3);
    mf_loop_destroy(loop);
}

TEST(counter_with_target_zero_is_done_at_once)
{
    mf_loop_t *loop = mf_loop_create();
    counter_state = -1;
    mf_task_start(mf_task_counter_create(loop, 0, on_counter, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(counter_state, MF_STATE_SUCCESS);
    mf_loop_destroy(loop);
}

static int timeout_state = -1, timeout_error;
static uint64_t timeout_elapsed_start, timeout_elapsed;
static int after_timeout_ran;

static void on_timed_out(mf_task_t *task)
{
    timeout_state = mf_task_state(task);
    timeout_error = mf_task_error(task);
    timeout_elapsed = mf_loop_now(mf_task_loop(task)) - timeout_elapsed_start;
}

static void on_after_timeout(mf_task_t *task)
{
    after_timeout_ran = 1;
}

TEST(per_task_timeout_ends_the_task_and_the_series_goes_on)
{
    mf_loop_t *loop = mf_loop_create();
    timeout_elapsed_start = mf_loop_now(loop);
    mf_series_t *s = mf_series_create(loop, NULL);
    mf_task_t *slow = mf_task_timer_create(loop, 10000, on_timed_out, NULL);
    mf_task_set_timeout(slow, 25);
    mf_series_push_back(s, slow);
    mf_series_push_back(s, mf_task_empty_create(loop, on_after_timeout, NULL));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(timeout_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(timeout_error, MF_ETIMEDOUT);
    ASSERT(timeout_elapsed >= 25 && timeout_elapsed < 5000);
    ASSERT_EQ(after_timeout_ran, 1);
    mf_loop_destroy(loop);
}

TEST(a_counter_that_times_out_still_takes_late_counts)
{
    mf_loop_t *loop = mf_loop_create();
    counter_state = -1;
    mf_task_t *counter = mf_task_counter_create(loop, 1, on_counter, NULL);
    mf_task_set_timeout(counter, 5);
    mf_task_start(counter);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(counter_state, MF_STATE_TIMEOUT);
    mf_task_counter_count(counter); /* releases it; ASan checks the memory */
    mf_loop_destroy(loop);
}

static int canceled_state = -1;

static void on_canceled(mf_task_t *task)
{
    canceled_state = mf_task_state(task);
}

static void cancel_it(mf_timer_t *timer)
{
    mf_task_cancel(timer->data);
}

TEST(cancel_ends_a_running_task_as_canceled)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_t *t = mf_task_timer_create(loop, 10000, on_canceled, NULL);
    mf_timer_t killer;
    mf_timer_init(&killer, cancel_it, t);
    mf_timer_start(loop, &killer, 5);
    mf_task_start(t);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(canceled_state, MF_STATE_CANCELED);
    mf_loop_destroy(loop);
}

TEST(a_task_canceled_before_it_starts_never_runs_its_operation)
{
    mf_loop_t *loop = mf_loop_create();
    canceled_state = -1;
    mf_task_t *t = mf_task_timer_create(loop, 10000, on_canceled, NULL);
    mf_task_cancel(t);
    mf_task_start(t);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_EQ(canceled_state, MF_STATE_CANCELED);
    mf_loop_destroy(loop);
}

/* ---- go tasks ----------------------------------------------------------- */

#define GO_PER_WORKER 200

typedef struct go_probe {
    pthread_t loop_thread;
    pthread_t ran_on;
    mf_waitgroup_t *wg;
    int *wrong_thread;
    int *ran_on_loop_thread;
} go_probe_t;

static void go_fn(void *arg)
{
    go_probe_t *p = arg;
    p->ran_on = pthread_self();
}

static void on_go_done(mf_task_t *task)
{
    go_probe_t *p = task->user;
    if (!mf_loop_on_thread(mf_task_loop(task)) ||
        !pthread_equal(pthread_self(), p->loop_thread) ||
        mf_task_state(task) != MF_STATE_SUCCESS)
        __atomic_add_fetch(p->wrong_thread, 1, __ATOMIC_RELAXED);
    if (pthread_equal(p->ran_on, p->loop_thread))
        __atomic_add_fetch(p->ran_on_loop_thread, 1, __ATOMIC_RELAXED);
    mf_waitgroup_done(p->wg);
}

static go_probe_t probes[2][GO_PER_WORKER];

static void start_go_tasks(mf_loop_t *loop, void *arg)
{
    go_probe_t *row = arg;
    for (int i = 0; i < GO_PER_WORKER; i++) {
        row[i].loop_thread = pthread_self();
        mf_task_start(
            mf_task_go_create(loop, go_fn, &row[i], on_go_done, &row[i]));
    }
}

TEST(go_tasks_run_on_the_pool_and_complete_on_the_originating_loop)
{
    mf_workers_opts_t opts = {.nloops = 2, .npool = 3};
    mf_workers_t *workers = mf_workers_create(&opts);
    ASSERT(workers != NULL);
    mf_waitgroup_t wg;
    int wrong = 0, on_loop = 0;
    mf_waitgroup_init(&wg, 2 * GO_PER_WORKER);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < GO_PER_WORKER; i++) {
            probes[w][i].wg = &wg;
            probes[w][i].wrong_thread = &wrong;
            probes[w][i].ran_on_loop_thread = &on_loop;
        }
    mf_workers_call(workers, 0, start_go_tasks, probes[0]);
    mf_workers_call(workers, 1, start_go_tasks, probes[1]);
    mf_waitgroup_wait(&wg);
    mf_workers_destroy(workers);
    mf_waitgroup_close(&wg);
    ASSERT_EQ(wrong, 0);
    ASSERT_EQ(on_loop, 0);
    ASSERT(!pthread_equal(probes[0][0].loop_thread, probes[1][0].loop_thread));
}

static int nopool_state = -1, nopool_error;

static void on_nopool(mf_task_t *task)
{
    nopool_state = mf_task_state(task);
    nopool_error = mf_task_error(task);
}

static void noop(void *arg)
{
    (void)arg;
}

TEST(a_go_task_on_a_loop_without_a_pool_fails_in_its_completion)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_start(mf_task_go_create(loop, noop, NULL, on_nopool, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(nopool_state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(nopool_error, MF_ENOPOOL);
    mf_loop_destroy(loop);
}

static int slow_go_finished;
static int slow_go_state = -1;

static void slow_fn(void *arg)
{
    usleep(150 * 1000);
    __atomic_store_n(&slow_go_finished, 1, __ATOMIC_RELEASE);
}

static void on_slow_go(mf_task_t *task)
{
    slow_go_state = mf_task_state(task);
    /* The flow went on before the function returned. */
    ASSERT_EQ(__atomic_load_n(&slow_go_finished, __ATOMIC_ACQUIRE), 0);
}

TEST(a_go_task_past_its_timeout_ends_as_timeout_and_is_freed_later)
{
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(1);
    mf_loop_set_pool(loop, pool);
    mf_task_t *t = mf_task_go_create(loop, slow_fn, NULL, on_slow_go, NULL);
    mf_task_set_timeout(t, 10);
    mf_task_start(t);
    /* The pool's ref keeps the loop running until the late completion. */
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(slow_go_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(slow_go_finished, 1);
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
}
