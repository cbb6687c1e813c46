/*
 * kafka_producer.c — the process's producer handles and the way their
 * reports reach the loops.
 *
 * Owns: the registry of producer handles (one per property list,
 * refcounted, under one mutex: opening and closing are not the hot path),
 * each handle's rd_kafka_t, the loops' Kafka slot (mf__kafka_loop_t) and
 * each loop's report mailbox.
 *
 * How a report travels. librdkafka's main queue is forwarded to its
 * background queue, whose thread calls mf__kafka_background() for every
 * event: delivery reports (a batch of messages), admin results, errors.
 * For each message it fills the outcome the message's opaque points to,
 * and posts the outcome's report to its loop (mf_loop_post: lock-free, no
 * allocation) when that was the last message the report waited for: one
 * post per message produced alone, one per batch task. The task is
 * touched only there, on its loop.
 *
 * Lifetimes. Reports come from a mailbox of the loop (malloc'd, in chunks
 * reused through a free list, so a steady stream of messages allocates
 * nothing). The mailbox is refcounted: one reference for the living loop,
 * one per report out in librdkafka. When the loop is destroyed the mailbox
 * is marked dead under its mutex, which the background thread holds while
 * it posts: a report for a dead loop is dropped, never posted, and the last
 * report to come back frees the mailbox. A task that gives up (cancel,
 * timeout) unhooks itself from its report on its loop; the report is then
 * dropped when it arrives.
 *
 * May call: the engine and librdkafka.
 */
#include "kafka/kafka_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the loop's slot -------------------------------------------------- */

#define MF__REPORTS_PER_CHUNK 64
/* A report keeps a batch's outcome array of up to this many messages for
 * the next batch (steady batches allocate nothing); a bigger one is freed
 * when the report goes back. */
#define MF__OUTCOMES_KEPT 8192

typedef struct mf__kafka_chunk {
    struct mf__kafka_chunk *next;
    mf__kafka_report_t reports[MF__REPORTS_PER_CHUNK];
} mf__kafka_chunk_t;

typedef struct mf__kafka_mailbox {
    pthread_mutex_t lock; /* alive vs. the background thread's posts */
    bool alive;
    mf_loop_t *loop;
    atomic_uint refs; /* the loop's + one per report out in librdkafka */
    mf__kafka_report_t *free; /* loop thread only */
    mf__kafka_chunk_t *chunks;
} mf__kafka_mailbox_t;

static void mf__kafka_mailbox_free(mf__kafka_mailbox_t *box)
{
    while (box->chunks) {
        mf__kafka_chunk_t *c = box->chunks;
        box->chunks = c->next;
        for (size_t i = 0; i < MF__REPORTS_PER_CHUNK; i++) {
            free(c->reports[i].detail); /* of reports dropped for a dead loop */
            mf_free(c->reports[i].outcomes);
        }
        mf_free(c);
    }
    pthread_mutex_destroy(&box->lock);
    mf_free(box);
}

static void mf__kafka_mailbox_unref(mf__kafka_mailbox_t *box)
{
    if (atomic_fetch_sub_explicit(&box->refs, 1, memory_order_acq_rel) == 1)
        mf__kafka_mailbox_free(box);
}

static void mf__kafka_loop_dtor(mf_loop_t *loop, void *ext)
{
    (void)loop;
    mf__kafka_loop_t *kl = ext;
    if (kl->consumers_dtor)
        kl->consumers_dtor(loop, kl->consumers);
    mf__kafka_mailbox_t *box = kl->mailbox;
    if (box) {
        pthread_mutex_lock(&box->lock);
        box->alive = false; /* from now on its reports are dropped */
        pthread_mutex_unlock(&box->lock);
        mf__kafka_mailbox_unref(box);
    }
    mf_free(kl);
}

/* A protocol client's state (loop.h). */
#define MF_KAFKA_LOOP_RANK 24
static mf_loop_key_t mf__kafka_loop_key =
    MF_LOOP_KEY_INIT(MF_KAFKA_LOOP_RANK, mf__kafka_loop_dtor);

