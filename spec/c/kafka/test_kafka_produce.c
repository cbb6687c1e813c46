/*
 * test_kafka_produce.c — the produce task against the mock cluster: many
 * messages in flight land once each, in order per partition; what a
 * message carries survives; every built-in codec round-trips; one handle
 * per property list, shared by loops on two threads; an idle producer
 * costs its loop nothing; every loop gets its reports whatever the other
 * loops on its handle do; refused properties.
 */
#include <pthread.h>
#include <unistd.h>

#include "kafka_prod.h"

TEST(a_hundred_thousand_messages_land_once_each_in_order_per_partition)
{
    enum { N = 100000, PARTS = 4 };
    const char *topic = kp_topic("bulk", PARTS);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    kp_batch_t b;
    kp_batch_init(&b, loop, k, topic, N, 1000, PARTS);
    double start = kh_now();
    kp_batch_run(&b, 100);
    printf("# %d messages produced in %.2f s\n", N, kh_now() - start);
    ASSERT_EQ(b.ok, N);
    ASSERT_EQ(mf_kafka_in_flight(k), 0);
    /* Offsets: 0..n-1 per partition, increasing in the order sent. */
    int64_t next[PARTS] = {0};
    for (int id = 0; id < N; id++) {
        ASSERT_EQ(b.partition[id], id % PARTS);
        ASSERT_EQ(b.offset[id], next[id % PARTS]++);
    }
    kp_check_read_back(topic, N, PARTS);
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* The task, its copy of the message and its report come from loop memory
 * and the mailbox's free list: once warm, producing allocates nothing of
 * ours (librdkafka copies each message itself). */
TEST(steady_state_producing_allocates_nothing_of_ours)
{
    const char *topic = kp_topic("alloc", 2);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    kp_batch_t warm, b;
    kp_batch_init(&warm, loop, k, topic, 2000, 500, 2);
    kp_batch_run(&warm, 60);
    ASSERT_EQ(warm.ok, 2000);
    kp_batch_init(&b, loop, k, topic, 10000, 500, 2);
    uint64_t before = mf_alloc_count();
    kp_batch_run(&b, 60);
    uint64_t allocs = mf_alloc_count() - before;
    ASSERT_EQ(b.ok, 10000);
    printf("# %llu allocations of ours for 10000 messages\n",
           (unsigned long long)allocs);
    ASSERT_EQ(allocs, 0);
    kp_batch_free(&warm);
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* ---- what a message carries ---------------------------------------------- */

typedef struct {
    rd_kafka_message_t *copy[8];
    rd_kafka_headers_t *headers[8];
    int64_t ts[8];
    int n;
} kept_t;

static void keep(const rd_kafka_message_t *m, void *arg)
{
    kept_t *kp = arg;
    ASSERT(kp->n < 8);
    rd_kafka_message_t *c = calloc(1, sizeof *c);
    *c = *m;
    c->key = m->key ? memcpy(malloc(m->key_len + 1), m->key, m->key_len) : NULL;
    c->payload =
        m->payload ? memcpy(malloc(m->len + 1), m->payload, m->len) : NULL;
    rd_kafka_headers_t *hs = NULL;
    if (rd_kafka_message_headers(m, &hs) == RD_KAFKA_RESP_ERR_NO_ERROR)
        kp->headers[kp->n] = rd_kafka_headers_copy(hs);
    kp->ts[kp->n] = rd_kafka_message_timestamp(m, NULL);
    kp->copy[kp->n++] = c;
}

static void kept_free(kept_t *kp)
{
    for (int i = 0; i < kp->n; i++) {
        free(kp->copy[i]->key);
        free(kp->copy[i]->payload);
        free(kp->copy[i]);
        if (kp->headers[i])
            rd_kafka_headers_destroy(kp->headers[i]);
    }
}

static void assert_header(rd_kafka_headers_t *hs, const char *name, size_t idx,
                          const char *want)
{
    const void *v = NULL;
    size_t len = 0;
    ASSERT(rd_kafka_header_get(hs, idx, name, &v, &len) ==
           RD_KAFKA_RESP_ERR_NO_ERROR);
    if (!want) {
        ASSERT(v == NULL);
        return;
    }
    ASSERT(len == strlen(want) && memcmp(v, want, len) == 0);
}

TEST(headers_keys_null_values_partition_and_timestamp_survive)
{
    const char *topic = kp_topic("fields", 3);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    mf_kafka_header_t hs[] = {
        {"trace", "abc", 3}, {"empty", NULL, 0}, {"trace", "def", 3}};
    mf_kafka_message_t m1 = {.topic = topic,
                             .partition = 2,
                             .key = "key",
                             .key_len = 3,
                             .value = "v1",
                             .value_len = 2,
                             .headers = hs,
                             .nheaders = 3,
                             .timestamp_ms = 1700000000123};
    mf_kafka_message_t m2 = {
        .topic = topic, .partition = 2, .key = "", .key_len = 0, .value = NULL};
    mf_kafka_message_t m3 = {.topic = topic,
                             .partition = 2,
                             .key = NULL,
                             .value = "",
                             .value_len = 0};
    one_t o;
    produce_one(loop, k, &m1, &o);
    ASSERT_EQ(o.state, MF_STATE_SUCCESS);
    ASSERT_EQ(o.partition, 2);
    ASSERT_EQ(o.offset, 0);
    ASSERT(mf_task_kafka_error(NULL) == NULL);
    produce_one(loop, k, &m2, &o);
    ASSERT_EQ(o.offset, 1);
    produce_one(loop, k, &m3, &o);
    ASSERT_EQ(o.offset, 2);

    kept_t kp = {0};
    ASSERT_EQ(kh_read_plain(topic, 2, 3, 30, keep, &kp), 3);
    ASSERT(kp.copy[0]->key_len == 3 && memcmp(kp.copy[0]->key, "key", 3) == 0);
    ASSERT(kp.copy[0]->len == 2 && memcmp(kp.copy[0]->payload, "v1", 2) == 0);
    ASSERT_EQ(kp.ts[0], 1700000000123);
    ASSERT(kp.headers[0] && rd_kafka_header_cnt(kp.headers[0]) == 3);
    assert_header(kp.headers[0], "trace", 0, "abc");
    assert_header(kp.headers[0], "trace", 1, "def");
    assert_header(kp.headers[0], "empty", 0, NULL);
    /* An empty key is not a missing one; a NULL value is a tombstone. */
    ASSERT(kp.copy[1]->key != NULL && kp.copy[1]->key_len == 0);
    ASSERT(kp.copy[1]->payload == NULL);
    ASSERT(kp.copy[2]->key == NULL);
    ASSERT(kp.copy[2]->payload != NULL && kp.copy[2]->len == 0);
    ASSERT(kp.headers[1] == NULL);
    kept_free(&kp);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* ---- codecs -----------------------------------------------------------------
 */

static bool has_feature(const char *features, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = features; (p = strstr(p, name)) != NULL; p += n)
        if ((p == features || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

TEST(every_builtin_codec_round_trips)
{
    char features[512];
    size_t len = sizeof features;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ASSERT(rd_kafka_conf_get(conf, "builtin.features", features, &len) ==
           RD_KAFKA_CONF_OK);
    rd_kafka_conf_destroy(conf);
    const char *codecs[] = {"gzip", "snappy", "lz4", "zstd"};
    mf_loop_t *loop = mf_loop_create();
    int tried = 0;
    for (size_t c = 0; c < MF_ARRAY_SIZE(codecs); c++) {
        if (!has_feature(features, codecs[c])) {
            printf("# %s: not in this librdkafka (%s)\n", codecs[c], features);
            continue;
        }
        const char *topic = kp_topic(codecs[c], 1);
        const char *extra[] = {"compression.type", codecs[c], "linger.ms", "20",
                               NULL};
        mf_kafka_t *k = kp_open(extra);
        kp_batch_t b;
        kp_batch_init(&b, loop, k, topic, 500, 500, 1);
        kp_batch_run(&b, 60);
        ASSERT_EQ(b.ok, 500);
        int ids[500];
        ASSERT_EQ(kp_read_ids(topic, 0, 500, ids), 500);
        for (int i = 0; i < 500; i++)
            ASSERT_EQ(ids[i], i); /* kp_read_each compared the bytes' form */
        kp_batch_free(&b);
        mf_kafka_close(k, 5000);
        tried++;
    }
    ASSERT(tried >= 4); /* Debian's librdkafka has all four */
    mf_loop_destroy(loop);
}

/* ---- one handle per property list -----------------------------------------
 */

typedef struct {
    const char *topic;
    mf_kafka_t *k;
    int ok;
} thread_arg_t;

static void *produce_on_own_loop(void *arg)
{
    thread_arg_t *a = arg;
    mf_loop_t *loop = mf_loop_create();
    a->k = kp_open(NULL);
    kp_batch_t b;
    kp_batch_init(&b, loop, a->k, a->topic, 2000, 200, 2);
    kp_batch_run(&b, 60);
    a->ok = b.ok;
    kp_batch_free(&b);
    mf_loop_destroy(loop);
    return NULL;
}

TEST(two_loops_on_two_threads_share_one_handle)
{
    const char *topic = kp_topic("shared", 2);
    thread_arg_t a[2] = {{topic, NULL, 0}, {topic, NULL, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ASSERT(pthread_create(&th[i], NULL, produce_on_own_loop, &a[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ASSERT(a[0].k != NULL && a[0].k == a[1].k);
    ASSERT_EQ(a[0].ok + a[1].ok, 4000);
    int ids[2000];
    ASSERT_EQ(kp_read_ids(topic, 0, 2000, ids), 2000);
    ASSERT_EQ(kp_read_ids(topic, 1, 2000, ids), 2000);
    /* Other properties, another handle. */
    const char *extra[] = {"linger.ms", "1", NULL};
    mf_kafka_t *other = kp_open(extra);
    ASSERT(other != a[0].k);
    mf_kafka_close(other, 0);
    mf_kafka_close(a[0].k, 5000);
    mf_kafka_close(a[1].k, 5000);
}

static void count_tick(mf_timer_t *timer)
{
    (*(int *)timer->data)++;
}

TEST(an_idle_producer_costs_its_loop_nothing)
{
    const char *topic = kp_topic("idle", 1);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    one_t o;
    mf_kafka_message_t m = {
        .topic = topic, .partition = 0, .value = "x", .value_len = 1};
    produce_one(loop, k, &m, &o); /* connected, metadata known */
    ASSERT_EQ(o.state, MF_STATE_SUCCESS);
    int ticks = 0, iterations = 0;
    mf_timer_t timer;
    mf_timer_init(&timer, count_tick, &ticks);
    mf_timer_start(loop, &timer, 2000);
    while (ticks == 0 && iterations < 100) {
        mf_loop_run(loop, MF_RUN_ONCE);
        iterations++;
    }
    ASSERT_EQ(ticks, 1);
    ASSERT_EQ(iterations, 1); /* nothing woke the loop in 2 s */
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* ---- reports of loops sharing a handle -----------------------------------
 */

static void start_one(mf_loop_t *loop, mf_kafka_t *k, const char *topic,
                      one_t *o)
{
    mf_kafka_message_t m = {
        .topic = topic, .partition = 0, .value = "p", .value_len = 1};
    memset(o, 0, sizeof *o);
    mf_task_start(mf_task_kafka_produce_create(loop, k, &m, one_done, o));
    mf_loop_run(loop, MF_RUN_NOWAIT); /* dispatched: handed to librdkafka */
    ASSERT(!o->done);
}

/* first, then second, each produce one message; each loop is run in that
 * order until its own report is in: both succeed. */
static void both_produce(mf_loop_t *first, one_t *of, mf_loop_t *second,
                         one_t *os, mf_kafka_t *k, const char *topic)
{
    start_one(first, k, topic, of);
    start_one(second, k, topic, os);
    ASSERT(kp_run_until(first, &of->done, 30));
    ASSERT(kp_run_until(second, &os->done, 30));
    ASSERT_EQ(of->state, MF_STATE_SUCCESS);
    ASSERT_EQ(os->state, MF_STATE_SUCCESS);
}

static void wait_none_in_flight(mf_kafka_t *k, double max_s)
{
    double until = kh_now() + max_s;
    while (mf_kafka_in_flight(k) > 0 && kh_now() < until)
        usleep(1000);
    ASSERT_EQ(mf_kafka_in_flight(k), 0);
}

/* Two loops on one thread, run one at a time, share a handle: each gets
 * its own reports whatever the other does (waits unrun, is destroyed with
 * a report out); a report never waits for a loop that is not run. */
TEST(every_loop_sharing_a_handle_gets_its_own_reports)
{
    const char *topic = kp_topic("sharing", 1);
    mf_loop_t *a = mf_loop_create(), *b = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    one_t oa, ob;
    both_produce(a, &oa, b, &ob, k, topic);
    /* a waits without ever being run until b is done. */
    both_produce(b, &ob, a, &oa, k, topic);
    ASSERT(ob.offset != oa.offset);
    /* b is destroyed while its report is out: its report is dropped,
     * a's still arrives. */
    start_one(b, k, topic, &ob);
    start_one(a, k, topic, &oa);
    mf_loop_destroy(b);
    ASSERT(kp_run_until(a, &oa.done, 30));
    ASSERT_EQ(oa.state, MF_STATE_SUCCESS);
    wait_none_in_flight(k, 30);
    ASSERT(!ob.done);
    produce_one(a, k, &(mf_kafka_message_t){.topic = topic, .value = "q",
                                            .value_len = 1},
                &oa);
    ASSERT_EQ(oa.state, MF_STATE_SUCCESS);
    ASSERT(oa.offset >= 5); /* after the four of a and b, and a's third */
    mf_kafka_close(k, 5000);
    mf_loop_destroy(a);
}

/* ---- refused properties
 * -------------------------------------------------------- */

TEST(a_bad_property_is_refused_by_name)
{
    char err[256];
    mf_kafka_prop_t bad[] = {{"bootstrap.servers", "127.0.0.1:1"},
                             {"no.such.thing", "1"}};
    ASSERT(mf_kafka_open(bad, 2, err, sizeof err) == NULL);
    ASSERT(strstr(err, "no.such.thing") != NULL);
    mf_kafka_prop_t value[] = {{"bootstrap.servers", "127.0.0.1:1"},
                               {"acks", "sometimes"}};
    ASSERT(mf_kafka_open(value, 2, err, sizeof err) == NULL);
    ASSERT(strstr(err, "acks") != NULL);
    mf_kafka_prop_t none[] = {{"linger.ms", "5"}};
    ASSERT(mf_kafka_open(none, 1, err, sizeof err) == NULL);
    ASSERT_STR_EQ(err, "bootstrap.servers: required");
}
