/*
 * kafka_assign.c — a consumer's own state, below its tasks and its
 * handle: the assignment (each partition's committed offset and the offset
 * to store next, and the view handed to callers), storing offsets, and
 * counting and logging errors.
 *
 * Writes only the assignment and error fields of struct mf_kafka_consumer
 * (kafka_consumer_int.h); kafka_consumer.c owns the struct. Calls
 * librdkafka (offset store, 0 timeouts) and libc; neither kafka_poll.c nor
 * kafka_consumer.c, which both call it.
 */
#include "kafka/kafka_consumer_int.h"

#include <stdio.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

void mf__kafka_consumer_error(mf_kafka_consumer_t *c, rd_kafka_resp_err_t err,
                              const char *text)
{
    c->errors++;
    mf__kafka_error_text(c->last_error, sizeof c->last_error, err, text);
    for (unsigned i = 0; i < c->nlogged; i++)
        if (c->logged[i] == (int)err)
            return;
    if (c->nlogged < sizeof c->logged / sizeof c->logged[0])
        c->logged[c->nlogged++] = (int)err;
    fprintf(stderr, "moonflow: kafka consumer: %s\n", c->last_error);
}

/* ---- the assignment ---------------------------------------------------- */

mf__kafka_part_t *mf__kafka_consumer_part(mf_kafka_consumer_t *c,
                                          const char *topic, int32_t partition)
{
    for (size_t i = 0; i < c->nparts; i++)
        if (c->parts[i].partition == partition &&
            strcmp(c->parts[i].topic, topic) == 0)
            return &c->parts[i];
    return NULL;
}

static void mf__parts_view(mf_kafka_consumer_t *c)
{
    mf_free(c->view);
    c->view = c->nparts ? mf_xmalloc(c->nparts * sizeof *c->view) : NULL;
    for (size_t i = 0; i < c->nparts; i++)
        c->view[i] = (mf_kafka_tp_t){c->parts[i].topic, c->parts[i].partition,
                                     MF_KAFKA_OFFSET_INVALID};
}

void mf__kafka_parts_add(mf_kafka_consumer_t *c,
                         const rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; i < l->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &l->elems[i];
        if (mf__kafka_consumer_part(c, p->topic, p->partition))
            continue;
        if (c->nparts == c->capparts) {
            c->capparts = c->capparts ? 2 * c->capparts : 8;
            c->parts = mf_xrealloc(c->parts, c->capparts * sizeof *c->parts);
        }
        size_t len = strlen(p->topic) + 1;
        char *topic = memcpy(mf_xmalloc(len), p->topic, len);
        c->parts[c->nparts++] =
            (mf__kafka_part_t){topic, p->partition, -1, -1, false, -1};
    }
    mf__parts_view(c);
}

void mf__kafka_parts_remove(mf_kafka_consumer_t *c,
                            const rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; i < l->cnt; i++) {
        mf__kafka_part_t *p = mf__kafka_consumer_part(c, l->elems[i].topic,
                                                      l->elems[i].partition);
        if (!p)
            continue;
        mf_free(p->topic);
        *p = c->parts[--c->nparts];
    }
    mf__parts_view(c);
}

void mf__kafka_parts_clear(mf_kafka_consumer_t *c)
{
    for (size_t i = 0; i < c->nparts; i++)
        mf_free(c->parts[i].topic);
    mf_free(c->parts);
    mf_free(c->view);
    c->parts = NULL;
    c->view = NULL;
    c->nparts = c->capparts = 0;
}

void mf__kafka_consumer_store_marks(mf_kafka_consumer_t *c)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t i = 0; i < c->nparts; i++) {
        mf__kafka_part_t *p = &c->parts[i];
        if (p->to_store < 0)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new((int)c->nparts);
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset =
            p->to_store;
        p->to_store = -1;
    }
    if (!l)
        return;
    /* Fails only for a partition no longer assigned (its records go to
     * the next owner from the last commit) or with
     * enable.auto.offset.store=true (librdkafka stores them itself). */
    rd_kafka_offsets_store(c->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

void mf__kafka_consumer_committed(
    mf_kafka_consumer_t *c, const rd_kafka_topic_partition_list_t *offsets)
{
    for (int i = 0; offsets && i < offsets->cnt; i++) {
        const rd_kafka_topic_partition_t *o = &offsets->elems[i];
        mf__kafka_part_t *p =
            mf__kafka_consumer_part(c, o->topic, o->partition);
        if (p && !o->err && o->offset >= 0)
            p->committed = o->offset;
    }
}
