/*
 * kafka_prod.h — what the producer's C tests share: opening a producer on
 * the mock cluster, a batch driver that keeps many produce tasks in flight
 * and records where each message landed, and a reader that checks a
 * partition's messages against what was sent.
 */
#ifndef MF_TEST_KAFKA_PROD_H
#define MF_TEST_KAFKA_PROD_H

#include "kafka_harness.h"

static inline void kp_tick(mf_timer_t *timer)
{
    mf_timer_start(timer->data, timer, 100);
}

/* kh_run_until, with a timer that wakes the loop every 100 ms so that the
 * time bound holds even while nothing arrives. */
static inline bool kp_run_until(mf_loop_t *loop, const volatile bool *done,
                                double max_s)
{
    mf_timer_t tick;
    mf_timer_init(&tick, kp_tick, loop);
    mf_timer_start(loop, &tick, 100);
    bool ok = kh_run_until(loop, done, max_s);
    mf_timer_stop(loop, &tick);
    return ok;
}

/* A producer on the cluster with extra properties in pairs (NULL-ended). */
static inline mf_kafka_t *kp_open(const char *const *extra)
{
    mf_kafka_prop_t props[16] = {{"bootstrap.servers", kh_setup()}};
    size_t n = 1;
    for (; extra && extra[0]; extra += 2)
        props[n++] = (mf_kafka_prop_t){extra[0], extra[1]};
    char err[256];
    mf_kafka_t *k = mf_kafka_open(props, n, err, sizeof err);
    if (!k)
        MF_TEST_FAIL("mf_kafka_open: %s", err);
    return k;
}

/* A unique topic name per case. */
static inline const char *kp_topic(const char *base, int partitions)
{
    static char name[96];
    static int seq;
    kh_setup();
    snprintf(name, sizeof name, "%s-%d", base, ++seq);
    if (partitions > 0)
        kh_topic(name, partitions);
    return name;
}

#define KP_VALUE_LEN 100

/* n messages "<id> xxx..." (100 bytes), key "k<id>", sent with up to
 * window tasks in flight; partition: an explicit one, or
 * MF_KAFKA_PARTITION_ANY and then id % nparts when nparts > 0. */
typedef struct kp_batch {
    mf_loop_t *loop;
    mf_kafka_t *k;
    const char *topic;
    int n, window, nparts;
    int sent, done, ok;
    int32_t *partition; /* per id */
    int64_t *offset;    /* per id */
    int first_state, first_error;
    char first_text[256];
    bool finished;
    int mark; /* marked turns true once done reaches mark */
    bool marked;
} kp_batch_t;

static inline size_t kp_value(char *v, int id)
{
    memset(v, 'x', KP_VALUE_LEN);
    int n = snprintf(v, KP_VALUE_LEN, "%08d ", id);
    v[n] = 'x';
    return KP_VALUE_LEN;
}

static void kp_send_next(kp_batch_t *b);

static inline void kp_sent(mf_task_t *t)
{
    kp_batch_t *b = t->user;
    int id = (int)(intptr_t)mf_series_context(mf_series_of(t));
    if (mf_task_state(t) == MF_STATE_SUCCESS) {
        b->ok++;
        b->partition[id] = mf_task_kafka_partition(t);
        b->offset[id] = mf_task_kafka_offset(t);
    } else if (b->done == b->ok) {
        b->first_state = mf_task_state(t);
        b->first_error = mf_task_error(t);
        const char *text = mf_task_kafka_error(t);
        snprintf(b->first_text, sizeof b->first_text, "%s", text ? text : "");
    }
    b->done++;
    b->finished = b->done == b->n;
    b->marked = b->mark > 0 && b->done >= b->mark;
    kp_send_next(b);
}

static void kp_send_next(kp_batch_t *b)
{
    while (b->sent < b->n && b->sent - b->done < b->window) {
        int id = b->sent++;
        char v[KP_VALUE_LEN], key[16];
        int kl = snprintf(key, sizeof key, "k%d", id);
        mf_kafka_message_t m = {.topic = b->topic,
                                .partition = b->nparts > 0
                                                 ? id % b->nparts
                                                 : MF_KAFKA_PARTITION_ANY,
                                .key = key,
                                .key_len = (size_t)kl,
                                .value = v,
                                .value_len = kp_value(v, id)};
        mf_task_t *t =
            mf_task_kafka_produce_create(b->loop, b->k, &m, kp_sent, b);
        mf_series_t *s = mf_series_create(b->loop, NULL);
        mf_series_set_context(s, (void *)(intptr_t)id);
        mf_series_push_back(s, t);
        mf_series_start(s);
    }
}

