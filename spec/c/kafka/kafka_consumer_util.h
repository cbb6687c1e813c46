/*
 * kafka_consumer_util.h — what the consumer's C tests share: a consumer
 * kept polling (one poll task after another) whose records are checked
 * against what kh_produce_plain wrote ("p<partition>-<i>" per partition):
 * how often each was seen, and whether each partition's came in order.
 */
#ifndef MF_TEST_KAFKA_CONSUMER_UTIL_H
#define MF_TEST_KAFKA_CONSUMER_UTIL_H

#include <unistd.h>

#include "kafka_harness.h"

#define KC_MAX_PARTS 8

typedef struct kc {
    mf_loop_t *loop;
    mf_kafka_consumer_t *c;
    int nparts, per_part; /* the values that may come */
    unsigned char *seen;  /* nparts * per_part counts */
    int last[KC_MAX_PARTS];
    int got[KC_MAX_PARTS]; /* records per partition */
    int unique, dups, disorder, foreign;
    size_t max;
    int wait_ms;
    bool keep;    /* start the next poll task after each */
    bool polling; /* a poll task is out */
    int polls, empty_polls;
    int fail_state, fail_error, failures, closed_polls;
    int assigned, revoked, lost;     /* rebalance callbacks */
    int64_t committed[KC_MAX_PARTS]; /* as last sampled (kc_sample) */
    int uncommitted; /* records handed out and not known committed when
                        their partition was revoked */
    bool closed;     /* the closed callback ran */
} kc_t;

static inline void kc_record(kc_t *k, const mf_kafka_record_t *r)
{
    int p, i;
    char v[64];
    size_t n = r->value_len < sizeof v - 1 ? r->value_len : sizeof v - 1;
    memcpy(v, r->value, n);
    v[n] = '\0';
    if (sscanf(v, "p%d-%d", &p, &i) != 2 || p != r->partition || p < 0 ||
        p >= k->nparts || i < 0 || i >= k->per_part) {
        k->foreign++;
        return;
    }
    unsigned char *s = &k->seen[p * k->per_part + i];
    if (*s)
        k->dups++;
    else
        k->unique++;
    if (*s < 255)
        (*s)++;
    if (i <= k->last[p])
        k->disorder++;
    k->last[p] = i;
    k->got[p]++;
}

static void kc_poll_start(kc_t *k);

static void kc_poll_cb(mf_task_t *t)
{
    kc_t *k = t->user;
    k->polling = false;
    k->polls++;
    if (mf_task_error(t) == MF_ECLOSED) {
        k->closed_polls++;
        return;
    }
    if (mf_task_state(t) != MF_STATE_SUCCESS) {
        k->failures++;
        k->fail_state = mf_task_state(t);
        k->fail_error = mf_task_error(t);
        return;
    }
    size_t n;
    const mf_kafka_record_t *r = mf_task_kafka_records(t, &n);
    if (n == 0)
        k->empty_polls++;
    for (size_t i = 0; i < n; i++)
        kc_record(k, &r[i]);
    if (k->keep && !k->closed)
        kc_poll_start(k);
}

static void kc_poll_start(kc_t *k)
{
    mf_task_t *t =
        mf_task_kafka_poll_create(k->c, k->max, k->wait_ms, kc_poll_cb, k);
    k->polling = true;
    mf_task_start(t);
}

static void kc_rebalance(mf_kafka_consumer_t *c, mf_kafka_rebalance_t what,
                         const mf_kafka_tp_t *parts, size_t n, void *user)
{
    (void)c;
    (void)parts;
    (void)n;
    kc_t *k = user;
    for (size_t i = 0; what != MF_KAFKA_ASSIGNED && i < n; i++) {
        int p = parts[i].partition;
        if (p < KC_MAX_PARTS && k->last[p] >= 0)
            k->uncommitted +=
                (int)(k->last[p] + 1 -
                      (k->committed[p] > 0 ? k->committed[p] : 0));
    }
    if (what == MF_KAFKA_ASSIGNED)
        k->assigned++;
    else if (what == MF_KAFKA_REVOKED)
        k->revoked++;
    else
        k->lost++;
}

/* Opens k's consumer of topic in group (extra properties in pairs,
 * NULL-terminated); nparts/per_part: the values kh_produce_plain wrote. */
static inline void kc_open(kc_t *k, mf_loop_t *loop, const char *group,
                           const char *topic, int nparts, int per_part,
                           const char *const *extra)
{
    memset(k, 0, sizeof *k);
    k->loop = loop;
    k->nparts = nparts;
    k->per_part = per_part;
    k->seen = calloc((size_t)(nparts * per_part), 1);
    for (int p = 0; p < KC_MAX_PARTS; p++)
        k->last[p] = k->committed[p] = -1;
    k->max = 500;
    k->wait_ms = 200;
    k->keep = true;
    /* The mock coordinator waits session.timeout.ms - 1 s for members to
     * rejoin after one leaves: keep it short. */
    mf_kafka_prop_t props[16] = {{"bootstrap.servers", kh_bootstrap},
                                 {"group.id", group},
                                 {"session.timeout.ms", "3000"},
                                 {"heartbeat.interval.ms", "300"}};
    size_t n = 4;
    for (; extra && extra[0] && n < 16; extra += 2)
        props[n++] = (mf_kafka_prop_t){extra[0], extra[1]};
    const char *topics[] = {topic};
    mf_kafka_consumer_opts_t o = {props, n, topics, 1, kc_rebalance, k};
    char err[256];
    k->c = mf_kafka_consumer_open(loop, &o, err, sizeof err);
    if (!k->c)
        fprintf(stderr, "consumer: %s\n", err);
    ASSERT(k->c != NULL);
}

