/* Loop-local storage: values per loop and per key, teardown by rank, and
 * key ids taken once even when two workers meet a new key at once. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

/* ---- values per loop and key ------------------------------------------- */

static mf_loop_key_t key_a = MF_LOOP_KEY_INIT(10, NULL);
static mf_loop_key_t key_b = MF_LOOP_KEY_INIT(10, NULL);

TEST(two_keys_hold_values_per_loop)
{
    mf_loop_t *one = mf_loop_create(), *two = mf_loop_create();
    int a1, a2, b1;
    ASSERT(mf_loop_get(one, &key_a) == NULL);
    ASSERT_EQ(key_a._id, 0); /* a read takes no id */
    mf_loop_set(one, &key_a, &a1);
    mf_loop_set(two, &key_a, &a2);
    mf_loop_set(one, &key_b, &b1);
    ASSERT(key_a._id != 0 && key_b._id != 0 && key_a._id != key_b._id);
    ASSERT(mf_loop_get(one, &key_a) == &a1);
    ASSERT(mf_loop_get(two, &key_a) == &a2);
    ASSERT(mf_loop_get(one, &key_b) == &b1);
    ASSERT(mf_loop_get(two, &key_b) == NULL);
    mf_loop_set(one, &key_a, NULL);
    ASSERT(mf_loop_get(one, &key_a) == NULL);
    ASSERT(mf_loop_get(two, &key_a) == &a2);
    mf_loop_destroy(one);
    mf_loop_destroy(two);
}

/* ---- teardown order ----------------------------------------------------- */

static char order[16];

static void note(mf_loop_t *loop, void *value)
{
    ASSERT(loop != NULL);
    mf_test_append(order, sizeof order, value, 1);
}

/* Clears the value of key "low" as a host that unregisters itself would:
 * its dtor must then not run. */
static mf_loop_key_t low_rank;
static void note_and_clear(mf_loop_t *loop, void *value)
{
    note(loop, value);
    mf_loop_set(loop, &low_rank, NULL);
}

static mf_loop_key_t older_5 = MF_LOOP_KEY_INIT(5, note);
static mf_loop_key_t rank_30 = MF_LOOP_KEY_INIT(30, note);
static mf_loop_key_t newer_5 = MF_LOOP_KEY_INIT(5, note);
static mf_loop_key_t rank_20 = MF_LOOP_KEY_INIT(20, note_and_clear);
static mf_loop_key_t low_rank = MF_LOOP_KEY_INIT(1, note);
static mf_loop_key_t unset = MF_LOOP_KEY_INIT(50, note);

TEST(teardown_runs_higher_ranks_first_then_newer_keys)
{
    mf_loop_t *loop = mf_loop_create();
    /* Ids in this order: older_5 before newer_5. */
    mf_loop_set(loop, &older_5, "o");
    mf_loop_set(loop, &rank_30, "t");
    mf_loop_set(loop, &newer_5, "n");
    mf_loop_set(loop, &rank_20, "w");
    mf_loop_set(loop, &low_rank, "l");
    mf_loop_set(loop, &unset, "u");
    mf_loop_set(loop, &unset, NULL); /* cleared: no dtor */
    order[0] = 0;
    mf_loop_destroy(loop);
    ASSERT_STR_EQ(order, "twno");
}

/* ---- ids under a race -----------------------------------------------------
 */

#define RACE_KEYS 32

static mf_loop_key_t race_keys[RACE_KEYS];
static pthread_barrier_t race_barrier;

typedef struct racer {
    mf_loop_t *loop;
    int values[RACE_KEYS];
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    for (int i = 0; i < RACE_KEYS; i++) {
        pthread_barrier_wait(&race_barrier);
        mf_loop_set(r->loop, &race_keys[i], &r->values[i]);
    }
    return NULL;
}

TEST(a_key_met_by_two_threads_at_once_takes_one_id)
{
    racer_t racers[2];
    pthread_t threads[2];
    pthread_barrier_init(&race_barrier, NULL, 2);
    for (int t = 0; t < 2; t++) {
        racers[t].loop = mf_loop_create();
        pthread_create(&threads[t], NULL, race, &racers[t]);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&race_barrier);
    /* One id per key, none lost to the losing thread: consecutive ids. */
    for (int i = 0; i < RACE_KEYS; i++) {
        ASSERT(race_keys[0]._id != 0);
        ASSERT_EQ(race_keys[i]._id, race_keys[0]._id + (unsigned)i);
        for (int t = 0; t < 2; t++)
            ASSERT(mf_loop_get(racers[t].loop, &race_keys[i]) ==
                   &racers[t].values[i]);
    }
    for (int t = 0; t < 2; t++)
        mf_loop_destroy(racers[t].loop);
}

/* ---- the limit --------------------------------------------------------------
 */

TEST(one_key_beyond_the_limit_aborts)
{
    static mf_loop_key_t many[MF_LOOP_KEYS + 1];
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        mf_loop_t *loop = mf_loop_create();
        for (int i = 0; i <= MF_LOOP_KEYS; i++)
            mf_loop_set(loop, &many[i], loop);
        _exit(0); /* not reached */
    }
    int status;
    ASSERT(waitpid(pid, &status, 0) == pid);
    ASSERT(WIFSIGNALED(status));
    ASSERT_EQ(WTERMSIG(status), SIGABRT);
}
