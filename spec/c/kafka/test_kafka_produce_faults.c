/*
 * test_kafka_produce_faults.c — the produce task when things go wrong:
 * request errors and a leader moving while messages flow (all delivered,
 * none twice, in the order sent); a connection cut and a leader down while
 * messages flow (all delivered in the order sent; the mock cluster may keep
 * a copy of what it appended before the cut, see below); a message timeout,
 * a full queue, an unknown partition; and the lifetimes: a canceled task, a
 * loop destroyed with messages in flight, a handle closed with messages in
 * flight.
 */
#include "kafka_prod.h"

/* The topic's partitions led by broker 1, 2, 3, 1 ... */
static const char *led_topic(const char *base, int parts)
{
    const char *topic = kp_topic(base, parts);
    for (int p = 0; p < parts; p++)
        rd_kafka_mock_partition_set_leader(kh_mock, topic, p,
                                           1 + p % KH_BROKERS);
    return topic;
}

/* The message at each reported offset of partition p is the one reported
 * there, and the offsets grow in the order sent. Returns how many offsets
 * of the partition no report names (copies), after checking that each of
 * them holds a copy of a message reported at a later offset. */
static int assert_partition_as_reported(const kp_batch_t *b, int parts, int p)
{
    int per = b->n / parts;
    int64_t lo = -1, hi = -1;
    rd_kafka_t *rk = kh_plain_producer(NULL);
    ASSERT(rd_kafka_query_watermark_offsets(rk, b->topic, p, &lo, &hi, 10000) ==
           0);
    rd_kafka_destroy(rk);
    ASSERT_EQ(lo, 0);
    ASSERT(hi >= per);
    int *log = malloc(sizeof(int) * (size_t)hi);
    bool *named = calloc((size_t)hi, sizeof *named);
    ASSERT_EQ(kp_read_ids(b->topic, p, (int)hi, log), hi);
    int64_t last = -1;
    for (int id = p; id < b->n; id += parts) {
        ASSERT(b->offset[id] > last && b->offset[id] < hi);
        last = b->offset[id];
        ASSERT_EQ(log[last], id);
        named[last] = true;
    }
    for (int64_t o = 0; o < hi; o++)
        if (!named[o])
            ASSERT(log[o] >= 0 && log[o] < b->n && log[o] % parts == p &&
                   b->offset[log[o]] > o);
    free(named);
    free(log);
    return (int)(hi - per);
}

