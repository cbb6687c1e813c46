/*
 * test_kafka_conf.c — properties into librdkafka configurations, and
 * librdkafka's errors into moonflow's; the mock cluster harness itself.
 */
#include "kafka/kafka_int.h"

#include "kafka_harness.h"

static const mf_kafka_prop_t defaults[] = {{"enable.idempotence", "true"},
                                           {"message.timeout.ms", "30000"}};

static void conf_get(rd_kafka_conf_t *conf, const char *name, char *out,
                     size_t len)
{
    size_t n = len;
    ASSERT(rd_kafka_conf_get(conf, name, out, &n) == RD_KAFKA_CONF_OK);
}

TEST(defaults_apply_where_the_caller_gives_none)
{
    mf_kafka_prop_t props[] = {{"bootstrap.servers", "127.0.0.1:1"},
                               {"message.timeout.ms", "1234"}};
    char err[256], v[64];
    rd_kafka_conf_t *conf =
        mf__kafka_conf_new(props, 2, defaults, 2, err, sizeof err);
    ASSERT(conf != NULL);
    conf_get(conf, "message.timeout.ms", v, sizeof v);
    ASSERT_STR_EQ(v, "1234");
    conf_get(conf, "enable.idempotence", v, sizeof v);
    ASSERT_STR_EQ(v, "true");
    rd_kafka_conf_destroy(conf);
}

TEST(an_unknown_property_is_refused_by_name)
{
    mf_kafka_prop_t props[] = {{"bootstrap.servers", "127.0.0.1:1"},
                               {"no.such.property", "1"}};
    char err[256];
    ASSERT(mf__kafka_conf_new(props, 2, NULL, 0, err, sizeof err) == NULL);
    ASSERT(strstr(err, "no.such.property") != NULL);
}

TEST(a_bad_value_is_refused_by_name)
{
    mf_kafka_prop_t props[] = {{"acks", "sometimes"}};
    char err[256];
    ASSERT(mf__kafka_conf_new(props, 1, NULL, 0, err, sizeof err) == NULL);
    ASSERT(strstr(err, "acks") != NULL);
}

TEST(a_missing_value_is_refused_by_name)
{
    mf_kafka_prop_t props[] = {{"linger.ms", NULL}};
    char err[256];
    ASSERT(mf__kafka_conf_new(props, 1, NULL, 0, err, sizeof err) == NULL);
    ASSERT_STR_EQ(err, "linger.ms: a value is required");
}

TEST(errors_map_to_states_and_codes)
{
    int state, error;
    mf__kafka_error_map(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, &state, &error);
    ASSERT(state == MF_STATE_TIMEOUT && error == MF_ETIMEDOUT);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR__QUEUE_FULL, &state, &error);
    ASSERT(state == MF_STATE_TASK_ERROR && error == MF_EBUSY);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, &state,
                        &error);
    ASSERT(error == MF_ENOENT);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, &state, &error);
    ASSERT(error == MF_EMSGSIZE);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS, &state, &error);
    ASSERT(error == MF_EEXIST);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, &state,
                        &error);
    ASSERT(state == MF_STATE_TASK_ERROR && error == MF_EKAFKA);
    mf__kafka_error_map(RD_KAFKA_RESP_ERR_NO_ERROR, &state, &error);
    ASSERT(state == MF_STATE_SUCCESS && error == 0);
}

TEST(error_text_names_the_error)
{
    char out[128];
    mf__kafka_error_text(out, sizeof out, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
                         NULL);
    ASSERT_STR_EQ(out, "_MSG_TIMED_OUT: Local: Message timed out");
    mf__kafka_error_text(out, sizeof out,
                         RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS,
                         "Topic 't' already exists.");
    ASSERT_STR_EQ(out, "TOPIC_ALREADY_EXISTS: Topic 't' already exists.");
}

static void count_ordered(const rd_kafka_message_t *m, void *arg)
{
    int *next = arg;
    char want[32];
    int n = snprintf(want, sizeof want, "h-%d", *next);
    ASSERT(m->len == (size_t)n && memcmp(m->payload, want, m->len) == 0);
    (*next)++;
}

TEST(the_mock_cluster_takes_and_gives_back_messages)
{
    kh_setup();
    kh_topic("harness", 2);
    kh_produce_plain("harness", 1, "h", 50);
    int next = 0;
    ASSERT(kh_read_plain("harness", 1, 50, 30, count_ordered, &next) == 50);
    ASSERT(next == 50);
}