mf__kafka_loop_t *mf__kafka_loop(mf_loop_t *loop)
{
    mf__kafka_loop_t *kl = mf_loop_get(loop, &mf__kafka_loop_key);
    if (!kl) {
        kl = mf_xcalloc(1, sizeof *kl);
        mf_loop_set(loop, &mf__kafka_loop_key, kl);
    }
    return kl;
}

static mf__kafka_mailbox_t *mf__kafka_mailbox(mf_loop_t *loop)
{
    mf__kafka_loop_t *kl = mf__kafka_loop(loop);
    if (!kl->mailbox) {
        mf__kafka_mailbox_t *box = mf_xcalloc(1, sizeof *box);
        pthread_mutex_init(&box->lock, NULL);
        box->alive = true;
        box->loop = loop;
        atomic_init(&box->refs, 1);
        kl->mailbox = box;
    }
    return kl->mailbox;
}

/* ---- reports --------------------------------------------------------------
 */

static void mf__kafka_report_grow(mf__kafka_mailbox_t *box)
{
    mf__kafka_chunk_t *c = mf_xcalloc(1, sizeof *c);
    c->next = box->chunks;
    box->chunks = c;
    for (size_t i = 0; i < MF__REPORTS_PER_CHUNK; i++) {
        c->reports[i].next_free = box->free;
        box->free = &c->reports[i];
    }
}

static void mf__kafka_report_put(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    free(r->detail);
    r->detail = NULL;
    if (r->capacity > MF__OUTCOMES_KEPT) {
        mf_free(r->outcomes);
        r->outcomes = NULL;
        r->capacity = 0;
    }
    r->task = NULL;
    r->next_free = box->free;
    box->free = r;
}

/* On the loop: the report's answer, for its task if it still waits. */
static void mf__kafka_report_delivered(mf_post_t *post)
{
    mf__kafka_report_t *r = post->data;
    if (r->task) {
        mf_loop_unref(r->box->loop);
        r->arrived(r);
    }
    mf__kafka_report_put(r);
}

mf__kafka_report_t *mf__kafka_report_take(mf_loop_t *loop, mf_task_t *task,
                                          void (*arrived)(mf__kafka_report_t *))
{
    mf__kafka_mailbox_t *box = mf__kafka_mailbox(loop);
    if (!box->free)
        mf__kafka_report_grow(box);
    mf__kafka_report_t *r = box->free;
    box->free = r->next_free;
    r->next_free = NULL;
    r->box = box;
    r->task = task;
    r->arrived = arrived;
    r->one = (mf__kafka_outcome_t){r, RD_KAFKA_RESP_ERR_NO_ERROR, -1, -1};
    atomic_init(&r->remaining, 1);
    r->detail = NULL;
    atomic_fetch_add_explicit(&box->refs, 1, memory_order_relaxed);
    mf_loop_ref(loop);
    return r;
}

void mf__kafka_report_expect(mf__kafka_report_t *r, size_t n)
{
    if (n > r->capacity) {
        mf_free(r->outcomes);
        r->outcomes = mf_xmalloc(n * sizeof *r->outcomes);
        r->capacity = n;
    }
    for (size_t i = 0; i < n; i++)
        r->outcomes[i] = (mf__kafka_outcome_t){r, 0, -1, -1};
    /* One more than the messages: held until every one was offered. */
    atomic_store_explicit(&r->remaining, n + 1, memory_order_relaxed);
}

bool mf__kafka_report_sent(mf__kafka_report_t *r, size_t refused)
{
    return atomic_fetch_sub_explicit(&r->remaining, refused + 1,
                                     memory_order_acq_rel) == refused + 1;
}

void mf__kafka_report_unused(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    mf_loop_unref(box->loop);
    mf__kafka_report_put(r);
    atomic_fetch_sub_explicit(&box->refs, 1, memory_order_relaxed);
}

bool mf__kafka_report_abandon(mf__kafka_report_t **slot)
{
    mf__kafka_report_t *r = *slot;
    if (!r)
        return false;
    *slot = NULL;
    if (r->task)
        mf_loop_unref(r->box->loop);
    r->task = NULL;
    return true;
}

