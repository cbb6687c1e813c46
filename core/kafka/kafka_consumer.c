/*
 * kafka_consumer.c — a consumer in a group, owned by one loop: its
 * rd_kafka_t, the eventfd librdkafka writes to when its queues become
 * non-empty (watched with an mf_io_t), rebalances (eager or cooperative)
 * applied here and reported to the caller, the assignment with each
 * partition's committed offset and the offset to store next, pause, resume,
 * seek, lag, and the close.
 *
 * Owns struct mf_kafka_consumer (kafka_consumer_int.h) and the loop's list
 * of consumers (in the loop's Kafka slot). Calls the engine, librdkafka
 * (0 timeouts only on the loop thread) and kafka_poll.c's serve functions.
 *
 * Close. rd_kafka_consumer_close_queue revokes, commits and leaves the group
 * in librdkafka's threads, forwarding the group's events to the side queue,
 * which the loop serves until rd_kafka_consumer_closed. rd_kafka_destroy
 * then still joins librdkafka's threads, so it runs on a thread of its own;
 * a loop that goes away closes its consumers still open, waiting for them
 * (the loop no longer runs), and for the destroys in flight.
 */
#include "kafka/kafka_consumer_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* While closing, how often the loop looks whether librdkafka is done (the
 * side queue's wake-ups do it too; this bounds a missed one). */
#define MF__CLOSE_CHECK_MS 20
/* A loop that goes away waits at most this for a consumer to close. */
#define MF__CLOSE_WAIT_MS 10000

/* ---- rd_kafka_destroy off the loop ------------------------------------ */

static pthread_mutex_t mf__destroy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mf__destroy_cond = PTHREAD_COND_INITIALIZER;
static unsigned mf__destroys; /* handles being destroyed */

static void *mf__destroy_main(void *arg)
{
    /* Closed already; never a second close whose callbacks would reach a
     * consumer that is gone. */
    rd_kafka_destroy_flags(arg, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    pthread_mutex_lock(&mf__destroy_lock);
    mf__destroys--;
    pthread_cond_broadcast(&mf__destroy_cond);
    pthread_mutex_unlock(&mf__destroy_lock);
    return NULL;
}

/* rd_kafka_destroy joins librdkafka's threads: never on a loop thread. */
static void mf__destroy_later(rd_kafka_t *rk)
{
    pthread_attr_t attr;
    pthread_t th;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&mf__destroy_lock);
    mf__destroys++;
    pthread_mutex_unlock(&mf__destroy_lock);
    int rc = pthread_create(&th, &attr, mf__destroy_main, rk);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        fprintf(stderr,
                "moonflow: kafka: no thread to destroy a consumer (%s): "
                "destroying it on the loop\n",
                strerror(rc));
        mf__destroy_main(rk);
    }
}

/* Waits (bounded) until every handle given to mf__destroy_later is gone. */
static void mf__destroy_wait(int timeout_ms)
{
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += timeout_ms / 1000;
    pthread_mutex_lock(&mf__destroy_lock);
    while (mf__destroys > 0)
        if (pthread_cond_timedwait(&mf__destroy_cond, &mf__destroy_lock,
                                   &end) == ETIMEDOUT)
            break;
    if (mf__destroys > 0)
        fprintf(stderr,
                "moonflow: kafka: %u consumer handle(s) still being "
                "destroyed after %d ms\n",
                mf__destroys, timeout_ms);
    pthread_mutex_unlock(&mf__destroy_lock);
}

/* ---- the loop's consumers ---------------------------------------------- */

static void mf__consumer_finish(mf_kafka_consumer_t *c);
static void mf__consumer_close_start(mf_kafka_consumer_t *c);

