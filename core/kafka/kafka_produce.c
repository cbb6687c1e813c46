/*
 * kafka_produce.c — the produce task: one message, copied when the task is
 * created, handed to librdkafka when dispatched, completed on its delivery
 * report.
 *
 * Ownership: the task is one block of loop memory holding the task and
 * its copy of the message (topic, key, value, headers). librdkafka copies
 * the message again at dispatch (RD_KAFKA_MSG_F_COPY): the task may go
 * away before the report. While the report is due, the task waits on a
 * report of its loop's mailbox (kafka_producer.c); a cancel unhooks it.
 *
 * May call: the engine, kafka_producer.c, kafka_conf.c and librdkafka.
 */
#include "kafka/kafka_int.h"

#include <string.h>

/* Every copy of a message starts at this alignment (its header array). */
#define MF__ALIGN 16

typedef struct mf__kafka_produce {
    mf__kafka_task_t head;
    mf_kafka_t *k;
    mf__kafka_report_t *report; /* while the delivery report is due */
    size_t size;                /* of the whole block */
    mf_kafka_message_t msg;     /* pointers into the block */
    int64_t offset;
} mf__kafka_produce_t;

static mf__kafka_produce_t *mf__produce_of(const mf_task_t *t)
{
    return (mf__kafka_produce_t *)(void *)t;
}

/* ---- the copy --------------------------------------------------------- */

/* A NULL topic or header name is copied as "": librdkafka refuses it at
 * dispatch, in the task's completion. */
static const char *mf__str(const char *s)
{
    return s ? s : "";
}

/* Bytes a copy of m takes after its mf_kafka_message_t: its header array
 * first (it needs the block's alignment), then the strings and bytes;
 * rounded up so that the next copy's array is aligned too. */
static size_t mf__message_size(const mf_kafka_message_t *m)
{
    size_t n = strlen(mf__str(m->topic)) + 1;
    n += m->key ? m->key_len : 0;
    n += m->value ? m->value_len : 0;
    n += m->nheaders * sizeof(mf_kafka_header_t);
    for (size_t i = 0; i < m->nheaders; i++)
        n += strlen(mf__str(m->headers[i].name)) + 1 +
             (m->headers[i].value ? m->headers[i].len : 0);
    return (n + MF__ALIGN - 1) & ~(size_t)(MF__ALIGN - 1);
}

static void *mf__put(char **p, const void *src, size_t n)
{
    void *at = *p;
    if (n)
        memcpy(at, src, n);
    *p += n;
    return at;
}

/* Copies m to dst, its data to p (mf__message_size(m) bytes, aligned). */
static void mf__message_copy(char *p, mf_kafka_message_t *dst,
                             const mf_kafka_message_t *m)
{
    mf_kafka_header_t *hs = (mf_kafka_header_t *)(void *)p;
    p += m->nheaders * sizeof *hs;
    *dst = *m;
    dst->headers = m->nheaders ? hs : NULL;
    for (size_t i = 0; i < m->nheaders; i++) {
        const mf_kafka_header_t *h = &m->headers[i];
        hs[i].name =
            mf__put(&p, mf__str(h->name), strlen(mf__str(h->name)) + 1);
        hs[i].value = h->value ? mf__put(&p, h->value, h->len) : NULL;
        hs[i].len = h->value ? h->len : 0;
    }
    dst->topic = mf__put(&p, mf__str(m->topic), strlen(mf__str(m->topic)) + 1);
    dst->key = m->key ? mf__put(&p, m->key, m->key_len) : NULL;
    dst->key_len = m->key ? m->key_len : 0;
    dst->value = m->value ? mf__put(&p, m->value, m->value_len) : NULL;
    dst->value_len = m->value ? m->value_len : 0;
}

/* ---- the kind -------------------------------------------------------------
 */

