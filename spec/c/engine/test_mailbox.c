#include <pthread.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

#define PRODUCERS 4
#define PER_PRODUCER 250000

typedef struct producer {
    mf_loop_t *loop;
    int id;
    mf_post_t *posts;
} producer_t;

static long received;
static int last_seen[PRODUCERS];
static int fifo_violations;
static mf_loop_t *consumer;

static void on_post(mf_post_t *post)
{
    uintptr_t tag = (uintptr_t)post->data;
    int id = (int)(tag >> 32);
    int seq = (int)(tag & 0xffffffffu);
    if (seq != last_seen[id] + 1)
        fifo_violations++;
    last_seen[id] = seq;
    if (!mf_loop_on_thread(consumer))
        fifo_violations++;
    if (++received == (long)PRODUCERS * PER_PRODUCER)
        mf_loop_stop(consumer);
}

static void *produce(void *arg)
{
    producer_t *p = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        uintptr_t tag = ((uintptr_t)p->id << 32) | (uintptr_t)(i + 1);
        mf_post_init(&p->posts[i], on_post, (void *)tag);
        mf_loop_post(p->loop, &p->posts[i]);
    }
    return NULL;
}

TEST(a_million_posts_from_four_threads_arrive_all_and_in_order_per_thread)
{
    consumer = mf_loop_create();
    producer_t producers[PRODUCERS];
    pthread_t threads[PRODUCERS];
    uint64_t allocs_before = mf_alloc_count();
    for (int i = 0; i < PRODUCERS; i++) {
        producers[i].loop = consumer;
        producers[i].id = i;
        producers[i].posts = calloc(PER_PRODUCER, sizeof(mf_post_t));
        last_seen[i] = 0;
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_create(&threads[i], NULL, produce, &producers[i]);
    mf_loop_run(consumer, MF_RUN_FOREVER);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(threads[i], NULL);
    ASSERT_EQ(received, (long)PRODUCERS * PER_PRODUCER);
    ASSERT_EQ(fifo_violations, 0);
    for (int i = 0; i < PRODUCERS; i++)
        ASSERT_EQ(last_seen[i], PER_PRODUCER);
    ASSERT_EQ(mf_alloc_count() - allocs_before,
              0); /* posting never allocates */
    for (int i = 0; i < PRODUCERS; i++)
        free(producers[i].posts);
    mf_loop_destroy(consumer);
}

static void *stop_later(void *arg)
{
    usleep(20 * 1000);
    mf_loop_stop(arg);
    return NULL;
}

TEST(stop_from_another_thread_wakes_a_sleeping_loop)
{
    mf_loop_t *loop = mf_loop_create();
    pthread_t t;
    pthread_create(&t, NULL, stop_later, loop);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_FOREVER), 0);
    pthread_join(t, NULL);
    mf_loop_destroy(loop);
}

typedef struct call_probe {
    unsigned index;
    int on_own_thread;
    mf_waitgroup_t *wg;
} call_probe_t;

static void record_call(mf_loop_t *loop, void *arg)
{
    call_probe_t *p = arg;
    p->index = mf_loop_index(loop);
    p->on_own_thread = mf_loop_on_thread(loop);
    mf_waitgroup_done(p->wg);
}

TEST(workers_call_runs_a_function_on_the_chosen_worker)
{
    mf_workers_opts_t opts = {.nloops = 3, .npool = 1};
    mf_workers_t *w = mf_workers_create(&opts);
    ASSERT_EQ(mf_workers_count(w), 3);
    mf_waitgroup_t wg;
    mf_waitgroup_init(&wg, 3);
    call_probe_t probes[3];
    for (unsigned i = 0; i < 3; i++) {
        probes[i].wg = &wg;
        probes[i].index = 99;
        mf_workers_call(w, i, record_call, &probes[i]);
    }
    mf_waitgroup_wait(&wg);
    for (unsigned i = 0; i < 3; i++) {
        ASSERT_EQ(probes[i].index, i);
        ASSERT_EQ(probes[i].on_own_thread, 1);
    }
    mf_waitgroup_close(&wg);
    mf_workers_destroy(w);
}

static int deferred_ran;

static void on_deferred(mf_post_t *post)
{
    deferred_ran++;
}

TEST(defer_runs_on_the_next_phase_not_inside_the_call)
{
    mf_loop_t *loop = mf_loop_create();
    mf_post_t post;
    mf_post_init(&post, on_deferred, NULL);
    mf_loop_defer(loop, &post);
    ASSERT_EQ(deferred_ran, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(deferred_ran, 1);
    mf_loop_destroy(loop);
}

/* A task kind that completes as soon as it is dispatched. */
static void instant_dispatch(mf_task_t *task)
{
    mf_task_complete(task, MF_STATE_SUCCESS, 0);
}

static void instant_destroy(mf_task_t *task)
{
    free(task);
}

static const mf_task_ops_t instant_ops = {"instant", instant_dispatch, NULL,
                                          instant_destroy};

static int chain_left;
static mf_post_t chain_post;

static void chain_task_done(mf_task_t *task)
{
    if (--chain_left > 0)
        mf_loop_defer(mf_task_loop(task), &chain_post);
}

static void chain_step(mf_post_t *post)
{
    mf_task_t *task = malloc(sizeof *task);
    ASSERT(task != NULL);
    mf_task_init(task, &instant_ops, post->data, chain_task_done, NULL);
    mf_task_start(task);
}

/* A finished task whose callback defers the next step (a reply that makes
 * a coroutine send the next query) must not wait for another poll: the
 * whole chain runs in one iteration. */
TEST(deferred_steps_and_finished_tasks_alternate_without_a_poll_between)
{
    mf_loop_t *loop = mf_loop_create();
    chain_left = 8;
    mf_post_init(&chain_post, chain_step, loop);
    mf_loop_defer(loop, &chain_post);
    mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(chain_left, 0);
    mf_loop_destroy(loop);
}