static void mf__consumers_dtor(mf_loop_t *loop, void *consumers)
{
    mf_list_t *list = consumers;
    mf_list_t *node;
    while ((node = mf_list_pop_front(list)) != NULL) {
        mf_kafka_consumer_t *c =
            mf_container_of(node, mf_kafka_consumer_t, link);
        mf_list_init(&c->link);
        if (c->finished) { /* its closed callback would have come next */
            mf_loop_unref(loop);
            mf_free(c);
            continue;
        }
        c->destroying = true;
        c->on_rebalance = NULL;
        if (!c->closing)
            mf__consumer_close_start(c);
        /* The loop no longer runs: serve the side queue here, waiting. */
        for (int waited = 0;
             !rd_kafka_consumer_closed(c->rk) && waited < MF__CLOSE_WAIT_MS;
             waited += 50) {
            rd_kafka_event_t *ev = rd_kafka_queue_poll(c->side, 50);
            if (ev)
                mf__kafka_side_event(c, ev);
        }
        mf__consumer_finish(c);
    }
    mf_free(list);
    mf__destroy_wait(30000);
}

static mf_list_t *mf__consumers(mf_loop_t *loop)
{
    mf__kafka_loop_t *kl = mf__kafka_loop(loop);
    if (!kl->consumers) {
        mf_list_t *list = mf_xmalloc(sizeof *list);
        mf_list_init(list);
        kl->consumers = list;
        kl->consumers_dtor = mf__consumers_dtor;
    }
    return kl->consumers;
}

/* Logs an error object of librdkafka's and destroys it. */
static void mf__consumer_error_obj(mf_kafka_consumer_t *c, const char *what,
                                   rd_kafka_error_t *e)
{
    if (!e)
        return;
    char text[256];
    snprintf(text, sizeof text, "%s: %s", what, rd_kafka_error_string(e));
    mf__kafka_consumer_error(c, rd_kafka_error_code(e), text);
    rd_kafka_error_destroy(e);
}

/* ---- rebalances -------------------------------------------------------- */

static void mf__consumer_report(mf_kafka_consumer_t *c,
                                mf_kafka_rebalance_t what,
                                const rd_kafka_topic_partition_list_t *l)
{
    if (!c->on_rebalance || c->destroying)
        return;
    mf_kafka_tp_t *tps = mf_xmalloc(((size_t)l->cnt + 1) * sizeof *tps);
    for (int i = 0; i < l->cnt; i++)
        tps[i] = (mf_kafka_tp_t){l->elems[i].topic, l->elems[i].partition,
                                 l->elems[i].offset};
    c->on_rebalance(c, what, tps, (size_t)l->cnt, c->user);
    mf_free(tps);
}

static bool mf__consumer_cooperative(mf_kafka_consumer_t *c)
{
    const char *proto = rd_kafka_rebalance_protocol(c->rk);
    return proto && strcmp(proto, "COOPERATIVE") == 0;
}

static void mf__kafka_consumer_rebalance(mf_kafka_consumer_t *c,
                                         rd_kafka_resp_err_t err,
                                         rd_kafka_topic_partition_list_t *parts)
{
    bool coop = mf__consumer_cooperative(c);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        if (coop)
            mf__consumer_error_obj(c, "incremental assign",
                                   rd_kafka_incremental_assign(c->rk, parts));
        else
            rd_kafka_assign(c->rk, parts);
        mf__kafka_parts_add(c, parts);
        mf__consumer_report(c, MF_KAFKA_ASSIGNED, parts);
        return;
    }
    if (err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        mf__kafka_consumer_error(c, err, "rebalance");
        rd_kafka_assign(c->rk, NULL);
        return;
    }
    bool lost = rd_kafka_assignment_lost(c->rk);
    /* What the application has had is stored before the partitions go, so
     * the commit of the revocation (auto commit) covers it. */
    mf__kafka_poll_mark_held(c);
    mf__kafka_consumer_store_marks(c);
    if (coop)
        mf__consumer_error_obj(c, "incremental unassign",
                               rd_kafka_incremental_unassign(c->rk, parts));
    else
        rd_kafka_assign(c->rk, NULL);
    mf__kafka_parts_remove(c, parts);
    mf__consumer_report(c, lost ? MF_KAFKA_LOST : MF_KAFKA_REVOKED, parts);
}

