/*
 * kafka_poll.c — the consumer's tasks: the poll task (a batch of records,
 * waiting on the loop for the first one) and the commit task (an
 * asynchronous commit answered on the consumer's side queue); the serving
 * of the consumer's queues into them.
 *
 * Owns the poll and commit tasks; a waiting one is linked from its
 * consumer (c->poll, c->commits) and unlinked here when it completes or is
 * canceled. Records point into the rd_kafka_message_t's the poll task
 * holds (no copy); they are destroyed with the task. Calls kafka_assign.c
 * for the assignment, offsets and errors, the consumer's rebalance pointer
 * for a rebalance on its queue, librdkafka with 0 timeouts.
 */
#include "kafka/kafka_consumer_int.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MF__POLL_MAX 100000

struct mf__kafka_poll {
    mf__kafka_task_t head;
    mf_kafka_consumer_t *c;
    size_t max;
    int wait_ms;
    bool waiting; /* c->poll is this task; the loop is kept alive */
    mf_timer_t timer;
    size_t n;
    rd_kafka_message_t **msgs; /* max of them, then records */
    mf_kafka_record_t *records;
};

typedef struct mf__kafka_commit {
    mf__kafka_task_t head;
    mf_kafka_consumer_t *c;
    mf_list_t link; /* c->commits while waiting */
    bool waiting;
    uint64_t seq; /* the commit's opaque: its result finds the task */
    rd_kafka_topic_partition_list_t *parts; /* NULL: current positions */
} mf__kafka_commit_t;

static size_t mf__poll_arrays_size(size_t max)
{
    return max * (sizeof(rd_kafka_message_t *) + sizeof(mf_kafka_record_t));
}

/* ---- records ------------------------------------------------------------ */

static void mf__record_headers(mf__kafka_poll_t *t, mf_kafka_record_t *r,
                               rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs;
    r->headers = NULL;
    r->nheaders = 0;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    size_t n = rd_kafka_header_cnt(hdrs);
    if (n == 0)
        return;
    mf_kafka_header_t *h = mf_loop_alloc(t->head.base._loop, n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        const void *value;
        size_t len;
        rd_kafka_header_get_all(hdrs, i, &name, &value, &len);
        h[i] = (mf_kafka_header_t){name, value, value ? len : 0};
    }
    r->headers = h;
    r->nheaders = n;
}

static void mf__poll_take(mf__kafka_poll_t *t, rd_kafka_message_t *m)
{
    if (!t->msgs) {
        t->msgs =
            mf_loop_alloc(t->head.base._loop, mf__poll_arrays_size(t->max));
        t->records = (mf_kafka_record_t *)(void *)(t->msgs + t->max);
    }
    mf_kafka_record_t *r = &t->records[t->n];
    t->msgs[t->n++] = m;
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    r->topic = rd_kafka_topic_name(m->rkt);
    r->partition = m->partition;
    r->offset = m->offset;
    r->timestamp_ms = tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : ts;
    r->key = m->key;
    r->key_len = m->key ? m->key_len : 0;
    r->value = m->payload;
    r->value_len = m->payload ? m->len : 0;
    mf__record_headers(t, r, m);
}

/* The records handed out count as done at the next store point. */
static void mf__poll_mark(mf_kafka_consumer_t *c, const mf__kafka_poll_t *t)
{
    mf__kafka_part_t *p = NULL;
    for (size_t i = 0; i < t->n; i++) {
        const mf_kafka_record_t *r = &t->records[i];
        if (!p || p->partition != r->partition || strcmp(p->topic, r->topic))
            p = mf__kafka_consumer_part(c, r->topic, r->partition);
        if (p)
            p->to_store = r->offset + 1;
    }
}

void mf__kafka_poll_mark_held(mf_kafka_consumer_t *c)
{
    if (c->poll)
        mf__poll_mark(c, c->poll);
}

/* ---- the poll task ------------------------------------------------------ */

static void mf__poll_unlink(mf__kafka_poll_t *t)
{
    if (!t->waiting)
        return;
    t->waiting = false;
    mf_timer_stop(t->head.base._loop, &t->timer);
    mf_loop_unref(t->head.base._loop);
    if (t->c->poll == t)
        t->c->poll = NULL;
}