/* On the background thread: hands r to its loop, or drops it when the loop
 * is gone. */
static void mf__kafka_report_post(mf__kafka_report_t *r)
{
    mf__kafka_mailbox_t *box = r->box;
    pthread_mutex_lock(&box->lock);
    if (box->alive) {
        mf_post_init(&r->post, mf__kafka_report_delivered, r);
        mf_loop_post(box->loop, &r->post);
    }
    pthread_mutex_unlock(&box->lock);
    mf__kafka_mailbox_unref(box);
}

/* ---- the handle ------------------------------------------------------------
 */

struct mf_kafka {
    mf_kafka_t *next; /* the registry */
    unsigned refs;    /* under the registry's lock */
    rd_kafka_t *rk;
    atomic_uint in_flight; /* messages handed to librdkafka, not reported */
    atomic_uint admin_out; /* admin requests awaiting their result */
    size_t nprops;
    mf_kafka_prop_t *props; /* the key: names and values, copied */
};

static pthread_mutex_t mf__kafka_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mf_kafka_t *mf__kafka_registry;

rd_kafka_t *mf__kafka_rk(const mf_kafka_t *k)
{
    return k->rk;
}

void mf__kafka_message_out(mf_kafka_t *k, int delta)
{
    atomic_fetch_add_explicit(&k->in_flight, (unsigned)delta,
                              memory_order_relaxed);
}

void mf__kafka_admin_out(mf_kafka_t *k, int delta)
{
    atomic_fetch_add_explicit(&k->admin_out, (unsigned)delta,
                              memory_order_relaxed);
}

unsigned mf_kafka_in_flight(const mf_kafka_t *k)
{
    return atomic_load_explicit(&((mf_kafka_t *)k)->in_flight,
                                memory_order_relaxed);
}

/* Lets go of the lock of box and of n of its references (reports handed
 * out under it). */
static void mf__kafka_mailbox_release(mf__kafka_mailbox_t *box, unsigned n)
{
    if (!box)
        return;
    pthread_mutex_unlock(&box->lock);
    if (atomic_fetch_sub_explicit(&box->refs, n, memory_order_acq_rel) == n)
        mf__kafka_mailbox_free(box);
}

/* One delivery-report event: a batch of messages, mostly for one loop.
 * Each message fills its outcome; a report whose last message this was
 * goes to its loop. Each mailbox's lock is taken once per run of posted
 * reports, not once per report; r is not touched once posted (its loop may
 * reuse it at once). */
static void mf__kafka_deliveries(mf_kafka_t *k, rd_kafka_event_t *ev)
{
    /* Out of flight before any task can see its outcome. */
    mf__kafka_message_out(k, -(int)rd_kafka_event_message_count(ev));
    mf__kafka_mailbox_t *box = NULL;
    unsigned held = 0;
    const rd_kafka_message_t *m;
    while ((m = rd_kafka_event_message_next(ev)) != NULL) {
        mf__kafka_outcome_t *o = m->_private;
        o->err = m->err;
        o->partition = m->partition;
        o->offset = m->offset;
        mf__kafka_report_t *r = o->report;
        if (atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) !=
            1)
            continue; /* more of its batch to come */
        if (r->box != box) {
            mf__kafka_mailbox_release(box, held);
            box = r->box;
            held = 0;
            pthread_mutex_lock(&box->lock);
        }
        held++;
        if (box->alive) {
            mf_post_init(&r->post, mf__kafka_report_delivered, r);
            mf_loop_post(box->loop, &r->post);
        }
    }
    mf__kafka_mailbox_release(box, held);
}