static void mf__rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *parts,
                             void *opaque)
{
    (void)rk;
    mf__kafka_consumer_rebalance(opaque, err, parts);
}

static void mf__offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                 rd_kafka_topic_partition_list_t *offsets,
                                 void *opaque)
{
    (void)rk;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
        mf__kafka_consumer_error(opaque, err, "auto commit");
    mf__kafka_consumer_committed(opaque, offsets);
}

/* ---- wake-ups ---------------------------------------------------------- */

static void mf__consumer_check_closed(mf_kafka_consumer_t *c)
{
    if (c->closing && !c->finished && !c->destroying &&
        rd_kafka_consumer_closed(c->rk))
        mf__consumer_finish(c);
}

static void mf__consumer_io(mf_io_t *io, unsigned events)
{
    (void)events;
    mf_kafka_consumer_t *c = io->data;
    if (c->finished)
        return;
    uint64_t v;
    while (read(c->efd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
    mf__kafka_poll_serve(c);
    mf__consumer_check_closed(c);
}

static void mf__consumer_close_timer(mf_timer_t *timer)
{
    mf_kafka_consumer_t *c = timer->data;
    mf__kafka_poll_serve(c);
    if (c->closing && rd_kafka_consumer_closed(c->rk))
        mf__consumer_finish(c);
    else
        mf_timer_start(c->loop, &c->close_timer, MF__CLOSE_CHECK_MS);
}

/* ---- open -------------------------------------------------------------- */

static const mf_kafka_prop_t mf__consumer_defaults[] = {
    {"auto.offset.reset", "earliest"},
    {"enable.partition.eof", "false"},
    /* Offsets are stored by us once the application has had the records
     * (kafka_poll.c), so auto commit never commits what it has not. */
    {"enable.auto.offset.store", "false"},
};

static bool mf__consumer_check_opts(const mf_kafka_consumer_opts_t *o,
                                    char *errbuf, size_t errlen)
{
    if (!o || !mf__kafka_props_have(o->props, o->nprops, "group.id")) {
        snprintf(errbuf, errlen, "group.id: required");
        return false;
    }
    if (!o->topics || o->ntopics == 0) {
        snprintf(errbuf, errlen, "topics: at least one is required");
        return false;
    }
    for (size_t i = 0; i < o->ntopics; i++)
        if (!o->topics[i] || !o->topics[i][0]) {
            snprintf(errbuf, errlen, "topics: an empty topic name");
            return false;
        }
    return true;
}

static rd_kafka_t *mf__consumer_new_rk(mf_kafka_consumer_t *c,
                                       const mf_kafka_consumer_opts_t *o,
                                       char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *conf = mf__kafka_conf_new(
        o->props, o->nprops, mf__consumer_defaults,
        sizeof mf__consumer_defaults / sizeof mf__consumer_defaults[0], errbuf,
        errlen);
    if (!conf)
        return NULL;
    rd_kafka_conf_set_rebalance_cb(conf, mf__rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, mf__offset_commit_cb);
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, errlen);
    if (!rk)
        rd_kafka_conf_destroy(conf);
    return rk;
}

static rd_kafka_resp_err_t
mf__consumer_subscribe(mf_kafka_consumer_t *c,
                       const mf_kafka_consumer_opts_t *o)
{
    rd_kafka_topic_partition_list_t *l =
        rd_kafka_topic_partition_list_new((int)o->ntopics);
    for (size_t i = 0; i < o->ntopics; i++)
        rd_kafka_topic_partition_list_add(l, o->topics[i],
                                          RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

/* The consumer queue and the side queue write to one eventfd. */
static int mf__consumer_wake_fd(mf_kafka_consumer_t *c)
{
    static const uint64_t one = 1; /* an eventfd takes 8-byte writes */
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0)
        return -errno;
    rd_kafka_queue_io_event_enable(c->queue, c->efd, &one, sizeof one);
    rd_kafka_queue_io_event_enable(c->side, c->efd, &one, sizeof one);
    mf_io_init(&c->io, c->efd, mf__consumer_io, c);
    int rc = mf_io_start(c->loop, &c->io, MF_IO_READ);
    if (rc == 0) /* a waiting task keeps the loop alive, not the fd */
        mf_io_set_ref(c->loop, &c->io, false);
    return rc;
}

static void mf__consumer_free_early(mf_kafka_consumer_t *c)
{
    if (c->queue) {
        rd_kafka_queue_io_event_enable(c->queue, -1, NULL, 0);
        rd_kafka_queue_destroy(c->queue);
    }
    if (c->side) {
        rd_kafka_queue_io_event_enable(c->side, -1, NULL, 0);
        rd_kafka_queue_destroy(c->side);
    }
    if (c->efd >= 0)
        close(c->efd);
    if (c->rk)
        mf__destroy_later(c->rk);
    mf_free(c);
}

mf_kafka_consumer_t *mf_kafka_consumer_open(mf_loop_t *loop,
                                            const mf_kafka_consumer_opts_t *o,
                                            char *errbuf, size_t errlen)
{
    if (!mf__consumer_check_opts(o, errbuf, errlen))
        return NULL;
    mf_kafka_consumer_t *c = mf_xcalloc(1, sizeof *c);
    c->loop = loop;
    c->efd = -1;
    c->on_rebalance = o->on_rebalance;
    c->rebalance = mf__kafka_consumer_rebalance;
    c->user = o->user;
    mf_list_init(&c->commits);
    mf_list_init(&c->link);
    mf_timer_init(&c->close_timer, mf__consumer_close_timer, c);
    c->rk = mf__consumer_new_rk(c, o, errbuf, errlen);
    if (!c->rk) {
        mf_free(c);
        return NULL;
    }
    rd_kafka_poll_set_consumer(c->rk);
    c->queue = rd_kafka_queue_get_consumer(c->rk);
    c->side = rd_kafka_queue_new(c->rk);
    int rc = mf__consumer_wake_fd(c);
    if (rc < 0) {
        snprintf(errbuf, errlen, "consumer wake-up fd: %s", mf_strerror(rc));
        mf__consumer_free_early(c);
        return NULL;
    }
    rd_kafka_resp_err_t err = mf__consumer_subscribe(c, o);
    if (err) {
        snprintf(errbuf, errlen, "subscribe: %s", rd_kafka_err2str(err));
        mf_io_stop(loop, &c->io);
        mf__consumer_free_early(c);
        return NULL;
    }
    mf_list_push_back(mf__consumers(loop), &c->link);
    return c;
}

/* ---- close ------------------------------------------------------------- */

static void mf__consumer_closed_post(mf_post_t *post)
{
    mf_kafka_consumer_t *c = post->data;
    mf_loop_t *loop = c->loop;
    mf_list_remove(&c->link);
    if (c->closed_cb)
        c->closed_cb(c->closed_user);
    mf_free(c);
    mf_loop_unref(loop);
}

/* librdkafka is done with the group: release everything of ours. */
static void mf__consumer_finish(mf_kafka_consumer_t *c)
{
    mf_timer_stop(c->loop, &c->close_timer);
    c->finished = true;
    mf__kafka_poll_fail(c, true);
    mf_io_stop(c->loop, &c->io);
    rd_kafka_queue_io_event_enable(c->queue, -1, NULL, 0);
    rd_kafka_queue_io_event_enable(c->side, -1, NULL, 0);
    rd_kafka_queue_destroy(c->queue);
    rd_kafka_queue_destroy(c->side);
    close(c->efd);
    mf__kafka_parts_clear(c);
    if (c->destroying) { /* the loop goes away: no callback, no waiting */
        rd_kafka_destroy_flags(c->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        mf_loop_unref(c->loop);
        mf_free(c);
        return;
    }
    mf__destroy_later(c->rk);
    mf_post_init(&c->closed_post, mf__consumer_closed_post, c);
    mf_loop_defer(c->loop, &c->closed_post);
}

static void mf__consumer_close_start(mf_kafka_consumer_t *c)
{
    c->closing = true;
    mf_loop_ref(c->loop); /* until closed */
    mf__kafka_consumer_store_marks(c);
    rd_kafka_error_t *e = rd_kafka_consumer_close_queue(c->rk, c->side);
    if (e) /* e.g. a fatal error: nothing left to close in the group */
        mf__consumer_error_obj(c, "close", e);
}

void mf_kafka_consumer_close(mf_kafka_consumer_t *c, mf_kafka_closed_cb cb,
                             void *user)
{
    if (!c || c->closing)
        return;
    c->closed_cb = cb;
    c->closed_user = user;
    mf__consumer_close_start(c);
    mf__kafka_poll_fail(c, false);
    mf_timer_start(c->loop, &c->close_timer, MF__CLOSE_CHECK_MS);
}

/* ---- pause, resume, seek, store ---------------------------------------- */

static rd_kafka_topic_partition_list_t *mf__tp_list(const mf_kafka_tp_t *parts,
                                                    size_t n, bool offsets)
{
    rd_kafka_topic_partition_list_t *l =
        rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++) {
        rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_add(
            l, parts[i].topic, parts[i].partition);
        if (offsets)
            p->offset = parts[i].offset;
    }
    return l;
}

static int mf__tp_check(mf_kafka_consumer_t *c, const mf_kafka_tp_t *parts,
                        size_t n, char *errbuf, size_t errlen)
{
    if (c->closing) {
        snprintf(errbuf, errlen, "the consumer is closed");
        return MF_ECLOSED;
    }
    if (!parts || n == 0) {
        snprintf(errbuf, errlen, "parts: at least one is required");
        return MF_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if (!parts[i].topic || parts[i].partition < 0) {
            snprintf(errbuf, errlen,
                     "parts: a topic and a partition >= 0 "
                     "are required");
            return MF_EINVAL;
        }
    return 0;
}

/* The first partition error of l, as MF_EKAFKA with its words. */
static int mf__tp_result(const rd_kafka_topic_partition_list_t *l, char *errbuf,
                         size_t errlen)
{
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].err &&
            l->elems[i].err != RD_KAFKA_RESP_ERR__IN_PROGRESS) { /* seek */
            snprintf(errbuf, errlen, "%s: %s [%d]: %s",
                     rd_kafka_err2name(l->elems[i].err), l->elems[i].topic,
                     (int)l->elems[i].partition,
                     rd_kafka_err2str(l->elems[i].err));
            return MF_EKAFKA;
        }
    return 0;
}

static int mf__consumer_pause_resume(mf_kafka_consumer_t *c,
                                     const mf_kafka_tp_t *parts, size_t n,
                                     bool pause, char *errbuf, size_t errlen)
{
    int rc = mf__tp_check(c, parts, n, errbuf, errlen);
    if (rc)
        return rc;
    rd_kafka_topic_partition_list_t *l = mf__tp_list(parts, n, false);
    rd_kafka_resp_err_t err = pause ? rd_kafka_pause_partitions(c->rk, l)
                                    : rd_kafka_resume_partitions(c->rk, l);
    if (err) {
        mf__kafka_error_text(errbuf, errlen, err, NULL);
        rc = MF_EKAFKA;
    } else {
        rc = mf__tp_result(l, errbuf, errlen);
    }
    rd_kafka_topic_partition_list_destroy(l);
    /* Remembered: librdkafka may lose a pause (kafka_poll.c holds back
     * what a paused partition still yields). */
    for (size_t i = 0; i < n && rc == 0; i++) {
        mf__kafka_part_t *p =
            mf__kafka_consumer_part(c, parts[i].topic, parts[i].partition);
        if (p) {
            p->paused = pause;
            p->held_from = -1;
        }
    }
    return rc;
}

int mf_kafka_consumer_pause(mf_kafka_consumer_t *c, const mf_kafka_tp_t *parts,
                            size_t n, char *errbuf, size_t errlen)
{
    return mf__consumer_pause_resume(c, parts, n, true, errbuf, errlen);
}

int mf_kafka_consumer_resume(mf_kafka_consumer_t *c, const mf_kafka_tp_t *parts,
                             size_t n, char *errbuf, size_t errlen)
{
    return mf__consumer_pause_resume(c, parts, n, false, errbuf, errlen);
}

int mf_kafka_consumer_seek(mf_kafka_consumer_t *c, const mf_kafka_tp_t *parts,
                           size_t n, char *errbuf, size_t errlen)
{
    int rc = mf__tp_check(c, parts, n, errbuf, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int64_t o = parts[i].offset;
        if (o < 0 && o != MF_KAFKA_OFFSET_BEGINNING &&
            o != MF_KAFKA_OFFSET_END && o != MF_KAFKA_OFFSET_STORED) {
            snprintf(errbuf, errlen, "parts: %s [%d]: a bad offset %lld",
                     parts[i].topic, (int)parts[i].partition, (long long)o);
            return MF_EINVAL;
        }
    }
    rd_kafka_topic_partition_list_t *l = mf__tp_list(parts, n, true);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(c->rk, l, 0);
    if (e) {
        mf__kafka_error_text(errbuf, errlen, rd_kafka_error_code(e),
                             rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        rc = MF_EKAFKA;
    } else {
        rc = mf__tp_result(l, errbuf, errlen);
    }
    rd_kafka_topic_partition_list_destroy(l);
    /* What was handed out before the seek is not stored over the replay. */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        mf__kafka_part_t *p =
            mf__kafka_consumer_part(c, parts[i].topic, parts[i].partition);
        if (p)
            p->to_store = -1;
    }
    return rc;
}

int mf_kafka_consumer_store(mf_kafka_consumer_t *c, const mf_kafka_tp_t *parts,
                            size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        mf__kafka_part_t *p =
            mf__kafka_consumer_part(c, parts[i].topic, parts[i].partition);
        if (p && parts[i].offset >= 0)
            p->to_store = parts[i].offset;
        else
            rc = MF_ENOENT;
    }
    return rc;
}