static void kc_closed_cb(void *user)
{
    ((kc_t *)user)->closed = true;
}

/* Closes k's consumer and runs the loop until it is closed. */
static inline void kc_close(kc_t *k)
{
    k->keep = false;
    mf_kafka_consumer_close(k->c, kc_closed_cb, k);
    ASSERT(kh_run_until(k->loop, &k->closed, 30));
    k->c = NULL;
}

static inline void kc_free(kc_t *k)
{
    free(k->seen);
    k->seen = NULL;
}

/* Runs the loop until k saw `unique` distinct values, at most max_s. */
static inline bool kc_run_until_unique(kc_t *k, int unique, double max_s)
{
    double end = kh_now() + max_s;
    while (k->unique < unique && kh_now() < end)
        mf_loop_run(k->loop, MF_RUN_ONCE);
    return k->unique >= unique;
}

/* Stops polling: runs the loop until the poll task out is done. */
static inline void kc_settle(kc_t *k)
{
    k->keep = false;
    double end = kh_now() + 10;
    while (k->polling && kh_now() < end)
        mf_loop_run(k->loop, MF_RUN_ONCE);
    ASSERT(!k->polling);
}

/* Writes "p<partition>-<i>" for i in from..from+n-1 to topic/partition. */
static inline void kc_produce(const char *topic, int32_t partition, int from,
                              int n)
{
    rd_kafka_t *rk = kh_plain_producer(NULL);
    char v[64];
    for (int i = from; i < from + n; i++) {
        int vl = snprintf(v, sizeof v, "p%d-%d", (int)partition, i);
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                      RD_KAFKA_V_PARTITION(partition),
                                      RD_KAFKA_V_VALUE(v, (size_t)vl),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_END)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
        ASSERT(e == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    ASSERT(rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

static inline size_t kc_nassigned(kc_t *k)
{
    const mf_kafka_tp_t *parts;
    return k->c ? mf_kafka_consumer_assignment(k->c, &parts) : 0;
}

/* Samples the committed offsets of k's partitions. */
static inline void kc_sample(kc_t *k)
{
    const mf_kafka_tp_t *parts;
    size_t n = k->c ? mf_kafka_consumer_assignment(k->c, &parts) : 0;
    for (size_t i = 0; i < n; i++) {
        mf_kafka_lag_t lag;
        if (parts[i].partition < KC_MAX_PARTS &&
            mf_kafka_consumer_lag(k->c, parts[i].topic, parts[i].partition,
                                  &lag) == 0)
            k->committed[parts[i].partition] = lag.committed;
    }
}

/* A task's answer, for commit tasks and the like. */
typedef struct kc_answer {
    bool done;
    int state, error;
} kc_answer_t;

static inline void kc_answer_cb(mf_task_t *t)
{
    kc_answer_t *a = t->user;
    a->done = true;
    a->state = mf_task_state(t);
    a->error = mf_task_error(t);
}

/* Runs the loop for s seconds. */
static inline void kc_run_for(mf_loop_t *loop, double s)
{
    double end = kh_now() + s;
    while (kh_now() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
}

/* The end of a case: closes k's consumer, frees k, destroys its loop. */
static inline void kc_finish(kc_t *k)
{
    mf_loop_t *loop = k->loop;
    if (k->c)
        kc_close(k);
    kc_free(k);
    mf_loop_destroy(loop);
}

/* A topic name no other case uses. */
static inline const char *kc_name(char *buf, size_t len, const char *what)
{
    static int seq;
    snprintf(buf, len, "%s-%d-%d", what, (int)getpid(), ++seq);
    return buf;
}

/* The start of most cases: a topic of nparts partitions with n records
 * "p0-<i>" in partition 0, a new loop, and k a consumer of the topic in a
 * group of its own. Returns the loop. */
static inline mf_loop_t *kc_case(kc_t *k, char *topic, char *group,
                                 const char *what, int nparts, int n)
{
    kh_setup();
    kc_name(topic, 64, what);
    kh_topic(topic, nparts);
    if (n > 0)
        kc_produce(topic, 0, 0, n);
    mf_loop_t *loop = mf_loop_create();
    kc_open(k, loop, kc_name(group, 64, "g"), topic, nparts, n > 0 ? n : 1,
            NULL);
    return loop;
}

#endif /* MF_TEST_KAFKA_CONSUMER_UTIL_H */
