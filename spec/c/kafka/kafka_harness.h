/*
 * kafka_harness.h — what the Kafka client's C tests share: librdkafka's
 * mock cluster (a real Kafka protocol implementation in this process, its
 * brokers on loopback ports), started once per test binary at the first
 * kh_setup() and destroyed at exit; fault injection through its API;
 * plain librdkafka clients to write and read a topic independently of the
 * code under test; loop runs bounded in time.
 */
#ifndef MF_TEST_KAFKA_HARNESS_H
#define MF_TEST_KAFKA_HARNESS_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moonflow/kafka.h>
#include <moonflow/moonflow.h>

#include "test.h"

#define KH_BROKERS 3

static rd_kafka_t *kh_mock_rk;           /* the handle the cluster lives in */
static rd_kafka_mock_cluster_t *kh_mock; /* its brokers: ids 1..KH_BROKERS */
static char kh_bootstrap[256];

static inline void kh_teardown(void)
{
    if (kh_mock)
        rd_kafka_mock_cluster_destroy(kh_mock);
    if (kh_mock_rk)
        rd_kafka_destroy(kh_mock_rk);
    kh_mock = NULL;
    kh_mock_rk = NULL;
}

/* Starts the cluster once; returns its bootstrap servers. */
static inline const char *kh_setup(void)
{
    if (kh_mock)
        return kh_bootstrap;
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* The mock cluster's own handle never connects anywhere. */
    rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
    kh_mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ASSERT(kh_mock_rk != NULL);
    kh_mock = rd_kafka_mock_cluster_new(kh_mock_rk, KH_BROKERS);
    ASSERT(kh_mock != NULL);
    snprintf(kh_bootstrap, sizeof kh_bootstrap, "%s",
             rd_kafka_mock_cluster_bootstraps(kh_mock));
    atexit(kh_teardown);
    return kh_bootstrap;
}

static inline void kh_topic(const char *name, int partitions)
{
    ASSERT(rd_kafka_mock_topic_create(kh_mock, name, partitions,
                                      KH_BROKERS) == 0);
}

static inline double kh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs the loop until *done or max_s seconds passed; true if done. */
static inline bool kh_run_until(mf_loop_t *loop, const volatile bool *done,
                         double max_s)
{
    double end = kh_now() + max_s;
    while (!*done && kh_now() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    return *done;
}

/* A plain librdkafka producer on the cluster (extra properties in pairs,
 * NULL-terminated). */
static inline rd_kafka_t *kh_plain_producer(const char *const *extra)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ASSERT(rd_kafka_conf_set(conf, "bootstrap.servers", kh_bootstrap, err,
                             sizeof err) == RD_KAFKA_CONF_OK);
    for (; extra && extra[0]; extra += 2)
        ASSERT(rd_kafka_conf_set(conf, extra[0], extra[1], err, sizeof err) ==
               RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ASSERT(rk != NULL);
    return rk;
}

/* Writes n messages "<prefix>-<i>" (key "k<i>") to topic/partition
 * (RD_KAFKA_PARTITION_UA: the partitioner) and waits for all of them. */
static inline void kh_produce_plain(const char *topic, int32_t partition,
                             const char *prefix, int n)
{
    rd_kafka_t *rk = kh_plain_producer(NULL);
    char v[128], k[32];
    for (int i = 0; i < n; i++) {
        int vl = snprintf(v, sizeof v, "%s-%d", prefix, i);
        int kl = snprintf(k, sizeof k, "k%d", i);
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                    RD_KAFKA_V_KEY(k, (size_t)kl),
                    RD_KAFKA_V_VALUE(v, (size_t)vl),
                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
        ASSERT(e == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    ASSERT(rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

/* Reads topic/partition from the beginning with a plain consumer (no
 * group) until n messages or max_s seconds; calls each(msg, arg) per
 * message; returns how many it read. */
typedef void (*kh_each_fn)(const rd_kafka_message_t *m, void *arg);
static inline int kh_read_plain(const char *topic, int32_t partition, int n,
                         double max_s, kh_each_fn each, void *arg)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ASSERT(rd_kafka_conf_set(conf, "bootstrap.servers", kh_bootstrap, err,
                             sizeof err) == RD_KAFKA_CONF_OK);
    ASSERT(rd_kafka_conf_set(conf, "group.id", "kh-reader", err, sizeof err) ==
           RD_KAFKA_CONF_OK);
    ASSERT(rd_kafka_conf_set(conf, "enable.auto.commit", "false", err,
                             sizeof err) == RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    ASSERT(rk != NULL);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    ASSERT(rd_kafka_assign(rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    int got = 0;
    double end = kh_now() + max_s;
    while (got < n && kh_now() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            got++;
            if (each)
                each(m, arg);
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got;
}

#endif /* MF_TEST_KAFKA_HARNESS_H */