static void mf__kafka_create_topics_result(mf_kafka_t *k, rd_kafka_event_t *ev)
{
    mf__kafka_report_t *r = rd_kafka_event_opaque(ev);
    const rd_kafka_CreateTopics_result_t *res =
        rd_kafka_event_CreateTopics_result(ev);
    size_t n = 0;
    const rd_kafka_topic_result_t **topics =
        res ? rd_kafka_CreateTopics_result_topics(res, &n) : NULL;
    const char *words = rd_kafka_event_error_string(ev);
    r->one.err = rd_kafka_event_error(ev);
    if (!r->one.err && n > 0) {
        r->one.err = rd_kafka_topic_result_error(topics[0]);
        words = rd_kafka_topic_result_error_string(topics[0]);
    }
    if (r->one.err && words)
        r->detail = strdup(words); /* NULL on OOM: librdkafka's words then */
    mf__kafka_admin_out(k, -1);
    mf__kafka_report_post(r);
}

/* librdkafka's background thread. */
static void mf__kafka_background(rd_kafka_t *rk, rd_kafka_event_t *ev,
                                 void *opaque)
{
    mf_kafka_t *k = opaque;
    switch (rd_kafka_event_type(ev)) {
    case RD_KAFKA_EVENT_DR:
        mf__kafka_deliveries(k, ev);
        break;
    case RD_KAFKA_EVENT_CREATETOPICS_RESULT:
        mf__kafka_create_topics_result(k, ev);
        break;
    case RD_KAFKA_EVENT_ERROR:
        /* Transient errors are librdkafka's to retry (and to log); they
         * reach a message's report only when it gives up. A fatal one (the
         * idempotent producer's) fails every message after it: say so. */
        if (rd_kafka_event_error_is_fatal(ev))
            fprintf(stderr, "moonflow: kafka: %s: fatal: %s\n",
                    rd_kafka_name(rk), rd_kafka_event_error_string(ev));
        break;
    default:
        break;
    }
    rd_kafka_event_destroy(ev);
}

/* ---- open and close
 * ---------------------------------------------------------- */

/* moonflow's producer defaults where the caller gives none. The last one
 * bounds how late a message's timeout is seen: librdkafka fails a queued
 * message past message.timeout.ms only when its broker's thread wakes, and
 * the thread of a broker that is down sleeps its reconnect backoff, which
 * grows up to reconnect.backoff.max.ms (10 s by librdkafka's default: a
 * message failed up to 10 s late). At 500 ms it fails at most about half a
 * second late, for one connection attempt every 500 ms to a broker that is
 * down. It must stay last: it is left out when the caller sets
 * reconnect.backoff.ms, which librdkafka wants no higher than the max. */
static const mf_kafka_prop_t mf__kafka_producer_defaults[] = {
    {"enable.idempotence", "true"},
    {"message.timeout.ms", "30000"},
    {"reconnect.backoff.max.ms", "500"}};

static size_t mf__kafka_producer_ndefaults(const mf_kafka_prop_t *props,
                                           size_t n)
{
    size_t all = MF_ARRAY_SIZE(mf__kafka_producer_defaults);
    return mf__kafka_props_have(props, n, "reconnect.backoff.ms") ? all - 1
                                                                  : all;
}

static bool mf__kafka_same_props(const mf_kafka_t *k,
                                 const mf_kafka_prop_t *props, size_t n)
{
    if (k->nprops != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!props[i].name || !props[i].value ||
            strcmp(k->props[i].name, props[i].name) != 0 ||
            strcmp(k->props[i].value, props[i].value) != 0)
            return false;
    return true;
}

static char *mf__kafka_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mf_xmalloc(n), s, n);
}

static void mf__kafka_handle_free(mf_kafka_t *k)
{
    for (size_t i = 0; i < k->nprops; i++) {
        mf_free((void *)k->props[i].name);
        mf_free((void *)k->props[i].value);
    }
    mf_free(k->props);
    mf_free(k);
}

