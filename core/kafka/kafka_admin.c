/*
 * kafka_admin.c — the metadata task and the create-topic task.
 *
 * Metadata: rd_kafka_metadata waits for the broker, so it runs on the
 * loop's compute pool (a job embedded in the task); back on the loop the
 * answer is copied into one block of loop memory (mf_kafka_metadata_t,
 * partitions sorted by id) and librdkafka's copy is freed. The job cannot
 * be stopped once out: a canceled task completes when it comes back, and
 * librdkafka's own timeout (the task's timeout_ms) bounds that.
 *
 * Create topic: rd_kafka_CreateTopics answers on the handle's background
 * queue; its result reaches the task through a report of the loop's
 * mailbox, like a delivery report (kafka_producer.c).
 *
 * May call: the engine, kafka_producer.c, kafka_conf.c and librdkafka.
 */
#include "kafka/kafka_int.h"

#include <moonflow/pool.h>

#include <stdlib.h>
#include <string.h>

/* ---- metadata -------------------------------------------------------------
 */

typedef struct mf__kafka_metadata_task {
    mf__kafka_task_t head;
    mf_kafka_t *k;
    mf_pool_job_t job;
    char *topic; /* NULL: every topic */
    size_t topic_size;
    int timeout_ms;
    /* filled on the pool thread, read on the loop after the job is back */
    rd_kafka_resp_err_t err;
    const struct rd_kafka_metadata *rd;
    int32_t controller;
    /* the copy */
    mf_kafka_metadata_t *md;
    size_t md_size;
} mf__kafka_metadata_task_t;

static mf__kafka_metadata_task_t *mf__md_of(const mf_task_t *t)
{
    return (mf__kafka_metadata_task_t *)(void *)t;
}

/* On the pool. */
static void mf__md_fetch(mf_pool_job_t *job)
{
    mf__kafka_metadata_task_t *t =
        mf_container_of(job, mf__kafka_metadata_task_t, job);
    rd_kafka_t *rk = mf__kafka_rk(t->k);
    rd_kafka_topic_t *rkt =
        t->topic ? rd_kafka_topic_new(rk, t->topic, NULL) : NULL;
    if (t->topic && !rkt) {
        t->err = rd_kafka_last_error();
        return;
    }
    t->err = rd_kafka_metadata(rk, rkt ? 0 : 1, rkt, &t->rd, t->timeout_ms);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    /* Cached by the metadata call just made. */
    t->controller = t->err ? -1 : rd_kafka_controllerid(rk, 0);
}

static size_t mf__md_size(const struct rd_kafka_metadata *rd)
{
    size_t n = sizeof(mf_kafka_metadata_t);
    n += (size_t)rd->broker_cnt * sizeof(mf_kafka_broker_info_t);
    n += (size_t)rd->topic_cnt * sizeof(mf_kafka_topic_info_t);
    for (int i = 0; i < rd->topic_cnt; i++) {
        const rd_kafka_metadata_topic_t *tp = &rd->topics[i];
        n += (size_t)tp->partition_cnt * sizeof(mf_kafka_partition_info_t);
        for (int j = 0; j < tp->partition_cnt; j++)
            n += (size_t)(tp->partitions[j].replica_cnt +
                          tp->partitions[j].isr_cnt) *
                 sizeof(int32_t);
    }
    /* Strings last: nothing after them needs alignment. */
    for (int i = 0; i < rd->broker_cnt; i++)
        n += strlen(rd->brokers[i].host) + 1;
    for (int i = 0; i < rd->topic_cnt; i++)
        n += strlen(rd->topics[i].topic) + 1;
    return n;
}

static void *mf__md_take(char **p, size_t n)
{
    void *at = *p;
    *p += n;
    return at;
}

static const char *mf__md_str(char **strs, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mf__md_take(strs, n), s, n);
}

static int mf__md_by_id(const void *a, const void *b)
{
    int32_t x = ((const mf_kafka_partition_info_t *)a)->id;
    int32_t y = ((const mf_kafka_partition_info_t *)b)->id;
    return (x > y) - (x < y);
}

