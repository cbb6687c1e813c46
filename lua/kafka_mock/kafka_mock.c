/*
 * kafka_mock.c — `moonflow kafka-mock`: librdkafka's mock cluster (a Kafka
 * protocol implementation inside librdkafka, in memory, made for tests) in
 * the foreground, so that the examples and a first script have a Kafka to
 * talk to without installing one. Prints the bootstrap list on one line
 * and runs until SIGTERM or SIGINT, then exits 0.
 *
 * The signals are blocked before librdkafka starts its threads (they
 * inherit the mask) and taken with sigwait here: no handler runs, and the
 * cluster is destroyed on this thread.
 */
#include "kafka_mock_main.h"
#include "kafka_mock_forward.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static const char usage_kafka_mock[] =
    "usage: moonflow kafka-mock [--brokers N] [--port P] "
    "[TOPIC:PARTITIONS...]\n"
    "\n"
    "Runs librdkafka's mock Kafka cluster on 127.0.0.1 until SIGTERM or\n"
    "Ctrl-C (exit status 0): a stand-in for trying clients, not a Kafka\n"
    "server (it keeps messages in memory, and loses them when it stops).\n"
    "Prints the bootstrap list on one line of stdout once it answers.\n"
    "\n"
    "  --brokers N   brokers in the cluster, 1..64 (default 3)\n"
    "  --port P      bootstrap addresses 127.0.0.1:P, P+1, ... (one per\n"
    "                broker, each relayed to it); default: ports the system\n"
    "                picks, new at every start\n"
    "  TOPIC:PARTITIONS   create a topic (others are created at their first\n"
    "                use, with 4 partitions)\n";

typedef struct kmock_args {
    long brokers;
    long port;     /* 0: the brokers' own ports */
    char **topics; /* TOPIC:PARTITIONS arguments */
    int ntopics;
} kmock_args_t;

/* ---- arguments ---------------------------------------------------------- */

static int kmock_parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Prints "moonflow kafka-mock: WHY" on stderr; returns -1. */
static int kmock_refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("moonflow kafka-mock: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    return -1;
}

/* One option and its value. Returns 0 or -1 (printed). */
static int kmock_parse_option(const char *opt, const char *value,
                              kmock_args_t *args)
{
    long *slot = !strcmp(opt, "--brokers") ? &args->brokers
                 : !strcmp(opt, "--port")  ? &args->port
                                           : NULL;
    long max = slot == &args->brokers ? MF_KMOCK_MAX_BROKERS : 65535;
    if (!slot) {
        kmock_refuse("unknown option %s", opt);
        fprintf(stderr, "\n%s", usage_kafka_mock);
        return -1;
    }
    if (!value)
        return kmock_refuse("%s needs a value", opt);
    if (kmock_parse_long(value, 1, max, slot))
        return kmock_refuse(slot == &args->brokers
                                ? "%s takes 1..64, not '%s'"
                                : "%s takes a port, 1..65535, not '%s'",
                            opt, value);
    return 0;
}

/* Reads argv into args. Returns 0, 1 (--help: printed) or -1 (printed). */
static int kmock_parse_args(int argc, char **argv, kmock_args_t *args)
{
    args->topics = argv;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_kafka_mock, stdout);
            return 1;
        }
        if (a[0] != '-') {
            args->topics[args->ntopics++] = argv[i];
            continue;
        }
        if (kmock_parse_option(a, i + 1 < argc ? argv[i + 1] : NULL, args))
            return -1;
        i++;
    }
    if (args->port && args->port + args->brokers - 1 > 65535)
        return kmock_refuse("--port %ld leaves no room for %ld brokers",
                            args->port, args->brokers);
    return 0;
}

/* ---- the cluster -------------------------------------------------------- */

typedef struct kmock {
    rd_kafka_t *rk; /* the handle the cluster lives in; never connects */
    rd_kafka_mock_cluster_t *cluster;
    int brokers;
} kmock_t;