static rd_kafka_t *mf__kafka_new_rk(mf_kafka_t *k, const mf_kafka_prop_t *props,
                                    size_t n, char *errbuf, size_t errlen)
{
    if (!mf__kafka_props_have(props, n, "bootstrap.servers") &&
        !mf__kafka_props_have(props, n, "metadata.broker.list")) {
        snprintf(errbuf, errlen, "bootstrap.servers: required");
        return NULL;
    }
    rd_kafka_conf_t *conf = mf__kafka_conf_new(
        props, n, mf__kafka_producer_defaults,
        mf__kafka_producer_ndefaults(props, n), errbuf, errlen);
    if (!conf)
        return NULL;
    rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR |
                                       RD_KAFKA_EVENT_CREATETOPICS_RESULT);
    rd_kafka_conf_set_background_event_cb(conf, mf__kafka_background);
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errbuf, errlen);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    /* Without this the background thread never sees delivery reports: they
     * stay on the main queue, which nobody polls. */
    rd_kafka_queue_t *main_q = rd_kafka_queue_get_main(rk);
    rd_kafka_queue_t *bg_q = rd_kafka_queue_get_background(rk);
    rd_kafka_queue_forward(main_q, bg_q);
    rd_kafka_queue_destroy(main_q);
    rd_kafka_queue_destroy(bg_q);
    return rk;
}

static mf_kafka_t *mf__kafka_handle_new(const mf_kafka_prop_t *props, size_t n,
                                        char *errbuf, size_t errlen)
{
    mf_kafka_t *k = mf_xcalloc(1, sizeof *k);
    atomic_init(&k->in_flight, 0);
    atomic_init(&k->admin_out, 0);
    k->props = mf_xcalloc(n ? n : 1, sizeof *k->props);
    for (size_t i = 0; i < n; i++) {
        if (!props[i].name || !props[i].value)
            break; /* mf__kafka_conf_new refuses it below, by name */
        k->props[i].name = mf__kafka_strdup(props[i].name);
        k->props[i].value = mf__kafka_strdup(props[i].value);
        k->nprops = i + 1;
    }
    k->rk = mf__kafka_new_rk(k, props, n, errbuf, errlen);
    if (!k->rk) {
        mf__kafka_handle_free(k);
        return NULL;
    }
    k->refs = 1;
    return k;
}

mf_kafka_t *mf_kafka_open(const mf_kafka_prop_t *props, size_t n, char *errbuf,
                          size_t errlen)
{
    pthread_mutex_lock(&mf__kafka_registry_lock);
    mf_kafka_t *k = mf__kafka_registry;
    while (k && !mf__kafka_same_props(k, props, n))
        k = k->next;
    if (k) {
        k->refs++;
    } else if ((k = mf__kafka_handle_new(props, n, errbuf, errlen)) != NULL) {
        k->next = mf__kafka_registry;
        mf__kafka_registry = k;
    }
    pthread_mutex_unlock(&mf__kafka_registry_lock);
    return k;
}

static void mf__kafka_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded) until the background thread has handed every report out:
 * after rd_kafka_destroy, what is left on its queue is dropped unseen. */
static void mf__kafka_drain_reports(mf_kafka_t *k, int max_ms)
{
    for (int waited = 0; waited < max_ms; waited++) {
        if (atomic_load(&k->in_flight) == 0 && atomic_load(&k->admin_out) == 0)
            return;
        mf__kafka_sleep_ms(1);
    }
    fprintf(stderr,
            "moonflow: kafka: %u messages and %u admin requests still out at "
            "close\n",
            atomic_load(&k->in_flight), atomic_load(&k->admin_out));
}

static void mf__kafka_handle_close(mf_kafka_t *k, int timeout_ms)
{
    if (atomic_load(&k->in_flight) > 0)
        rd_kafka_flush(k->rk, timeout_ms > 0 ? timeout_ms : 0);
    /* What flush left fails with _PURGE_*: MF_ECLOSED on its loop. */
    rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    mf__kafka_drain_reports(k, 5000);
    rd_kafka_destroy(k->rk);
    mf__kafka_handle_free(k);
}

void mf_kafka_close(mf_kafka_t *k, int timeout_ms)
{
    if (!k)
        return;
    pthread_mutex_lock(&mf__kafka_registry_lock);
    bool last = --k->refs == 0;
    if (last) {
        mf_kafka_t **p = &mf__kafka_registry;
        while (*p != k)
            p = &(*p)->next;
        *p = k->next;
    }
    pthread_mutex_unlock(&mf__kafka_registry_lock);
    if (last)
        mf__kafka_handle_close(k, timeout_ms);
}
