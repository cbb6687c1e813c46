/*
 * test_kafka_consumer.c — one consumer on the mock cluster: every record
 * once and in order per partition, the poll task's rules (one at a time,
 * wait_ms, a close), records' fields, and an idle consumer costing the loop
 * nothing.
 */
#include "kafka_consumer_util.h"

TEST(a_hundred_thousand_records_over_four_partitions_come_once_in_order)
{
    char topic[64], group[64];
    kh_setup();
    kc_name(topic, sizeof topic, "many");
    kh_topic(topic, 4);
    for (int p = 0; p < 4; p++) {
        char prefix[8];
        snprintf(prefix, sizeof prefix, "p%d", p);
        kh_produce_plain(topic, p, prefix, 25000);
    }
    mf_loop_t *loop = mf_loop_create();
    kc_t k;
    kc_open(&k, loop, kc_name(group, sizeof group, "g"), topic, 4, 25000, NULL);
    k.max = 1000;
    kc_poll_start(&k);
    double t0 = kh_now();
    ASSERT(kc_run_until_unique(&k, 100000, 90));
    double took = kh_now() - t0;
    /* A moment more: nothing else may come. */
    double end = kh_now() + 0.5;
    while (kh_now() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    fprintf(stderr, "100000 records in %.2f s, %d poll tasks\n", took, k.polls);
    ASSERT_EQ(k.unique, 100000);
    ASSERT_EQ(k.dups, 0);
    ASSERT_EQ(k.disorder, 0);
    ASSERT_EQ(k.foreign, 0);
    ASSERT_EQ(k.failures, 0);
    for (int p = 0; p < 4; p++) {
        ASSERT_EQ(k.got[p], 25000);
        ASSERT_EQ(k.last[p], 24999);
    }
    ASSERT(k.assigned >= 1);
    kc_close(&k);
    ASSERT_EQ(k.revoked, 1);
    kc_free(&k);
    mf_loop_destroy(loop);
}

TEST(open_refuses_a_missing_group_an_empty_subscription_and_a_bad_property)
{
    kh_setup();
    mf_loop_t *loop = mf_loop_create();
    char err[256];
    const char *topics[] = {"t"};
    mf_kafka_prop_t no_group[] = {{"bootstrap.servers", kh_bootstrap}};
    mf_kafka_consumer_opts_t o = {no_group, 1, topics, 1, NULL, NULL};
    ASSERT(mf_kafka_consumer_open(loop, &o, err, sizeof err) == NULL);
    ASSERT_STR_EQ(err, "group.id: required");
    mf_kafka_prop_t props[] = {{"bootstrap.servers", kh_bootstrap},
                               {"group.id", "g"},
                               {"fetch.wait.max.ms", "soon"}};
    o = (mf_kafka_consumer_opts_t){props, 2, topics, 0, NULL, NULL};
    ASSERT(mf_kafka_consumer_open(loop, &o, err, sizeof err) == NULL);
    ASSERT_STR_EQ(err, "topics: at least one is required");
    o = (mf_kafka_consumer_opts_t){props, 3, topics, 1, NULL, NULL};
    ASSERT(mf_kafka_consumer_open(loop, &o, err, sizeof err) == NULL);
    ASSERT(strstr(err, "fetch.wait.max.ms") != NULL);
    mf_loop_destroy(loop);
}

static void count_cb(mf_task_t *t)
{
    int *out = t->user;
    out[0]++;
    out[1] = mf_task_state(t);
    out[2] = mf_task_error(t);
    size_t n;
    mf_task_kafka_records(t, &n);
    out[3] = (int)n;
}

TEST(one_poll_task_at_a_time_and_a_close_fails_the_waiting_one)
{
    char topic[64], group[64];
    kc_t k;
    mf_loop_t *loop = kc_case(&k, topic, group, "busy", 1, 0);
    k.wait_ms = -1;
    kc_poll_start(&k); /* waits: the topic is empty */
    int second[4] = {0};
    mf_task_start(mf_task_kafka_poll_create(k.c, 10, -1, count_cb, second));
    double end = kh_now() + 1;
    while (second[0] == 0 && kh_now() < end)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(second[0], 1);
    ASSERT_EQ(second[1], MF_STATE_TASK_ERROR);
    ASSERT_EQ(second[2], MF_EBUSY);
    ASSERT(k.polling);
    kc_close(&k);
    ASSERT(!k.polling);
    ASSERT_EQ(k.closed_polls, 1);
    ASSERT_EQ(k.failures, 0);
    kc_free(&k);
    mf_loop_destroy(loop);
}

TEST(wait_ms_bounds_the_wait_and_zero_returns_at_once)
{
    char topic[64], group[64];
    kc_t k;
    mf_loop_t *loop = kc_case(&k, topic, group, "wait", 1, 0);
    k.keep = false;
    int now[4] = {0};
    mf_task_start(mf_task_kafka_poll_create(k.c, 10, 0, count_cb, now));
    double t0 = kh_now();
    while (now[0] == 0 && kh_now() < t0 + 1)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(now[0], 1);
    ASSERT_EQ(now[1], MF_STATE_SUCCESS);
    ASSERT_EQ(now[3], 0);
    int later[4] = {0};
    t0 = kh_now();
    mf_task_start(mf_task_kafka_poll_create(k.c, 10, 300, count_cb, later));
    while (later[0] == 0 && kh_now() < t0 + 10)
        mf_loop_run(loop, MF_RUN_ONCE);
    double took = kh_now() - t0;
    ASSERT_EQ(later[0], 1);
    ASSERT_EQ(later[1], MF_STATE_SUCCESS);
    ASSERT_EQ(later[3], 0);
    ASSERT(took >= 0.29 && took < 5);
    int bad[4] = {0};
    mf_task_start(mf_task_kafka_poll_create(k.c, 0, 0, count_cb, bad));
    while (bad[0] == 0 && kh_now() < t0 + 15)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(bad[2], MF_EINVAL);
    kc_finish(&k);
}

typedef struct fields {
    mf_kafka_consumer_t *c;
    bool done;
    int64_t ts;
    char key[16], value[16], hname[16], hvalue[16];
    size_t nheaders, key_len;
    bool null_header;
    bool null_value;
    int records;
} fields_t;

static void fields_cb(mf_task_t *t)
{
    fields_t *f = t->user;
    size_t n;
    const mf_kafka_record_t *r = mf_task_kafka_records(t, &n);
    for (size_t i = 0; i < n; i++, f->records++) {
        if (f->records == 0) {
            f->ts = r[i].timestamp_ms;
            f->key_len = r[i].key_len;
            memcpy(f->key, r[i].key, r[i].key_len);
            memcpy(f->value, r[i].value, r[i].value_len);
            f->nheaders = r[i].nheaders;
            if (r[i].nheaders == 2) {
                memcpy(f->hname, r[i].headers[0].name,
                       strlen(r[i].headers[0].name));
                memcpy(f->hvalue, r[i].headers[0].value, r[i].headers[0].len);
                f->null_header = r[i].headers[1].value == NULL;
            }
        } else {
            f->null_value = r[i].value == NULL && r[i].key == NULL;
        }
    }
    if (f->records >= 2)
        f->done = true;
    else
        mf_task_start(mf_task_kafka_poll_create(f->c, 10, 200, fields_cb, f));
}

TEST(records_carry_key_value_headers_and_timestamp)
{
    char topic[64], group[64];
    kh_setup();
    kc_name(topic, sizeof topic, "fields");
    kh_topic(topic, 1);
    rd_kafka_t *rk = kh_plain_producer(NULL);
    rd_kafka_headers_t *h = rd_kafka_headers_new(2);
    rd_kafka_header_add(h, "trace", -1, "abc", 3);
    rd_kafka_header_add(h, "empty", -1, NULL, 0);
    ASSERT(rd_kafka_producev(
               rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
               RD_KAFKA_V_KEY("k1", 2), RD_KAFKA_V_VALUE("v1", 2),
               RD_KAFKA_V_TIMESTAMP(1700000000123LL), RD_KAFKA_V_HEADERS(h),
               RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
               RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    ASSERT(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                             RD_KAFKA_V_PARTITION(0),
                             RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    ASSERT(rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    mf_loop_t *loop = mf_loop_create();
    kc_t k;
    kc_open(&k, loop, kc_name(group, sizeof group, "g"), topic, 1, 1, NULL);
    fields_t f = {.c = k.c};
    mf_task_start(mf_task_kafka_poll_create(k.c, 10, 200, fields_cb, &f));
    ASSERT(kh_run_until(loop, &f.done, 30));
    ASSERT_EQ(f.ts, 1700000000123LL);
    ASSERT_EQ(f.key_len, 2);
    ASSERT_STR_EQ(f.key, "k1");
    ASSERT_STR_EQ(f.value, "v1");
    ASSERT_EQ(f.nheaders, 2);
    ASSERT_STR_EQ(f.hname, "trace");
    ASSERT_STR_EQ(f.hvalue, "abc");
    ASSERT(f.null_header);
    ASSERT(f.null_value);
    kc_finish(&k);
}

static void stop_timer_cb(mf_timer_t *timer)
{
    *(bool *)timer->data = true;
}

TEST(an_idle_consumer_costs_the_loop_no_iterations)
{
    char topic[64], group[64];
    kc_t k;
    mf_loop_t *loop = kc_case(&k, topic, group, "idle", 2, 10);
    k.wait_ms = -1; /* no timer of ours */
    kc_poll_start(&k);
    ASSERT(kc_run_until_unique(&k, 10, 30));
    /* Settle (the fetchers find the partitions empty), then count. */
    bool settled = false, done = false;
    mf_timer_t settle, stop;
    mf_timer_init(&settle, stop_timer_cb, &settled);
    mf_timer_start(loop, &settle, 1000);
    kh_run_until(loop, &settled, 5);
    mf_timer_init(&stop, stop_timer_cb, &done);
    mf_timer_start(loop, &stop, 2000);
    int iterations = 0;
    double end = kh_now() + 10;
    while (!done && kh_now() < end) {
        mf_loop_run(loop, MF_RUN_ONCE);
        iterations++;
    }
    fprintf(stderr, "idle for 2 s: %d loop iterations\n", iterations);
    ASSERT(done);
    ASSERT(iterations <= 3); /* the stop timer, and at most an auto commit */
    ASSERT(k.polling);
    ASSERT_EQ(k.unique, 10);
    kc_finish(&k);
}

TEST(a_loop_destroyed_with_its_consumer_open_closes_it)
{
    char topic[64], group[64];
    kc_t k;
    mf_loop_t *loop = kc_case(&k, topic, group, "leftover", 1, 5);
    kc_poll_start(&k);
    ASSERT(kc_run_until_unique(&k, 5, 30));
    k.keep = false;
    mf_loop_destroy(loop); /* closes the consumer, waiting */
    kc_free(&k);
    /* The offsets were committed by that close: the group resumes after
     * the records it had. */
    kh_produce_plain(topic, 0, "p0-late", 1);
    loop = mf_loop_create();
    kc_t again;
    kc_open(&again, loop, group, topic, 1, 5, NULL);
    kc_poll_start(&again);
    double end = kh_now() + 30;
    while (again.foreign == 0 && kh_now() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT_EQ(again.foreign, 1); /* "p0-late-0" only */
    ASSERT_EQ(again.unique, 0);
    kc_finish(&again);
}