static int kmock_start(kmock_t *m, int brokers)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* The handle has no bootstrap.servers of its own, which librdkafka
     * would warn about: only errors are worth a line. */
    if (rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err)) {
        rd_kafka_conf_destroy(conf);
        return kmock_refuse("%s", err);
    }
    m->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!m->rk)
        return kmock_refuse("%s", err);
    m->cluster = rd_kafka_mock_cluster_new(m->rk, brokers);
    if (!m->cluster) {
        rd_kafka_destroy(m->rk);
        return kmock_refuse("the mock cluster did not start");
    }
    m->brokers = brokers;
    return 0;
}

static void kmock_stop(kmock_t *m)
{
    rd_kafka_mock_cluster_destroy(m->cluster);
    rd_kafka_destroy(m->rk);
}

/* "NAME:PARTITIONS", replicated on every broker. */
static int kmock_create_topic(kmock_t *m, const char *arg)
{
    char name[256];
    const char *colon = strrchr(arg, ':');
    long parts;
    if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof name ||
        kmock_parse_long(colon + 1, 1, 100000, &parts))
        return kmock_refuse("bad topic '%s' (TOPIC:PARTITIONS expected)", arg);
    memcpy(name, arg, (size_t)(colon - arg));
    name[colon - arg] = '\0';
    rd_kafka_resp_err_t err =
        rd_kafka_mock_topic_create(m->cluster, name, (int)parts, m->brokers);
    if (err)
        return kmock_refuse("topic %s: %s", name, rd_kafka_err2str(err));
    return 0;
}

/* ---- the command -------------------------------------------------------- */

static void kmock_print_bootstrap(const kmock_args_t *args, const kmock_t *m)
{
    if (!args->port) {
        printf("%s\n", rd_kafka_mock_cluster_bootstraps(m->cluster));
    } else {
        for (long i = 0; i < args->brokers; i++)
            printf("%s127.0.0.1:%ld", i ? "," : "", args->port + i);
        printf("\n");
    }
    fflush(stdout);
}

/* The cluster, its topics and (--port) its fixed addresses; then waits
 * for SIGTERM or SIGINT. */
static int kmock_serve(const kmock_args_t *args, const sigset_t *stop)
{
    char why[256];
    mf_kmock_forward_t *fwd = NULL;
    kmock_t m = {0};
    if (args->port) {
        fwd = mf_kmock_forward_listen((int)args->port, (int)args->brokers, why,
                                      sizeof why);
        if (!fwd) {
            kmock_refuse("%s", why);
            return 1;
        }
    }
    if (kmock_start(&m, (int)args->brokers)) {
        mf_kmock_forward_stop(fwd);
        return 1;
    }
    int status = 0;
    for (int i = 0; i < args->ntopics && !status; i++)
        status = kmock_create_topic(&m, args->topics[i]) ? 2 : 0;
    if (!status && fwd &&
        mf_kmock_forward_start(fwd, rd_kafka_mock_cluster_bootstraps(m.cluster),
                               why, sizeof why)) {
        kmock_refuse("%s", why);
        status = 1;
    }
    if (!status) {
        kmock_print_bootstrap(args, &m);
        fprintf(stderr,
                "moonflow kafka-mock: librdkafka's mock cluster, %d "
                "broker%s, in memory; SIGTERM or Ctrl-C stops it\n",
                m.brokers, m.brokers == 1 ? "" : "s");
        int sig;
        while (sigwait(stop, &sig) != 0)
            ;
    }
    mf_kmock_forward_stop(fwd);
    kmock_stop(&m);
    return status;
}

int mf_kafka_mock_main(int argc, char **argv)
{
    kmock_args_t args = {.brokers = 3};
    int parsed = kmock_parse_args(argc, argv, &args);
    if (parsed)
        return parsed > 0 ? 0 : 2;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    return kmock_serve(&args, &stop);
}