static void mf__md_copy_partitions(mf_kafka_topic_info_t *to,
                                   const rd_kafka_metadata_topic_t *from,
                                   char **p)
{
    size_t n = (size_t)from->partition_cnt;
    mf_kafka_partition_info_t *ps = mf__md_take(p, n * sizeof *ps);
    for (size_t j = 0; j < n; j++) {
        const rd_kafka_metadata_partition_t *rp = &from->partitions[j];
        size_t nr = (size_t)rp->replica_cnt, ni = (size_t)rp->isr_cnt;
        int32_t *rs = mf__md_take(p, nr * sizeof *rs);
        int32_t *is = mf__md_take(p, ni * sizeof *is);
        if (nr)
            memcpy(rs, rp->replicas, nr * sizeof *rs);
        if (ni)
            memcpy(is, rp->isrs, ni * sizeof *is);
        ps[j] = (mf_kafka_partition_info_t){
            rp->id, rp->leader, (int)rp->err, rs, nr, is, ni};
    }
    qsort(ps, n, sizeof *ps, mf__md_by_id);
    to->partitions = ps;
    to->npartitions = n;
}

static void mf__md_copy(mf__kafka_metadata_task_t *t, mf_loop_t *loop)
{
    const struct rd_kafka_metadata *rd = t->rd;
    t->md_size = mf__md_size(rd);
    char *p = mf_loop_alloc(loop, t->md_size);
    mf_kafka_metadata_t *md = mf__md_take(&p, sizeof *md);
    size_t nb = (size_t)rd->broker_cnt, nt = (size_t)rd->topic_cnt;
    mf_kafka_broker_info_t *bs = mf__md_take(&p, nb * sizeof *bs);
    mf_kafka_topic_info_t *ts = mf__md_take(&p, nt * sizeof *ts);
    for (size_t i = 0; i < nt; i++)
        mf__md_copy_partitions(&ts[i], &rd->topics[i], &p);
    for (size_t i = 0; i < nb; i++)
        bs[i] = (mf_kafka_broker_info_t){rd->brokers[i].id,
                                         mf__md_str(&p, rd->brokers[i].host),
                                         rd->brokers[i].port};
    for (size_t i = 0; i < nt; i++) {
        ts[i].name = mf__md_str(&p, rd->topics[i].topic);
        ts[i].err = (int)rd->topics[i].err;
    }
    *md = (mf_kafka_metadata_t){t->controller, bs, nb, ts, nt};
    t->md = md;
}

