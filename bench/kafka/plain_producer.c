/*
 * bench/kafka/plain_producer.c — the plain librdkafka producer the Kafka
 * produce benchmark (bench/kafka/compare_kafka.py) measures moonflow
 * against: rd_kafka_producev in a loop, a delivery-report callback that
 * counts, rd_kafka_poll between messages, a flush at the end. What any C
 * program using librdkafka directly would write; it shares nothing with
 * moonflow.
 *
 *   bench_kafka_plain BOOTSTRAP TOPIC MESSAGES [VALUE_BYTES [PROP=VALUE...]]
 *   bench_kafka_plain --count BOOTSTRAP TOPIC
 *
 * Produces MESSAGES values of VALUE_BYTES (default 100) bytes to TOPIC with
 * the partitioner (no key), acks=all, enable.idempotence=true, then the
 * extra properties. Prints
 *   bench-summary messages=N seconds=S cpu_s=S errors=N
 * (seconds: the first producev to the end of the flush; cpu_s: the
 * process's utime + stime over that window) and exits 1 if any message
 * failed. --count prints "count N": the sum of the topic's partitions' high
 * watermarks (messages ever written), asked from the brokers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

typedef struct counts {
    long delivered;
    long failed;
    char first_error[256];
} counts_t;

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m,
                        void *opaque)
{
    (void)rk;
    counts_t *c = opaque;
    if (!m->err) {
        c->delivered++;
        return;
    }
    if (c->failed++ == 0)
        snprintf(c->first_error, sizeof c->first_error, "%s",
                 rd_kafka_err2str(m->err));
}

static int set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char err[256];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) ==
        RD_KAFKA_CONF_OK)
        return 0;
    fprintf(stderr, "bench_kafka_plain: %s\n", err);
    return -1;
}

static rd_kafka_t *open_producer(const char *bootstrap, char **props, int n,
                                 counts_t *counts)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int bad = set(conf, "bootstrap.servers", bootstrap) ||
              set(conf, "acks", "all") ||
              set(conf, "enable.idempotence", "true");
    for (int i = 0; i < n && !bad; i++) {
        char *eq = strchr(props[i], '=');
        if (!eq) {
            fprintf(stderr, "bench_kafka_plain: %s is not PROP=VALUE\n",
                    props[i]);
            bad = 1;
            break;
        }
        *eq = '\0';
        bad = set(conf, props[i], eq + 1);
    }
    if (bad) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, counts);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        fprintf(stderr, "bench_kafka_plain: %s\n", err);
    return rk;
}

static int produce_all(rd_kafka_t *rk, const char *topic, long messages,
                       char *value, size_t len)
{
    for (long i = 0; i < messages; i++) {
        rd_kafka_resp_err_t err;
        while ((err = rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(value, len),
                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 1); /* the queue drains as reports come in */
        if (err) {
            fprintf(stderr, "bench_kafka_plain: produce: %s\n",
                    rd_kafka_err2str(err));
            return -1;
        }
        rd_kafka_poll(rk, 0);
    }
    return 0;
}

static int produce_main(int argc, char **argv)
{
    long messages = atol(argv[3]);
    long value_bytes = argc > 4 ? atol(argv[4]) : 100;
    if (messages < 1 || value_bytes < 0 || value_bytes > 1000000) {
        fprintf(stderr, "bench_kafka_plain: bad MESSAGES or VALUE_BYTES\n");
        return 2;
    }
    counts_t counts = {0};
    rd_kafka_t *rk =
        open_producer(argv[1], argv + 5, argc > 5 ? argc - 5 : 0, &counts);
    if (!rk)
        return 2;
    char *value = malloc((size_t)value_bytes + 1);
    if (!value) {
        rd_kafka_destroy(rk);
        return 2;
    }
    for (long i = 0; i < value_bytes; i++)
        value[i] = "0123456789abcdef"[i % 16];
    double t0 = wall_s(), c0 = cpu_s();
    int bad = produce_all(rk, argv[2], messages, value, (size_t)value_bytes);
    rd_kafka_resp_err_t flushed = rd_kafka_flush(rk, 60000);
    double t1 = wall_s(), c1 = cpu_s();
    printf("bench-summary messages=%ld seconds=%.6f cpu_s=%.6f errors=%ld\n",
           counts.delivered, t1 - t0, c1 - c0, counts.failed);
    if (counts.failed)
        fprintf(stderr, "bench_kafka_plain: %ld failed (first: %s)\n",
                counts.failed, counts.first_error);
    if (flushed)
        fprintf(stderr, "bench_kafka_plain: flush: %s\n",
                rd_kafka_err2str(flushed));
    free(value);
    rd_kafka_destroy(rk);
    return bad || flushed || counts.failed || counts.delivered != messages;
}

/* The sum of the topic's high watermarks: every message it ever took. */
static int count_main(const char *bootstrap, const char *topic)
{
    counts_t unused = {0};
    rd_kafka_t *rk = open_producer(bootstrap, NULL, 0, &unused);
    if (!rk)
        return 2;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
    long long total = 0;
    if (!err && (md->topic_cnt != 1 || md->topics[0].err))
        err = md->topic_cnt ? md->topics[0].err
                            : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    for (int p = 0; !err && p < md->topics[0].partition_cnt; p++) {
        int64_t lo, hi;
        err = rd_kafka_query_watermark_offsets(
            rk, topic, md->topics[0].partitions[p].id, &lo, &hi, 10000);
        total += hi;
    }
    if (err)
        fprintf(stderr, "bench_kafka_plain: count %s: %s\n", topic,
                rd_kafka_err2str(err));
    else
        printf("count %lld\n", total);
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return err ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--count") == 0)
        return count_main(argv[2], argv[3]);
    if (argc < 4) {
        fprintf(stderr, "usage: bench_kafka_plain BOOTSTRAP TOPIC MESSAGES "
                        "[VALUE_BYTES [PROP=VALUE...]]\n"
                        "       bench_kafka_plain --count BOOTSTRAP TOPIC\n");
        return 2;
    }
    return produce_main(argc, argv);
}