static void mf__poll_done(mf__kafka_poll_t *t)
{
    mf__poll_mark(t->c, t);
    mf__poll_unlink(t);
    mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

static void mf__poll_fail(mf__kafka_poll_t *t, rd_kafka_resp_err_t err,
                          const char *message)
{
    mf__poll_unlink(t);
    mf__kafka_task_fail(&t->head, err, message);
}

/* A message that is not a record: an error of the consumer. */
static void mf__poll_error(mf_kafka_consumer_t *c, rd_kafka_message_t *m)
{
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
        return;
    if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
        char text[256];
        rd_kafka_resp_err_t orig =
            rd_kafka_fatal_error(c->rk, text, sizeof text);
        if (c->poll)
            mf__poll_fail(c->poll, orig, text);
        mf__kafka_consumer_error(c, orig, text);
        return;
    }
    mf__kafka_consumer_error(c, m->err, rd_kafka_message_errstr(m));
}

static void mf__serve_side(mf_kafka_consumer_t *c)
{
    rd_kafka_event_t *ev;
    while (c->side && (ev = rd_kafka_queue_poll(c->side, 0)) != NULL)
        mf__kafka_side_event(c, ev);
}

/* Sets partition p of m back to offset (async) and pauses it again. */
static void mf__poll_pause_again(mf_kafka_consumer_t *c,
                                 const rd_kafka_message_t *m, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(m->rkt),
                                      m->partition)
        ->offset = offset;
    rd_kafka_pause_partitions(c->rk, l);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(c->rk, l, 0);
    if (e)
        rd_kafka_error_destroy(e);
    rd_kafka_topic_partition_list_destroy(l);
}

/* True when m comes from a partition the caller paused: librdkafka 2.0.2
 * drops a pause made while its assignment starts the partition (the pause
 * op is older than the fetch start served before it, hence "outdated"),
 * and the partition flows. Such a record is not handed out: the partition
 * is paused again (now after its start) and set back to the first record
 * held, where a resume continues. */
static bool mf__poll_held_back(mf_kafka_consumer_t *c,
                               const rd_kafka_message_t *m)
{
    mf__kafka_part_t *p =
        mf__kafka_consumer_part(c, rd_kafka_topic_name(m->rkt), m->partition);
    if (!p || !p->paused)
        return false;
    if (p->held_from < 0 || m->offset < p->held_from) {
        p->held_from = m->offset;
        mf__poll_pause_again(c, m, m->offset);
    }
    return true;
}

void mf__kafka_poll_serve(mf_kafka_consumer_t *c)
{
    mf__serve_side(c);
    /* Rebalance callbacks run inside rd_kafka_consumer_poll and may close
     * the consumer or let the task go: look again after each call. */
    while (c->poll && !c->closing && c->poll->n < c->poll->max) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 0);
        if (!m)
            break;
        if (m->err) {
            mf__poll_error(c, m);
            rd_kafka_message_destroy(m);
        } else if (mf__poll_held_back(c, m)) {
            rd_kafka_message_destroy(m);
        } else if (c->poll) {
            mf__poll_take(c->poll, m);
        } else {
            /* The task went while the message came: librdkafka's position
             * moved past it, so it goes back by a seek. */
            rd_kafka_topic_partition_list_t *l =
                rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(m->rkt),
                                              m->partition)
                ->offset = m->offset;
            rd_kafka_error_t *e = rd_kafka_seek_partitions(c->rk, l, 0);
            if (e)
                rd_kafka_error_destroy(e);
            rd_kafka_topic_partition_list_destroy(l);
            rd_kafka_message_destroy(m);
        }
    }
    if (c->poll && c->poll->n > 0)
        mf__poll_done(c->poll);
}

static void mf__poll_timer(mf_timer_t *timer)
{
    mf__kafka_poll_t *t = timer->data;
    mf__poll_done(t); /* nothing came within wait_ms: 0 records */
}

/* A failure of ours, not librdkafka's: no Kafka error text. */
static bool mf__poll_refuse(mf__kafka_poll_t *t)
{
    int error = 0;
    if (t->c->closing)
        error = MF_ECLOSED;
    else if (t->c->poll)
        error = MF_EBUSY; /* one poll task at a time */
    else if (t->max == 0 || t->max > MF__POLL_MAX)
        error = MF_EINVAL;
    if (error)
        mf_task_complete(&t->head.base, MF_STATE_TASK_ERROR, error);
    return error != 0;
}