TEST(request_errors_and_a_moving_leader_lose_duplicate_and_reorder_nothing)
{
    enum { N = 12000, PARTS = 4 };
    const char *topic = led_topic("faults", PARTS);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    kp_batch_t b;
    kp_batch_init(&b, loop, k, topic, N, 500, PARTS);
    kp_batch_run_to(&b, 2000, 60);
    /* Produce is API key 0. An injected error appends nothing. */
    rd_kafka_mock_push_request_errors(
        kh_mock, 0, 4, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
    rd_kafka_mock_broker_push_request_error_rtts(
        kh_mock, 2, 0, 1, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, 50);
    kp_batch_run_to(&b, 6000, 60);
    rd_kafka_mock_partition_set_leader(kh_mock, topic, 0, 2);
    rd_kafka_mock_partition_set_leader(kh_mock, topic, 1, 3);
    kp_batch_run(&b, 90);
    ASSERT_EQ(b.ok, N);
    for (int p = 0; p < PARTS; p++)
        ASSERT_EQ(assert_partition_as_reported(&b, PARTS, p), 0);
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* A produce request the mock cluster appended but whose answer a cut
 * connection lost is sent again by librdkafka with the same producer id
 * and sequence. A broker deduplicates it (its answer names the first
 * copy's offset); librdkafka 2.0.2's mock cluster checks sequences only
 * for transactional producers and appends it again: the partition then
 * holds an unreported copy of those messages before the reported ones
 * (seen: ids 5776..6388 of a partition at offsets 1444..1597 and again
 * from 1598 on, after broker 1 went down with requests in flight). What
 * holds: every message is reported once, at an offset that holds it, in
 * the order sent; a copy comes before its reported message, and there are
 * no more copies than messages were in flight. */
TEST(a_cut_connection_and_a_leader_down_lose_and_reorder_nothing)
{
    enum { N = 12000, PARTS = 4, WINDOW = 500 };
    const char *topic = led_topic("cut", PARTS);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    kp_batch_t b;
    kp_batch_init(&b, loop, k, topic, N, WINDOW, PARTS);
    kp_batch_run_to(&b, 2000, 60);
    /* Broker 2 closes the connection of its next produce request. */
    rd_kafka_mock_broker_push_request_error_rtts(
        kh_mock, 2, 0, 1, RD_KAFKA_RESP_ERR__TRANSPORT, 0);
    kp_batch_run_to(&b, 5000, 60);
    rd_kafka_mock_broker_set_down(kh_mock, 1);
    kp_run_for(loop, 1.0);
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    kp_batch_run(&b, 90);
    ASSERT_EQ(b.ok, N);
    int copies = 0;
    for (int p = 0; p < PARTS; p++)
        copies += assert_partition_as_reported(&b, PARTS, p);
    ASSERT(copies <= 2 * WINDOW); /* two cuts, each with its window at most */
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

TEST(a_message_not_delivered_in_time_fails_with_timeout)
{
    const char *topic = led_topic("timeout", 1);
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"message.timeout.ms", "1000", NULL};
    mf_kafka_t *k = kp_open(extra);
    rd_kafka_mock_broker_set_down(kh_mock, 1);
    mf_kafka_message_t m = {
        .topic = topic, .partition = 0, .value = "late", .value_len = 4};
    one_t o;
    produce_one(loop, k, &m, &o);
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    ASSERT_EQ(o.state, MF_STATE_TIMEOUT);
    ASSERT_EQ(o.error, MF_ETIMEDOUT);
    ASSERT_STR_EQ(o.text, "_MSG_TIMED_OUT: Local: Message timed out");
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* A broker that goes down after it answered: librdkafka notices the
 * message's timeout only when that broker's thread wakes, and the thread
 * sleeps its reconnect backoff, which grows while the broker stays down.
 * The failure comes within a tenth of message.timeout.ms all the same
 * (examples/kafka_site answered after 14.7 s with 10 s configured). */
TEST(a_message_whose_broker_went_down_fails_within_a_tenth_of_its_timeout)
{
    const char *topic = led_topic("downlate", 1);
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"message.timeout.ms", "10000", NULL};
    mf_kafka_t *k = kp_open(extra);
    mf_kafka_message_t m = {
        .topic = topic, .partition = 0, .value = "first", .value_len = 5};
    one_t o;
    produce_one(loop, k, &m, &o);
    ASSERT_EQ(o.state, MF_STATE_SUCCESS);
    rd_kafka_mock_broker_set_down(kh_mock, 1);
    m.value = "late";
    m.value_len = 4;
    double t0 = kh_now();
    produce_one(loop, k, &m, &o);
    double took = kh_now() - t0;
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    ASSERT_EQ(o.state, MF_STATE_TIMEOUT);
    ASSERT_STR_EQ(o.text, "_MSG_TIMED_OUT: Local: Message timed out");
    if (took < 9.9 || took > 11.0)
        MF_TEST_FAIL("failed after %.2f s, message.timeout.ms 10000", took);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

TEST(a_full_queue_fails_at_once_with_busy)
{
    const char *topic = kp_topic("full", 1);
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"queue.buffering.max.messages", "1", "linger.ms",
                           "200", NULL};
    mf_kafka_t *k = kp_open(extra);
    kp_batch_t b;
    kp_batch_init(&b, loop, k, topic, 50, 50, 1);
    kp_batch_run(&b, 60);
    ASSERT(b.ok >= 1 && b.ok < 50);
    ASSERT_EQ(b.first_state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(b.first_error, MF_EBUSY);
    ASSERT_STR_EQ(b.first_text, "_QUEUE_FULL: Local: Queue full");
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

TEST(an_unknown_partition_fails_with_enoent)
{
    const char *topic = kp_topic("parts", 2);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    mf_kafka_message_t m = {
        .topic = topic, .partition = 7, .value = "x", .value_len = 1};
    one_t o;
    produce_one(loop, k, &m, &o);
    ASSERT_EQ(o.state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(o.error, MF_ENOENT);
    ASSERT(strstr(o.text, "UNKNOWN_PARTITION") != NULL);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* ---- lifetimes ------------------------------------------------------------
 */

static int callbacks;

static void count_done(mf_task_t *t)
{
    one_t *o = t->user;
    callbacks++;
    o->state = mf_task_state(t);
    o->error = mf_task_error(t);
    o->done = true;
}

static void wait_in_flight_zero(mf_loop_t *loop, mf_kafka_t *k, double max_s)
{
    double end = kh_now() + max_s;
    while (mf_kafka_in_flight(k) > 0 && kh_now() < end) {
        if (loop)
            mf_loop_run(loop, MF_RUN_NOWAIT);
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ(mf_kafka_in_flight(k), 0);
}

/* n messages handed to librdkafka while their leader (broker 1) is down. */
static void stall(kp_batch_t *b, mf_loop_t *loop, mf_kafka_t *k,
                  const char *topic, int n)
{
    rd_kafka_mock_broker_set_down(kh_mock, 1);
    kp_batch_init(b, loop, k, topic, n, n, 1);
    kp_send_next(b);
    for (int i = 0; i < 5; i++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
}

TEST(a_canceled_task_completes_at_once_and_its_late_report_is_dropped)
{
    const char *topic = led_topic("cancel", 1);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    rd_kafka_mock_broker_set_down(kh_mock, 1);
    mf_kafka_message_t m = {
        .topic = topic, .partition = 0, .value = "c", .value_len = 1};
    one_t o = {0};
    callbacks = 0;
    mf_task_t *t = mf_task_kafka_produce_create(loop, k, &m, count_done, &o);
    mf_task_set_timeout(t, 100);
    double start = kh_now();
    mf_task_start(t);
    ASSERT(kp_run_until(loop, &o.done, 10));
    ASSERT(kh_now() - start < 5);
    ASSERT_EQ(o.state, MF_STATE_TIMEOUT);
    ASSERT_EQ(mf_kafka_in_flight(k), 1);
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    wait_in_flight_zero(loop, k, 30);
    kp_run_for(loop, 0.2); /* the report reaches the loop and is dropped */
    ASSERT_EQ(callbacks, 1);
    ASSERT_EQ(kh_read_plain(topic, 0, 1, 15, NULL, NULL), 1);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

TEST(a_loop_destroyed_with_messages_in_flight_leaves_nothing_behind)
{
    const char *topic = led_topic("gone", 1);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    kp_batch_t b;
    stall(&b, loop, k, topic, 100);
    ASSERT_EQ(mf_kafka_in_flight(k), 100);
    mf_loop_destroy(loop);
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    wait_in_flight_zero(NULL, k, 30);
    ASSERT_EQ(b.done, 0);
    ASSERT_EQ(kh_read_plain(topic, 0, 100, 15, NULL, NULL), 100);
    kp_batch_free(&b);
    mf_kafka_close(k, 5000);
}

TEST(closing_a_handle_fails_its_waiting_tasks_with_closed)
{
    const char *topic = led_topic("closing", 1);
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"client.id", "closing", NULL};
    mf_kafka_t *k = kp_open(extra);
    kp_batch_t b;
    stall(&b, loop, k, topic, 20);
    ASSERT_EQ(mf_kafka_in_flight(k), 20);
    double start = kh_now();
    mf_kafka_close(k, 0);
    ASSERT(kh_now() - start < 10);
    ASSERT(kp_run_until(loop, &b.finished, 10));
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    ASSERT_EQ(b.ok, 0);
    ASSERT_EQ(b.first_state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(b.first_error, MF_ECLOSED);
    ASSERT(strncmp(b.first_text, "_PURGE_", 7) == 0);
    kp_batch_free(&b);
    mf_loop_destroy(loop);
}

TEST(a_loop_destroyed_then_its_handle_closed_leaves_nothing_behind)
{
    const char *topic = led_topic("both", 1);
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"client.id", "both", NULL};
    mf_kafka_t *k = kp_open(extra);
    kp_batch_t b;
    stall(&b, loop, k, topic, 10);
    mf_loop_destroy(loop);
    mf_kafka_close(k, 0); /* purged: the reports find no loop */
    rd_kafka_mock_broker_set_up(kh_mock, 1);
    ASSERT_EQ(b.done, 0);
    kp_batch_free(&b);
}
