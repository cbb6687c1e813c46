/*
 * kafka_int.h — what the files of core/kafka share, and only they:
 *   kafka_conf.c      properties → rd_kafka_conf_t (moonflow's defaults
 *                     where the caller gives none), librdkafka's errors →
 *                     (state, MF_E*) and the task error text
 *   kafka_producer.c  the process registry of producer handles (one per
 *                     property list, refcounted), the background-queue
 *                     event callback that posts delivery reports and admin
 *                     results to the loop that waits for them
 *   kafka_produce.c   the produce task
 *   kafka_admin.c     the metadata task (on the compute pool) and the
 *                     create-topic task (admin API, answered on the
 *                     background queue)
 *   kafka_consumer.c  a consumer: its rd_kafka_t, the consumer queue's io
 *                     event fd watched by the loop, rebalances, pause,
 *                     resume, seek, lag, close
 *   kafka_poll.c      the poll task (batches of records) and the commit task
 *
 * Threads. librdkafka runs its own threads; moonflow objects are touched on
 * their loop only. A producer handle is shared by every loop: what its
 * background thread learns (a delivery report, an admin result) reaches a
 * task through mf_loop_post to the task's loop, never by touching the task
 * from that thread. A consumer is one loop's: librdkafka writes to its
 * eventfd when its queue becomes non-empty, and the loop drains the queue
 * without waiting (timeouts of 0 only).
 */
#ifndef MF_KAFKA_INT_H
#define MF_KAFKA_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <librdkafka/rdkafka.h>

#include <moonflow/kafka.h>

/* A new rd_kafka_conf_t holding props (in order) and, for every default
 * whose name props does not set, the default. NULL with librdkafka's message
 * (which names the property) in errbuf for an unknown property or a bad
 * value; "<name>: a value is required" for a NULL value. */
rd_kafka_conf_t *mf__kafka_conf_new(const mf_kafka_prop_t *props, size_t n,
                                    const mf_kafka_prop_t *defaults,
                                    size_t ndefaults, char *errbuf,
                                    size_t errlen);

/* True when props sets name. */
bool mf__kafka_props_have(const mf_kafka_prop_t *props, size_t n,
                          const char *name);

/* librdkafka's error code → the task's (state, MF_E*) as moonflow/kafka.h
 * lists them. */
void mf__kafka_error_map(rd_kafka_resp_err_t err, int *state, int *error);

/* "<NAME>: <message>" for the task's error text: librdkafka's symbolic name
 * (rd_kafka_err2name) and its words, or message when not NULL (a broker's
 * detail). Writes at most len bytes, NUL-terminated. */
void mf__kafka_error_text(char *out, size_t len, rd_kafka_resp_err_t err,
                          const char *message);

/* ---- what every Kafka task shares -------------------------------------- */

/* The head every Kafka task kind embeds first (produce, metadata,
 * create-topic, poll, commit), so that mf_task_kafka_error() and
 * mf_task_kafka_error_code() read any of them. Kinds name their ops
 * "kafka_..." (the accessors check it). */
typedef struct mf__kafka_task {
    mf_task_t base;
    int err;       /* rd_kafka_resp_err_t; 0 after success */
    char *errtext; /* "<NAME>: <message>" in loop memory; NULL: none */
    size_t errsize;
} mf__kafka_task_t;

/* Zeroes the head's error (call after mf_task_init). */
void mf__kafka_task_init(mf__kafka_task_t *t);
/* Records err and its text (mf__kafka_error_text, message as there) and
 * completes the task with mf__kafka_error_map's (state, error). */
void mf__kafka_task_fail(mf__kafka_task_t *t, rd_kafka_resp_err_t err,
                         const char *message);
/* Releases the error text (call from the kind's destroy). */
void mf__kafka_task_release(mf__kafka_task_t *t);

/* ---- the loop's Kafka slot ------------------------------------------------
 */

/* The loop's Kafka key holds one of these for both sides (a loop may produce
 * and consume): mf__kafka_loop() creates it on first use. When the loop is
 * destroyed, consumers_dtor (set by kafka_consumer.c) runs first, then the
 * producer side lets go of the loop's report mailbox (kafka_producer.c). */
typedef struct mf__kafka_loop {
    struct mf__kafka_mailbox *mailbox; /* kafka_producer.c; NULL: none yet */
    void *consumers;                   /* kafka_consumer.c's */
    void (*consumers_dtor)(mf_loop_t *loop, void *consumers);
} mf__kafka_loop_t;

mf__kafka_loop_t *mf__kafka_loop(mf_loop_t *loop);

/* ---- the producer side (kafka_producer.c) -------------------------------- */

/* A report: what librdkafka's background thread learned about one message,
 * a batch of messages or an admin request, carried to the loop that waits
 * for it. Allocated from the loop's mailbox (never from the task: it must
 * outlive a canceled task and its loop).
 *
 * Each message's opaque is an outcome: the report's own (one message) or
 * one of a batch's array (mf__kafka_report_expect). The background thread
 * fills the outcome and counts the report's remaining messages down; the
 * report is posted once, when the last of them is in. An admin request's
 * opaque is the report itself. */
typedef struct mf__kafka_report mf__kafka_report_t;
typedef struct mf__kafka_outcome {
    mf__kafka_report_t *report;
    rd_kafka_resp_err_t err;
    int32_t partition;
    int64_t offset;
} mf__kafka_outcome_t;

struct mf__kafka_report {
    mf_post_t post;
    struct mf__kafka_mailbox *box;
    mf_task_t *task; /* the waiting task; NULL once it gave up */
    void (*arrived)(mf__kafka_report_t *r); /* on the loop, task set */
    mf__kafka_outcome_t one;       /* one message's, or an admin result's */
    mf__kafka_outcome_t *outcomes; /* a batch's, or NULL */
    size_t capacity; /* of outcomes (malloc'd; kept for the next batch) */
    atomic_size_t remaining; /* messages not reported yet */
    char *detail;            /* the broker's words (admin results), malloc'd */
    mf__kafka_report_t *next_free;
};

/* A report for a task of loop, which waits for it from now on (the loop is
 * kept alive until it arrives or the task lets go). It expects one message
 * (opaque: &r->one) or an admin result (opaque: r). */
mf__kafka_report_t *
mf__kafka_report_take(mf_loop_t *loop, mf_task_t *task,
                      void (*arrived)(mf__kafka_report_t *));
/* Makes r expect n messages of a batch instead, the opaque of message i
 * being &r->outcomes[i], and holds it back until mf__kafka_report_sent. */
void mf__kafka_report_expect(mf__kafka_report_t *r, size_t n);
/* Every message of r's batch was offered to librdkafka, `refused` of them
 * refused (their outcomes filled by the caller): lets r go to its loop when
 * the rest are in. True when they are in already: r is not posted then,
 * and the caller takes its outcomes and gives it back unused. */
bool mf__kafka_report_sent(mf__kafka_report_t *r, size_t refused);
/* librdkafka refused the request: the report goes back unused. */
void mf__kafka_report_unused(mf__kafka_report_t *r);
/* The task gives up (cancel, destroy): the report in *slot, if any, is
 * dropped when it comes; *slot is cleared. True when one was due. */
bool mf__kafka_report_abandon(mf__kafka_report_t **slot);

rd_kafka_t *mf__kafka_rk(const mf_kafka_t *k);
/* Messages handed to librdkafka: counted in and out for mf_kafka_close. */
void mf__kafka_message_out(mf_kafka_t *k, int delta);
void mf__kafka_admin_out(mf_kafka_t *k, int delta);

#endif /* MF_KAFKA_INT_H */