static void mf__poll_dispatch(mf_task_t *task)
{
    mf__kafka_poll_t *t = (mf__kafka_poll_t *)task;
    mf_kafka_consumer_t *c = t->c;
    if (mf__poll_refuse(t))
        return;
    /* The previous batch is done: its offsets are stored now. */
    mf__kafka_consumer_store_marks(c);
    c->poll = t;
    t->waiting = true;
    mf_loop_ref(task->_loop);
    mf__kafka_poll_serve(c);
    if (!t->waiting)
        return;
    if (t->wait_ms == 0)
        mf__poll_done(t);
    else if (t->wait_ms > 0)
        mf_timer_start(task->_loop, &t->timer, (uint64_t)t->wait_ms);
}

static void mf__poll_cancel(mf_task_t *task)
{
    mf__kafka_poll_t *t = (mf__kafka_poll_t *)task;
    mf__poll_unlink(t);
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__poll_destroy(mf_task_t *task)
{
    mf__kafka_poll_t *t = (mf__kafka_poll_t *)task;
    mf_loop_t *loop = task->_loop;
    for (size_t i = 0; i < t->n; i++) {
        if (t->records[i].nheaders)
            mf_loop_free(loop, (void *)t->records[i].headers,
                         t->records[i].nheaders * sizeof(mf_kafka_header_t));
        rd_kafka_message_destroy(t->msgs[i]);
    }
    if (t->msgs)
        mf_loop_free(loop, t->msgs, mf__poll_arrays_size(t->max));
    mf__kafka_task_release(&t->head);
    mf_loop_free(loop, t, sizeof *t);
}

static const mf_task_ops_t mf__poll_ops = {"kafka_poll", mf__poll_dispatch,
                                           mf__poll_cancel, mf__poll_destroy};

mf_task_t *mf_task_kafka_poll_create(mf_kafka_consumer_t *c, size_t max,
                                     int wait_ms, mf_task_cb cb, void *user)
{
    mf__kafka_poll_t *t = mf_loop_alloc(c->loop, sizeof *t);
    memset(t, 0, sizeof *t);
    mf_task_init(&t->head.base, &mf__poll_ops, c->loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->c = c;
    t->max = max;
    t->wait_ms = wait_ms;
    mf_timer_init(&t->timer, mf__poll_timer, t);
    return &t->head.base;
}

const mf_kafka_record_t *mf_task_kafka_records(const mf_task_t *task, size_t *n)
{
    if (!task || task->_ops != &mf__poll_ops) {
        *n = 0;
        return NULL;
    }
    const mf__kafka_poll_t *t = (const mf__kafka_poll_t *)task;
    *n = t->n;
    return t->records;
}

/* ---- the commit task ---------------------------------------------------- */

static void mf__commit_unlink(mf__kafka_commit_t *t)
{
    if (!t->waiting)
        return;
    t->waiting = false;
    mf_list_remove(&t->link);
    mf_loop_unref(t->head.base._loop);
}

/* The first error of the answer: the whole request's, or a partition's. */
static void mf__commit_answer(mf__kafka_commit_t *t, rd_kafka_resp_err_t err,
                              const rd_kafka_topic_partition_list_t *offs)
{
    mf__commit_unlink(t);
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET) /* nothing to commit */
        err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int i = 0; !err && offs && i < offs->cnt; i++)
        err = offs->elems[i].err;
    if (err)
        mf__kafka_task_fail(&t->head, err, NULL);
    else
        mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

static mf__kafka_commit_t *mf__commit_find(mf_kafka_consumer_t *c, uint64_t seq)
{
    for (mf_list_t *node = c->commits.next; node != &c->commits;
         node = node->next) {
        mf__kafka_commit_t *t = mf_container_of(node, mf__kafka_commit_t, link);
        if (t->seq == seq)
            return t;
    }
    return NULL;
}

static void mf__side_commit(mf_kafka_consumer_t *c, rd_kafka_event_t *ev)
{
    rd_kafka_resp_err_t err = rd_kafka_event_error(ev);
    const rd_kafka_topic_partition_list_t *offs =
        rd_kafka_event_topic_partition_list(ev);
    mf__kafka_consumer_committed(c, offs);
    mf__kafka_commit_t *t =
        mf__commit_find(c, (uint64_t)(uintptr_t)rd_kafka_event_opaque(ev));
    if (t)
        mf__commit_answer(t, err, offs);
    else if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
        mf__kafka_consumer_error(c, err, rd_kafka_event_error_string(ev));
}

void mf__kafka_side_event(mf_kafka_consumer_t *c, rd_kafka_event_t *ev)
{
    switch (rd_kafka_event_type(ev)) {
    case RD_KAFKA_EVENT_OFFSET_COMMIT:
        mf__side_commit(c, ev);
        break;
    case RD_KAFKA_EVENT_REBALANCE: /* while closing */
        c->rebalance(c, rd_kafka_event_error(ev),
                     rd_kafka_event_topic_partition_list(ev));
        break;
    case RD_KAFKA_EVENT_ERROR:
        mf__kafka_consumer_error(c, rd_kafka_event_error(ev),
                                 rd_kafka_event_error_string(ev));
        break;
    default:
        break;
    }
    rd_kafka_event_destroy(ev);
}

static void mf__commit_dispatch(mf_task_t *task)
{
    mf__kafka_commit_t *t = (mf__kafka_commit_t *)task;
    mf_kafka_consumer_t *c = t->c;
    if (c->closing) {
        mf_task_complete(task, MF_STATE_TASK_ERROR, MF_ECLOSED);
        return;
    }
    if (!t->parts) { /* what was handed out so far is done */
        mf__kafka_poll_mark_held(c);
        mf__kafka_consumer_store_marks(c);
    }
    t->seq = ++c->commit_seq;
    rd_kafka_resp_err_t err = rd_kafka_commit_queue(
        c->rk, t->parts, c->side, NULL, (void *)(uintptr_t)t->seq);
    if (err) {
        mf__commit_answer(t, err, NULL);
        return;
    }
    t->waiting = true;
    mf_list_push_back(&c->commits, &t->link);
    mf_loop_ref(task->_loop);
}

static void mf__commit_cancel(mf_task_t *task)
{
    mf__commit_unlink((mf__kafka_commit_t *)task);
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__commit_destroy(mf_task_t *task)
{
    mf__kafka_commit_t *t = (mf__kafka_commit_t *)task;
    if (t->parts)
        rd_kafka_topic_partition_list_destroy(t->parts);
    mf__kafka_task_release(&t->head);
    mf_loop_free(task->_loop, t, sizeof *t);
}

static const mf_task_ops_t mf__commit_ops = {
    "kafka_commit", mf__commit_dispatch, mf__commit_cancel, mf__commit_destroy};

mf_task_t *mf_task_kafka_commit_create(mf_kafka_consumer_t *c,
                                       const mf_kafka_tp_t *parts, size_t n,
                                       mf_task_cb cb, void *user)
{
    mf__kafka_commit_t *t = mf_loop_alloc(c->loop, sizeof *t);
    memset(t, 0, sizeof *t);
    mf_task_init(&t->head.base, &mf__commit_ops, c->loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->c = c;
    mf_list_init(&t->link);
    if (parts && n > 0) {
        t->parts = rd_kafka_topic_partition_list_new((int)n);
        for (size_t i = 0; i < n; i++)
            rd_kafka_topic_partition_list_add(t->parts, parts[i].topic,
                                              parts[i].partition)
                ->offset = parts[i].offset;
    }
    return &t->head.base;
}

/* ---- close -------------------------------------------------------------- */

void mf__kafka_poll_fail(mf_kafka_consumer_t *c, bool commits)
{
    if (c->poll) {
        mf_task_t *task = &c->poll->head.base;
        mf__poll_unlink(c->poll);
        mf_task_complete(task, MF_STATE_TASK_ERROR, MF_ECLOSED);
    }
    while (commits && !mf_list_empty(&c->commits)) {
        mf__kafka_commit_t *t =
            mf_container_of(c->commits.next, mf__kafka_commit_t, link);
        mf__commit_unlink(t);
        mf_task_complete(&t->head.base, MF_STATE_TASK_ERROR, MF_ECLOSED);
    }
}