/* Back on the loop. */
static void mf__md_done(mf_pool_job_t *job)
{
    mf__kafka_metadata_task_t *t =
        mf_container_of(job, mf__kafka_metadata_task_t, job);
    if (t->err) {
        mf__kafka_task_fail(&t->head, t->err, NULL);
        return;
    }
    mf__md_copy(t, t->head.base._loop);
    rd_kafka_metadata_destroy(t->rd);
    t->rd = NULL;
    mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

static void mf__md_dispatch(mf_task_t *task)
{
    mf__kafka_metadata_task_t *t = mf__md_of(task);
    mf_pool_t *pool = mf_loop_pool(task->_loop);
    if (!pool) {
        mf_task_complete(task, MF_STATE_SYS_ERROR, MF_ENOPOOL);
        return;
    }
    t->job.fn = mf__md_fetch;
    t->job.done = mf__md_done;
    mf_pool_submit(pool, task->_loop, &t->job);
}

static void mf__md_destroy(mf_task_t *task)
{
    mf__kafka_metadata_task_t *t = mf__md_of(task);
    if (t->md)
        mf_loop_free(task->_loop, t->md, t->md_size);
    if (t->topic)
        mf_loop_free(task->_loop, t->topic, t->topic_size);
    mf__kafka_task_release(&t->head);
    mf_loop_free(task->_loop, t, sizeof *t);
}

/* No cancel hook: the job on the pool runs to its end (bounded by
 * timeout_ms) and its late completion frees the task. */
static const mf_task_ops_t mf__md_ops = {"kafka_metadata", mf__md_dispatch,
                                         NULL, mf__md_destroy};

mf_task_t *mf_task_kafka_metadata_create(mf_loop_t *loop, mf_kafka_t *k,
                                         const char *topic, int timeout_ms,
                                         mf_task_cb cb, void *user)
{
    mf__kafka_metadata_task_t *t = mf_loop_alloc(loop, sizeof *t);
    memset(t, 0, sizeof *t);
    mf_task_init(&t->head.base, &mf__md_ops, loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->k = k;
    t->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    if (topic) {
        t->topic_size = strlen(topic) + 1;
        t->topic =
            memcpy(mf_loop_alloc(loop, t->topic_size), topic, t->topic_size);
    }
    return &t->head.base;
}

const mf_kafka_metadata_t *mf_task_kafka_metadata(const mf_task_t *t)
{
    if (strcmp(mf_task_kind(t), "kafka_metadata") != 0)
        return NULL;
    return mf__md_of(t)->md;
}

/* ---- create topic
 * ------------------------------------------------------------ */

typedef struct mf__kafka_create_topic {
    mf__kafka_task_t head;
    mf_kafka_t *k;
    mf__kafka_report_t *report;
    int partitions;
    int replication;
    int timeout_ms;
    size_t name_size;
    char name[]; /* the topic */
} mf__kafka_create_topic_t;

static mf__kafka_create_topic_t *mf__ct_of(const mf_task_t *t)
{
    return (mf__kafka_create_topic_t *)(void *)t;
}

static size_t mf__ct_size(const mf__kafka_create_topic_t *t)
{
    return sizeof *t + t->name_size;
}

static void mf__ct_arrived(mf__kafka_report_t *r)
{
    mf__kafka_create_topic_t *t = mf__ct_of(r->task);
    t->report = NULL;
    if (r->one.err)
        mf__kafka_task_fail(&t->head, r->one.err, r->detail);
    else
        mf_task_complete(&t->head.base, MF_STATE_SUCCESS, 0);
}

/* Hands the request to librdkafka; its answer comes as a report. */
static void mf__ct_request(mf__kafka_create_topic_t *t, rd_kafka_NewTopic_t *nt,
                           mf__kafka_report_t *r)
{
    rd_kafka_t *rk = mf__kafka_rk(t->k);
    rd_kafka_AdminOptions_t *o =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_opaque(o, r);
    /* Without it librdkafka waits socket.timeout.ms (60 s by default), for
     * a controller too; refused only out of range (kept in range). */
    char err[128];
    rd_kafka_AdminOptions_set_request_timeout(o, t->timeout_ms, err,
                                              sizeof err);
    rd_kafka_queue_t *bg = rd_kafka_queue_get_background(rk);
    mf__kafka_admin_out(t->k, 1);
    rd_kafka_CreateTopics(rk, &nt, 1, o, bg);
    rd_kafka_queue_destroy(bg);
    rd_kafka_AdminOptions_destroy(o);
}

static void mf__ct_dispatch(mf_task_t *task)
{
    mf__kafka_create_topic_t *t = mf__ct_of(task);
    char err[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(
        t->name, t->partitions, t->replication, err, sizeof err);
    if (!nt) {
        mf__kafka_task_fail(&t->head, RD_KAFKA_RESP_ERR__INVALID_ARG, err);
        return;
    }
    t->report = mf__kafka_report_take(task->_loop, task, mf__ct_arrived);
    mf__ct_request(t, nt, t->report);
    rd_kafka_NewTopic_destroy(nt);
}

static void mf__ct_cancel(mf_task_t *task)
{
    mf__kafka_create_topic_t *t = mf__ct_of(task);
    if (mf__kafka_report_abandon(&t->report))
        mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__ct_destroy(mf_task_t *task)
{
    mf__kafka_create_topic_t *t = mf__ct_of(task);
    mf__kafka_report_abandon(&t->report);
    mf__kafka_task_release(&t->head);
    mf_loop_free(task->_loop, t, mf__ct_size(t));
}

static const mf_task_ops_t mf__ct_ops = {"kafka_create_topic", mf__ct_dispatch,
                                         mf__ct_cancel, mf__ct_destroy};

mf_task_t *mf_task_kafka_create_topic_create(mf_loop_t *loop, mf_kafka_t *k,
                                             const char *topic, int partitions,
                                             int replication, int timeout_ms,
                                             mf_task_cb cb, void *user)
{
    size_t name_size = strlen(topic ? topic : "") + 1;
    mf__kafka_create_topic_t *t = mf_loop_alloc(loop, sizeof *t + name_size);
    mf_task_init(&t->head.base, &mf__ct_ops, loop, cb, user);
    mf__kafka_task_init(&t->head);
    t->k = k;
    t->report = NULL;
    t->partitions = partitions;
    t->replication = replication;
    /* librdkafka takes up to an hour. */
    t->timeout_ms = timeout_ms <= 0 ? 10000 : timeout_ms;
    if (t->timeout_ms > 3600000)
        t->timeout_ms = 3600000;
    t->name_size = name_size;
    memcpy(t->name, topic ? topic : "", name_size);
    return &t->head.base;
}
