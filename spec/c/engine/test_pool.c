#include <pthread.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

#define JOBS 1000

typedef struct job {
    mf_pool_job_t job;
    int id;
    pthread_t ran_on;
} job_t;

static int order[JOBS];
static int done_count;
static pthread_t loop_thread;
static int done_off_loop;

static void job_run(mf_pool_job_t *j)
{
    job_t *job = mf_container_of(j, job_t, job);
    job->ran_on = pthread_self();
}

static void job_done(mf_pool_job_t *j)
{
    job_t *job = mf_container_of(j, job_t, job);
    if (!pthread_equal(pthread_self(), loop_thread))
        done_off_loop++;
    order[done_count++] = job->id;
}

TEST(a_single_thread_pool_runs_jobs_in_submission_order)
{
    static job_t jobs[JOBS];
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(1);
    ASSERT_EQ(mf_pool_threads(pool), 1);
    loop_thread = pthread_self();
    for (int i = 0; i < JOBS; i++) {
        jobs[i].id = i;
        jobs[i].job.fn = job_run;
        jobs[i].job.done = job_done;
        mf_pool_submit(pool, loop, &jobs[i].job);
    }
    /* The jobs keep the loop alive until their completions are back. */
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_EQ(done_count, JOBS);
    ASSERT_EQ(done_off_loop, 0);
    for (int i = 0; i < JOBS; i++) {
        ASSERT_EQ(order[i], i);
        ASSERT(!pthread_equal(jobs[i].ran_on, loop_thread));
    }
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
}

static int destroyed_ran;

static void count_run(mf_pool_job_t *j)
{
    __atomic_add_fetch(&destroyed_ran, 1, __ATOMIC_RELAXED);
}

static void count_done(mf_pool_job_t *j)
{
}

TEST(destroy_runs_every_queued_job_first)
{
    static mf_pool_job_t jobs[500];
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(2);
    for (int i = 0; i < 500; i++) {
        jobs[i].fn = count_run;
        jobs[i].done = count_done;
        mf_pool_submit(pool, loop, &jobs[i]);
    }
    mf_pool_destroy(pool);
    ASSERT_EQ(destroyed_ran, 500);
    /* Completions wait in the loop's mailbox; running it delivers them. */
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    mf_loop_destroy(loop);
}

/* ---- stats ----------------------------------------------------------------
 */

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_waiting;

static void gated_run(mf_pool_job_t *j)
{
    (void)j;
    pthread_mutex_lock(&gate_mu);
    gate_waiting++;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void gated_done(mf_pool_job_t *j)
{
    (void)j;
}

TEST(stats_show_the_queue_the_running_jobs_and_the_completed_ones)
{
    static mf_pool_job_t jobs[5];
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(2);
    mf_pool_stats_t st;
    mf_pool_stats(pool, &st);
    ASSERT_EQ(st.threads, 2);
    ASSERT_EQ(st.queued, 0);
    ASSERT_EQ(st.active, 0);
    ASSERT_EQ(st.completed, 0);
    for (int i = 0; i < 5; i++) {
        jobs[i].fn = gated_run;
        jobs[i].done = gated_done;
        mf_pool_submit(pool, loop, &jobs[i]);
    }
    pthread_mutex_lock(&gate_mu);
    while (gate_waiting < 2) /* both threads hold a job */
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    mf_pool_stats(pool, &st);
    ASSERT_EQ(st.active, 2);
    ASSERT_EQ(st.queued, 3);
    ASSERT_EQ(st.completed, 0);
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    /* a job counts as done when its thread comes back for the next one */
    for (int i = 0; i < 1000; i++) {
        mf_pool_stats(pool, &st);
        if (st.completed == 5)
            break;
        usleep(1000);
    }
    ASSERT_EQ(st.queued, 0);
    ASSERT_EQ(st.active, 0);
    ASSERT_EQ(st.completed, 5);
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
}
