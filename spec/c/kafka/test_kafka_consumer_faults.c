/*
 * test_kafka_consumer_faults.c — brokers going down under a consumer: the
 * group coordinator, then the partitions' leader; consumption resumes when
 * they are back, and a new member of the group resumes from the committed
 * offsets.
 */
#include "kafka_consumer_util.h"

TEST(consumption_resumes_after_the_coordinator_and_the_leader_come_back)
{
    char topic[64], group[64];
    kh_setup();
    kc_name(topic, sizeof topic, "faults");
    kc_name(group, sizeof group, "g");
    kh_topic(topic, 2);
    for (int p = 0; p < 2; p++)
        ASSERT(rd_kafka_mock_partition_set_leader(kh_mock, topic, p, 2) == 0);
    ASSERT(rd_kafka_mock_coordinator_set(kh_mock, "group", group, 1) == 0);
    mf_loop_t *loop = mf_loop_create();
    const char *manual[] = {"enable.auto.commit", "false", NULL};
    kc_t k;
    kc_open(&k, loop, group, topic, 2, 1000, manual);
    k.max = 50;
    kc_poll_start(&k);
    kc_produce(topic, 0, 0, 200);
    kc_produce(topic, 1, 0, 200);
    ASSERT(kc_run_until_unique(&k, 400, 60));
    kc_settle(&k);
    kc_answer_t first = {0};
    mf_task_start(
        mf_task_kafka_commit_create(k.c, NULL, 0, kc_answer_cb, &first));
    ASSERT(kh_run_until(loop, &first.done, 60));
    ASSERT_EQ(first.state, MF_STATE_SUCCESS);
    k.keep = true;
    kc_poll_start(&k);

    /* The coordinator goes: fetching goes on. If the member's session
     * lapses meanwhile (no heartbeat reaches the coordinator; a slow,
     * instrumented build may take that long), it gives up its partitions
     * and can rejoin only once the coordinator is back, then rereads from
     * the commit: so without a rebalance the records come while it is
     * down, and with one they come after it is back. */
    ASSERT(rd_kafka_mock_broker_set_down(kh_mock, 1) == 0);
    kc_produce(topic, 0, 200, 100);
    kc_produce(topic, 1, 200, 100);
    bool while_down = kc_run_until_unique(&k, 600, 20);
    ASSERT(while_down || k.revoked + k.lost > 0);
    ASSERT(rd_kafka_mock_broker_set_up(kh_mock, 1) == 0);
    ASSERT(kc_run_until_unique(&k, 600, 60));

    /* The leader goes: nothing comes, nothing fails; then it is back. */
    ASSERT(rd_kafka_mock_broker_set_down(kh_mock, 2) == 0);
    kc_run_for(loop, 2);
    ASSERT_EQ(k.failures, 0);
    ASSERT(k.polling);
    ASSERT(rd_kafka_mock_broker_set_up(kh_mock, 2) == 0);
    kc_produce(topic, 0, 300, 100);
    kc_produce(topic, 1, 300, 100);
    ASSERT(kc_run_until_unique(&k, 800, 60));
    const char *last = NULL;
    uint64_t errors = mf_kafka_consumer_errors(k.c, &last);
    fprintf(stderr, "%llu transient errors, the last: %s\n",
            (unsigned long long)errors, last ? last : "none");
    ASSERT((errors == 0) == (last == NULL));
    fprintf(stderr, "%d rebalances, %d records read twice\n",
            k.revoked + k.lost, k.dups);
    ASSERT_EQ(k.unique, 800);
    ASSERT(k.dups <= 400); /* at most what came after the commit */
    if (k.revoked + k.lost == 0) {
        ASSERT_EQ(k.dups, 0);
        ASSERT_EQ(k.disorder, 0);
    }
    ASSERT_EQ(k.failures, 0);

    kc_settle(&k);
    kc_answer_t a = {0};
    mf_task_start(mf_task_kafka_commit_create(k.c, NULL, 0, kc_answer_cb, &a));
    ASSERT(kh_run_until(loop, &a.done, 60));
    ASSERT_EQ(a.state, MF_STATE_SUCCESS);
    mf_kafka_lag_t lag;
    ASSERT_EQ(mf_kafka_consumer_lag(k.c, topic, 1, &lag), 0);
    ASSERT_EQ(lag.committed, 400);
    ASSERT_EQ(lag.lag, 0);
    kc_close(&k);
    kc_free(&k);

    /* A new member starts from the committed offsets. */
    kc_produce(topic, 0, 400, 50);
    kc_produce(topic, 1, 400, 50);
    kc_t again;
    kc_open(&again, loop, group, topic, 2, 1000, manual);
    kc_poll_start(&again);
    ASSERT(kc_run_until_unique(&again, 100, 60));
    kc_run_for(loop, 0.5);
    ASSERT_EQ(again.unique, 100);
    ASSERT_EQ(again.got[0], 50);
    ASSERT_EQ(again.got[1], 50);
    ASSERT_EQ(again.last[0], 449);
    ASSERT_EQ(again.disorder, 0); /* the first was 400 */
    kc_finish(&again);
}

TEST(a_commit_while_the_consumer_closes_gets_an_answer)
{
    char topic[64], group[64];
    kc_t k;
    mf_loop_t *loop = kc_case(&k, topic, group, "closing", 1, 20);
    kc_poll_start(&k);
    ASSERT(kc_run_until_unique(&k, 20, 30));
    kc_settle(&k);
    kc_answer_t a = {0}, late = {0};
    mf_task_start(mf_task_kafka_commit_create(k.c, NULL, 0, kc_answer_cb, &a));
    mf_kafka_consumer_close(k.c, kc_closed_cb, &k);
    /* Created after the close: refused. */
    mf_task_start(
        mf_task_kafka_commit_create(k.c, NULL, 0, kc_answer_cb, &late));
    ASSERT(kh_run_until(loop, &k.closed, 30));
    ASSERT(kh_run_until(loop, &a.done, 1));
    ASSERT(a.state == MF_STATE_SUCCESS || a.error == MF_ECLOSED);
    ASSERT(late.done);
    ASSERT_EQ(late.error, MF_ECLOSED);
    kc_free(&k);
    mf_loop_destroy(loop);
}