/* ---- assignment, lag, errors ------------------------------------------- */

size_t mf_kafka_consumer_assignment(mf_kafka_consumer_t *c,
                                    const mf_kafka_tp_t **parts)
{
    *parts = c->view;
    return c->nparts;
}

uint64_t mf_kafka_consumer_errors(const mf_kafka_consumer_t *c,
                                  const char **last)
{
    if (last)
        *last = c->errors ? c->last_error : NULL;
    return c->errors;
}

int mf_kafka_consumer_lag(mf_kafka_consumer_t *c, const char *topic,
                          int32_t partition, mf_kafka_lag_t *out)
{
    mf__kafka_part_t *p =
        topic ? mf__kafka_consumer_part(c, topic, partition) : NULL;
    if (!p)
        return MF_ENOENT;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition);
    int64_t pos = -1;
    if (rd_kafka_position(c->rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        l->elems[0].offset >= 0)
        pos = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    int64_t low = -1, high = -1;
    if (rd_kafka_get_watermark_offsets(c->rk, topic, partition, &low, &high) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        high < 0)
        high = -1;
    out->position = pos;
    out->committed = p->committed;
    out->high = high;
    int64_t from = pos >= 0 ? pos : p->committed;
    out->lag = high >= 0 && from >= 0 ? high - from : -1;
    return 0;
}
