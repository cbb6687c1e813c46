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

#endif /* MF_KAFKA_INT_H */