static void mf__produce_arrived(mf__kafka_report_t *r)
{
    mf__kafka_produce_t *t = mf__produce_of(r->task);
    t->report = NULL;
    t->msg.partition = r->one.partition;
    if (r->one.err) {
        mf__kafka_task_fail(&t->head, r->one.err, NULL);
        return;
    }
    t->offset = r->one.offset;
    mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

static rd_kafka_headers_t *mf__produce_headers(const mf_kafka_message_t *m)
{
    if (!m->nheaders)
        return NULL;
    rd_kafka_headers_t *hs = rd_kafka_headers_new(m->nheaders);
    for (size_t i = 0; i < m->nheaders; i++) {
        const mf_kafka_header_t *h = &m->headers[i];
        rd_kafka_header_add(hs, h->name, -1, h->value,
                            h->value ? (ssize_t)h->len : 0);
    }
    return hs;
}

/* Hands m to librdkafka with o as its opaque; counted in flight (before
 * librdkafka has it: its report may come at once) unless refused. */
static rd_kafka_resp_err_t mf__message_send(mf_kafka_t *k,
                                            const mf_kafka_message_t *m,
                                            mf__kafka_outcome_t *o)
{
    rd_kafka_headers_t *hs = mf__produce_headers(m);
    mf__kafka_message_out(k, 1);
    rd_kafka_resp_err_t err = rd_kafka_producev(
        mf__kafka_rk(k), RD_KAFKA_V_TOPIC(m->topic),
        RD_KAFKA_V_PARTITION(m->partition), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE((void *)m->value, m->value_len),
        RD_KAFKA_V_HEADERS(hs), RD_KAFKA_V_TIMESTAMP(m->timestamp_ms),
        RD_KAFKA_V_OPAQUE(o), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
    if (err) {
        mf__kafka_message_out(k, -1);
        if (hs) /* librdkafka took them only on success */
            rd_kafka_headers_destroy(hs);
    }
    return err;
}

static void mf__produce_dispatch(mf_task_t *task)
{
    mf__kafka_produce_t *t = mf__produce_of(task);
    mf__kafka_report_t *r =
        mf__kafka_report_take(task->_loop, task, mf__produce_arrived);
    rd_kafka_resp_err_t err = mf__message_send(t->k, &t->msg, &r->one);
    if (err) {
        mf__kafka_report_unused(r);
        mf__kafka_task_fail(&t->head, err, NULL); /* queue full: MF_EBUSY */
        return;
    }
    t->report = r;
}

/* The message cannot be recalled: its report is dropped when it comes. */
static void mf__produce_cancel(mf_task_t *task)
{
    mf__kafka_produce_t *t = mf__produce_of(task);
    if (mf__kafka_report_abandon(&t->report))
        mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__produce_destroy(mf_task_t *task)
{
    mf__kafka_produce_t *t = mf__produce_of(task);
    mf__kafka_report_abandon(&t->report);
    mf__kafka_task_release(&t->head);
    mf_loop_free(task->_loop, t, t->size);
}

static const mf_task_ops_t mf__produce_ops = {
    "kafka_produce", mf__produce_dispatch, mf__produce_cancel,
    mf__produce_destroy};

mf_task_t *mf_task_kafka_produce_create(mf_loop_t *loop, mf_kafka_t *k,
                                        const mf_kafka_message_t *msg,
                                        mf_task_cb cb, void *user)
{
    size_t size = sizeof(mf__kafka_produce_t) + mf__message_size(msg);
    mf__kafka_produce_t *t = mf_loop_alloc(loop, size);
    mf_task_init(&t->head.base, &mf__produce_ops, loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->k = k;
    t->report = NULL;
    t->size = size;
    t->offset = -1;
    mf__message_copy((char *)(t + 1), &t->msg, msg);
    return &t->head.base;
}

int32_t mf_task_kafka_partition(const mf_task_t *t)
{
    if (strcmp(mf_task_kind(t), "kafka_produce") != 0)
        return -1;
    return mf__produce_of(t)->msg.partition;
}

int64_t mf_task_kafka_offset(const mf_task_t *t)
{
    if (strcmp(mf_task_kind(t), "kafka_produce") != 0)
        return -1;
    return mf__produce_of(t)->offset;
}

/* ---- the batch task ------------------------------------------------------
 *
 * One block of loop memory: the task, then n outcomes, n message copies
 * and their data. The batch has one report, expecting n messages: the
 * background thread fills their outcomes and posts the report once, after
 * the last; the task copies the outcomes and completes.
 */

typedef struct mf__kafka_batch {
    mf__kafka_task_t head;
    mf_kafka_t *k;
    size_t size; /* of the whole block */
    size_t n;
    mf__kafka_report_t *report; /* while outcomes are due */
    size_t refused;             /* by librdkafka at dispatch */
    mf_kafka_delivery_t *out;
    mf_kafka_message_t *msgs;
} mf__kafka_batch_t;

static mf__kafka_batch_t *mf__batch_of(const mf_task_t *t)
{
    return (mf__kafka_batch_t *)(void *)t;
}

/* The report's outcomes into the task's; completes it. */
static void mf__batch_take(mf__kafka_batch_t *t, const mf__kafka_report_t *r)
{
    for (size_t i = 0; i < t->n; i++) {
        const mf__kafka_outcome_t *o = &r->outcomes[i];
        t->out[i].partition = o->partition;
        t->out[i].offset = o->err ? -1 : o->offset;
        t->out[i].err = (int)o->err;
    }
    mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

static void mf__batch_arrived(mf__kafka_report_t *r)
{
    mf__kafka_batch_t *t = mf__batch_of(r->task);
    t->report = NULL;
    mf__batch_take(t, r);
}

/* Messages of one run through rd_kafka_produce_batch at most: its array
 * lives on the loop thread's stack. */
#define MF__BATCH_RUN 128

/* Message i was refused at once (a full queue, an unknown partition). */
static void mf__batch_refused(mf__kafka_batch_t *t, size_t i,
                              rd_kafka_resp_err_t err)
{
    t->report->outcomes[i].err = err;
    t->report->outcomes[i].partition = t->msgs[i].partition;
    t->refused++;
}

/* Sends message i through rd_kafka_producev. */
static void mf__batch_send_one(mf__kafka_batch_t *t, size_t i)
{
    rd_kafka_resp_err_t err =
        mf__message_send(t->k, &t->msgs[i], &t->report->outcomes[i]);
    if (err)
        mf__batch_refused(t, i, err);
}

/* rd_kafka_produce_batch takes neither headers nor timestamps; and a
 * message with a partition of its own goes through producev too: librdkafka
 * 2.0.2's batch call leaks the copy of a message whose partition it refuses
 * as unknown (seen under LeakSanitizer when the topic's metadata came
 * before the call). */
static bool mf__batch_plain(const mf_kafka_message_t *m)
{
    return !m->nheaders && !m->timestamp_ms &&
           m->partition == MF_KAFKA_PARTITION_ANY;
}

/* The end of the run of plain messages to one topic that starts at i (i
 * itself when message i is not plain). Topics copied from one pointer
 * share their copy (mf__batch_copy), so names are rarely compared. */
static size_t mf__batch_run_end(const mf__kafka_batch_t *t, size_t i)
{
    const char *topic = t->msgs[i].topic;
    size_t j = i;
    while (j < t->n && j - i < MF__BATCH_RUN && mf__batch_plain(&t->msgs[j]) &&
           (t->msgs[j].topic == topic || strcmp(t->msgs[j].topic, topic) == 0))
        j++;
    return j;
}

/* Messages i..j-1 through rd_kafka_produce_batch: one topic lock and one
 * clock read for the run instead of one per message. */
static void mf__batch_send_run(mf__kafka_batch_t *t, rd_kafka_topic_t *rkt,
                               size_t i, size_t j)
{
    rd_kafka_message_t rms[MF__BATCH_RUN];
    size_t n = j - i;
    memset(rms, 0, n * sizeof *rms);
    for (size_t x = 0; x < n; x++) {
        const mf_kafka_message_t *m = &t->msgs[i + x];
        rms[x].partition = RD_KAFKA_PARTITION_UA; /* the partitioner's */
        rms[x].payload = (void *)m->value;
        rms[x].len = m->value_len;
        rms[x].key = (void *)m->key;
        rms[x].key_len = m->key_len;
        rms[x]._private = &t->report->outcomes[i + x];
    }
    /* Counted before librdkafka has them: reports may come at once. */
    mf__kafka_message_out(t->k, (int)n);
    rd_kafka_produce_batch(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, rms,
                           (int)n);
    for (size_t x = 0; x < n; x++) {
        if (rms[x].err) {
            mf__kafka_message_out(t->k, -1);
            mf__batch_refused(t, i + x, rms[x].err);
        }
    }
}

static void mf__batch_dispatch(mf_task_t *task)
{
    mf__kafka_batch_t *t = mf__batch_of(task);
    t->report = mf__kafka_report_take(task->_loop, task, mf__batch_arrived);
    mf__kafka_report_expect(t->report, t->n);
    size_t i = 0;
    while (i < t->n) {
        size_t j = mf__batch_run_end(t, i);
        rd_kafka_topic_t *rkt =
            j > i + 1
                ? rd_kafka_topic_new(mf__kafka_rk(t->k), t->msgs[i].topic, NULL)
                : NULL;
        if (rkt) {
            mf__batch_send_run(t, rkt, i, j);
            rd_kafka_topic_destroy(rkt);
            i = j;
        } else { /* one message, or a name librdkafka refuses: its error */
            mf__batch_send_one(t, i++);
        }
    }
    if (!mf__kafka_report_sent(t->report, t->refused))
        return; /* the report comes through the loop's mailbox */
    /* Every outcome is in already (all refused, or reported meanwhile). */
    mf__kafka_report_t *r = t->report;
    t->report = NULL;
    mf__batch_take(t, r);
    mf__kafka_report_unused(r);
}

static void mf__batch_cancel(mf_task_t *task)
{
    mf__kafka_batch_t *t = mf__batch_of(task);
    if (mf__kafka_report_abandon(&t->report))
        mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__batch_destroy(mf_task_t *task)
{
    mf__kafka_batch_t *t = mf__batch_of(task);
    mf__kafka_report_abandon(&t->report);
    mf__kafka_task_release(&t->head);
    mf_loop_free(task->_loop, t, t->size);
}

static const mf_task_ops_t mf__batch_ops = {
    "kafka_produce_batch", mf__batch_dispatch, mf__batch_cancel,
    mf__batch_destroy};

/* The fixed part of a batch's block: the task and its arrays, rounded up
 * so that the messages' data that follows is aligned. */
static size_t mf__batch_head_size(size_t n)
{
    size_t size = sizeof(mf__kafka_batch_t) + n * sizeof(mf_kafka_delivery_t) +
                  n * sizeof(mf_kafka_message_t);
    return (size + MF__ALIGN - 1) & ~(size_t)(MF__ALIGN - 1);
}

static void mf__batch_copy(mf__kafka_batch_t *t, const mf_kafka_message_t *msgs)
{
    char *p = (char *)(t + 1);
    t->out = (mf_kafka_delivery_t *)(void *)p;
    p += t->n * sizeof *t->out;
    t->msgs = (mf_kafka_message_t *)(void *)p;
    p = (char *)t + mf__batch_head_size(t->n);
    for (size_t i = 0; i < t->n; i++) {
        mf__message_copy(p, &t->msgs[i], &msgs[i]);
        p += mf__message_size(&msgs[i]);
        if (i > 0 && msgs[i].topic == msgs[i - 1].topic)
            t->msgs[i].topic = t->msgs[i - 1].topic;
        t->out[i] = (mf_kafka_delivery_t){msgs[i].partition, -1, 0};
    }
}

mf_task_t *mf_task_kafka_produce_batch_create(mf_loop_t *loop, mf_kafka_t *k,
                                              const mf_kafka_message_t *msgs,
                                              size_t n, mf_task_cb cb,
                                              void *user)
{
    size_t size = mf__batch_head_size(n);
    for (size_t i = 0; i < n; i++)
        size += mf__message_size(&msgs[i]);
    mf__kafka_batch_t *t = mf_loop_alloc(loop, size);
    mf_task_init(&t->head.base, &mf__batch_ops, loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->k = k;
    t->size = size;
    t->n = n;
    t->report = NULL;
    t->refused = 0;
    mf__batch_copy(t, msgs);
    return &t->head.base;
}

const mf_kafka_delivery_t *mf_task_kafka_deliveries(const mf_task_t *t,
                                                    size_t *n)
{
    if (strcmp(mf_task_kind(t), "kafka_produce_batch") != 0) {
        *n = 0;
        return NULL;
    }
    *n = mf__batch_of(t)->n;
    return mf__batch_of(t)->out;
}