static inline void kp_batch_init(kp_batch_t *b, mf_loop_t *loop, mf_kafka_t *k,
                                 const char *topic, int n, int window,
                                 int nparts)
{
    memset(b, 0, sizeof *b);
    *b = (kp_batch_t){.loop = loop,
                      .k = k,
                      .topic = topic,
                      .n = n,
                      .window = window,
                      .nparts = nparts};
    b->partition = calloc((size_t)n, sizeof *b->partition);
    b->offset = calloc((size_t)n, sizeof *b->offset);
}

static inline void kp_batch_free(kp_batch_t *b)
{
    free(b->partition);
    free(b->offset);
}

/* Sends the batch and runs the loop until every task completed. */
static inline void kp_batch_run(kp_batch_t *b, double max_s)
{
    kp_send_next(b);
    if (!kp_run_until(b->loop, &b->finished, max_s))
        MF_TEST_FAIL("%d of %d produce tasks done after %.0f s", b->done, b->n,
                     max_s);
}

/* Runs the loop until mark tasks completed (all of them sent by then). */
static inline void kp_batch_run_to(kp_batch_t *b, int mark, double max_s)
{
    b->mark = mark;
    b->marked = b->done >= mark;
    kp_send_next(b);
    if (!kp_run_until(b->loop, &b->marked, max_s))
        MF_TEST_FAIL("%d of %d produce tasks done after %.0f s", b->done, mark,
                     max_s);
}

/* Runs the loop for s seconds. */
static inline void kp_run_for(mf_loop_t *loop, double s)
{
    static const bool never = false;
    kp_run_until(loop, &never, s);
}

/* One produce task and what it ended with. */
typedef struct {
    mf_loop_t *loop;
    bool done;
    int state, error;
    int32_t partition;
    int64_t offset;
    char text[256];
} one_t;

static inline void one_done(mf_task_t *t)
{
    one_t *o = t->user;
    o->state = mf_task_state(t);
    o->error = mf_task_error(t);
    o->partition = mf_task_kafka_partition(t);
    o->offset = mf_task_kafka_offset(t);
    const char *text = mf_task_kafka_error(t);
    snprintf(o->text, sizeof o->text, "%s", text ? text : "");
    o->done = true;
}

static inline void produce_one(mf_loop_t *loop, mf_kafka_t *k,
                               const mf_kafka_message_t *m, one_t *o)
{
    memset(o, 0, sizeof *o);
    mf_task_start(mf_task_kafka_produce_create(loop, k, m, one_done, o));
    ASSERT(kp_run_until(loop, &o->done, 60));
}

/* Reading a partition back: every value's id, in the order read. */
typedef struct kp_read {
    int *ids;
    int n, cap;
    bool bad; /* a value that is not one of ours */
} kp_read_t;

static inline void kp_read_each(const rd_kafka_message_t *m, void *arg)
{
    kp_read_t *r = arg;
    int id = -1;
    if (m->len != KP_VALUE_LEN || sscanf(m->payload, "%8d", &id) != 1)
        r->bad = true;
    if (r->n < r->cap)
        r->ids[r->n++] = id;
}

/* Reads want messages of topic/partition; the ids in order. */
static inline int kp_read_ids(const char *topic, int32_t partition, int want,
                              int *ids)
{
    kp_read_t r = {ids, 0, want, false};
    int got = kh_read_plain(topic, partition, want, 60, kp_read_each, &r);
    ASSERT(!r.bad);
    return got;
}

/* Asserts that ids 0..n-1, sent to partition id % parts, read back from
 * topic in the order sent, n / parts per partition. */
static inline void kp_check_read_back(const char *topic, int n, int parts)
{
    int *ids = malloc(sizeof(int) * (size_t)(n / parts));
    for (int p = 0; p < parts; p++) {
        ASSERT_EQ(kp_read_ids(topic, p, n / parts, ids), n / parts);
        for (int i = 0; i < n / parts; i++)
            ASSERT_EQ(ids[i], i * parts + p);
    }
    free(ids);
}

#endif /* MF_TEST_KAFKA_PROD_H */
