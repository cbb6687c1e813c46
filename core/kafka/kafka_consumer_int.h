/*
 * kafka_consumer_int.h — what kafka_consumer.c (the consumer: its handle,
 * wake fd, rebalances, assignment, close) and kafka_poll.c (the poll and
 * commit tasks) share, and only they.
 *
 * Ownership: kafka_consumer.c owns struct mf_kafka_consumer; kafka_assign.c
 * keeps its assignment and error fields; kafka_poll.c reads it and changes
 * only `poll` and `commits` (the tasks waiting on the consumer). The files
 * form a chain: kafka_assign.c < kafka_poll.c < kafka_consumer.c; the one
 * call up (a rebalance met while serving the queue) goes through the
 * consumer's `rebalance` pointer.
 *
 * Wake-ups. librdkafka writes 8 bytes to the consumer's eventfd when the
 * consumer queue or the side queue (commit results, and everything of the
 * group while closing) goes from empty to non-empty. The loop reads the fd,
 * then serves the side queue, and the consumer queue while a poll task
 * waits, until each is empty (or the poll task is full: the next poll task
 * serves the rest first, since no write comes for a non-empty queue).
 */
#ifndef MF_KAFKA_CONSUMER_INT_H
#define MF_KAFKA_CONSUMER_INT_H

#include "kafka/kafka_int.h"

/* One assigned partition. */
typedef struct mf__kafka_part {
    char *topic; /* owned */
    int32_t partition;
    int64_t committed; /* what the last commit result said; -1: none */
    int64_t to_store;  /* next offset to store (records handed out below
                          it); -1: nothing to store */
    bool paused;       /* by mf_kafka_consumer_pause, until resumed */
    int64_t held_from; /* the first record held back while paused; -1 */
} mf__kafka_part_t;

typedef struct mf__kafka_poll mf__kafka_poll_t;

struct mf_kafka_consumer {
    mf_loop_t *loop;
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue; /* the consumer queue: messages, rebalances */
    rd_kafka_queue_t *side;  /* commit results; the group while closing */
    int efd;
    mf_io_t io;
    mf_list_t link; /* the loop's consumers */
    mf_kafka_rebalance_cb on_rebalance;
    void *user;
    mf__kafka_part_t *parts; /* the assignment */
    size_t nparts, capparts;
    mf_kafka_tp_t *view;    /* parts as mf_kafka_tp_t, for callers */
    mf__kafka_poll_t *poll; /* the poll task waiting, or NULL */
    mf_list_t commits;      /* commit tasks waiting for their result */
    uint64_t commit_seq;
    uint64_t errors;
    char last_error[256];
    int logged[16]; /* distinct error codes already logged */
    unsigned nlogged;
    /* Applies a rebalance librdkafka asks for (err: _ASSIGN_PARTITIONS or
     * _REVOKE_PARTITIONS), then reports it: kafka_consumer.c's, called by
     * kafka_poll.c when the queue it serves carries one. */
    void (*rebalance)(mf_kafka_consumer_t *c, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *parts);
    bool closing;
    bool finished;   /* closed; freed by the closed callback's post */
    bool destroying; /* the loop goes away: no user callbacks */
    mf_timer_t close_timer;
    mf_kafka_closed_cb closed_cb;
    void *closed_user;
    mf_post_t closed_post;
};

/* kafka_assign.c, for kafka_poll.c and kafka_consumer.c */

/* Adds the partitions not assigned yet / removes those listed / forgets
 * every one (the view for callers follows). */
void mf__kafka_parts_add(mf_kafka_consumer_t *c,
                         const rd_kafka_topic_partition_list_t *l);
void mf__kafka_parts_remove(mf_kafka_consumer_t *c,
                            const rd_kafka_topic_partition_list_t *l);
void mf__kafka_parts_clear(mf_kafka_consumer_t *c);
/* Records an offset commit result (updates the committed offsets). */
void mf__kafka_consumer_committed(
    mf_kafka_consumer_t *c, const rd_kafka_topic_partition_list_t *offsets);
/* The assigned partition, or NULL. */
mf__kafka_part_t *mf__kafka_consumer_part(mf_kafka_consumer_t *c,
                                          const char *topic, int32_t partition);
/* rd_kafka_offsets_store of every partition's to_store, then clears them.
 */
void mf__kafka_consumer_store_marks(mf_kafka_consumer_t *c);
/* Counts a transient error; logs it the first time its code is seen. */
void mf__kafka_consumer_error(mf_kafka_consumer_t *c, rd_kafka_resp_err_t err,
                              const char *text);

/* kafka_poll.c, for kafka_consumer.c */

/* Serves the consumer queue into the waiting poll task (if any) and the
 * side queue (commit results). */
void mf__kafka_poll_serve(mf_kafka_consumer_t *c);
/* Marks the records the waiting poll task holds as handed out (before a
 * revocation gives their partitions away). */
void mf__kafka_poll_mark_held(mf_kafka_consumer_t *c);
/* Completes the waiting poll task (and the commit tasks waiting, when
 * commits) with MF_ECLOSED. */
void mf__kafka_poll_fail(mf_kafka_consumer_t *c, bool commits);
/* Serves one event of the side queue (commit result, rebalance while
 * closing), and destroys it. */
void mf__kafka_side_event(mf_kafka_consumer_t *c, rd_kafka_event_t *ev);

#endif /* MF_KAFKA_CONSUMER_INT_H */
