/*
 * moonflow/kafka.h — Kafka through librdkafka, woken by our loops: a
 * producer shared by the process's workers, consumers in balanced groups,
 * metadata and topic creation. No call here blocks a loop thread.
 *
 *   char err[256];
 *   mf_kafka_prop_t props[] = {{"bootstrap.servers", "127.0.0.1:9092"}};
 *   mf_kafka_t *k = mf_kafka_open(props, 1, err, sizeof err);
 *   mf_kafka_message_t m = {.topic = "events", .partition =
 *       MF_KAFKA_PARTITION_ANY, .value = "hi", .value_len = 2};
 *   mf_task_t *t = mf_task_kafka_produce_create(loop, k, &m, cb, user);
 *   mf_series_push_back(series, t);          // or mf_task_start(t)
 *   ... in cb: mf_task_kafka_partition(t), mf_task_kafka_offset(t)
 *   mf_kafka_close(k);                       // when the program is done
 *
 * Properties. Every librdkafka property passes through as is
 * (bootstrap.servers, acks, compression.type, linger.ms, security.protocol,
 * sasl.*, ssl.*, message.timeout.ms, partitioner ...). An unknown property or
 * a bad value is refused when the handle opens, with librdkafka's message,
 * which names the property. moonflow's defaults, where the caller gives
 * none: enable.idempotence=true (hence acks=all, retries without
 * duplicates, order kept per partition), message.timeout.ms=30000.
 * What that promises: each message is reported once, and a partition's
 * reported offsets grow in the order the tasks were dispatched; no
 * duplicate is the broker's doing (it recognizes a retried request by its
 * sequence numbers). librdkafka 2.0.2's mock cluster does not for a
 * producer without transactions: after a connection cut with requests
 * answered but unread, it may hold an unreported copy of them before the
 * reported messages.
 *
 * Producer (mf_kafka_t). One librdkafka producer per distinct property list
 * per process: mf_kafka_open with the same properties (same names, values
 * and order) from any thread returns the same handle with one more
 * reference, so every worker produces through one handle and one set of
 * broker connections. A produce task copies its message when created and
 * hands it to librdkafka when dispatched; it completes on its delivery
 * report, on the loop that started it: librdkafka's main queue is forwarded
 * to its background queue, whose thread posts each report to the producing
 * loop's mailbox (mf_loop_post). Nothing polls; an idle producer costs no
 * CPU on the loops.
 *
 * Consumer (mf_kafka_consumer_t). One librdkafka consumer in a group,
 * owned by one loop (a worker): subscribe to topics, take messages in
 * batches (a poll task waits on the loop for the first message, never
 * blocking it: the consumer queue's io event fd is an mf_io_t), commit
 * (automatically by librdkafka's auto commit, or by a commit task), pause,
 * resume, seek, lag per partition, close with a final commit. The group's
 * rebalances (eager or cooperative-sticky, per partition.assignment.strategy)
 * are applied by moonflow and reported to an optional callback on the loop.
 * Several consumers of one group in one process, or in several processes,
 * share its partitions.
 *
 * Failures come back in the task's completion, never from the factory:
 *   message not delivered within
 *   message.timeout.ms               MF_STATE_TIMEOUT    / MF_ETIMEDOUT
 *   librdkafka's queue full          MF_STATE_TASK_ERROR / MF_EBUSY
 *   unknown topic or partition       MF_STATE_TASK_ERROR / MF_ENOENT
 *   message over message.max.bytes   MF_STATE_TASK_ERROR / MF_EMSGSIZE
 *   any other error of the broker
 *   or of librdkafka                 MF_STATE_TASK_ERROR / MF_EKAFKA
 *   consumer closed                  MF_STATE_TASK_ERROR / MF_ECLOSED
 * mf_task_kafka_error() keeps librdkafka's words for every failure
 * ("Local: Message timed out", "Broker: Not leader for partition" ...), and
 * mf_task_kafka_error_code() its rd_kafka_resp_err_t. A produce task that is
 * canceled (its task timeout, loop shutdown) completes at once; its message
 * cannot be recalled from librdkafka and may still be delivered: its report
 * is dropped when it arrives.
 *
 * Threads: a producer handle may be used from any loop; tasks and consumers
 * belong to the loop that created them. Ownership: a task copies what it is
 * given; results (a delivery's partition and offset, a batch of messages, a
 * metadata snapshot) live in the task's memory until the task is destroyed
 * after its callback.
 */
#ifndef MOONFLOW_KAFKA_H
#define MOONFLOW_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "task.h"

MF_EXTERN_C_BEGIN

typedef struct mf_kafka mf_kafka_t;
typedef struct mf_kafka_consumer mf_kafka_consumer_t;

/* One librdkafka property. */
typedef struct mf_kafka_prop {
    const char *name;
    const char *value;
} mf_kafka_prop_t;

/* ---- producer ----------------------------------------------------------- */

/* The process's producer for these properties, opened on first use
 * (librdkafka starts its threads and connects in the background: opening
 * never waits for a broker). NULL with librdkafka's message in errbuf for an
 * unknown property, a bad value or a missing bootstrap.servers. Thread-safe.
 */
MF_API mf_kafka_t *mf_kafka_open(const mf_kafka_prop_t *props, size_t n,
                                 char *errbuf, size_t errlen);
/* Drops a reference; the last one waits up to timeout_ms for messages still
 * in flight (their tasks complete with MF_ECLOSED if their loop is still
 * running), then destroys the handle. Call it from no loop thread whose
 * tasks are waiting, or with timeout_ms 0. */
MF_API void mf_kafka_close(mf_kafka_t *k, int timeout_ms);
/* Messages handed to librdkafka and not yet reported (tests, health). */
MF_API unsigned mf_kafka_in_flight(const mf_kafka_t *k);

#define MF_KAFKA_PARTITION_ANY (-1)

typedef struct mf_kafka_header {
    const char *name;
    const void *value; /* NULL: a null header value */
    size_t len;
} mf_kafka_header_t;

typedef struct mf_kafka_message {
    const char *topic;
    int32_t partition; /* MF_KAFKA_PARTITION_ANY: the partitioner's choice */
    const void *key;   /* NULL: no key */
    size_t key_len;
    const void *value; /* NULL: a null value (a tombstone) */
    size_t value_len;
    const mf_kafka_header_t *headers;
    size_t nheaders;
    int64_t timestamp_ms; /* 0: now */
} mf_kafka_message_t;

/* A task that produces one message (copied now) and completes on its
 * delivery report. */
MF_API mf_task_t *mf_task_kafka_produce_create(mf_loop_t *loop, mf_kafka_t *k,
                                               const mf_kafka_message_t *msg,
                                               mf_task_cb cb, void *user);
/* After success: where the message landed. The offset is -1 when the broker
 * did not return one (acks=0). */
MF_API int32_t mf_task_kafka_partition(const mf_task_t *t);
MF_API int64_t mf_task_kafka_offset(const mf_task_t *t);

/* One message's outcome in a batch. */
typedef struct mf_kafka_delivery {
    int32_t partition; /* where it landed (or was aimed); -1: unknown */
    int64_t offset;    /* -1: none (acks=0, or the message failed) */
    int err;           /* rd_kafka_resp_err_t; 0: delivered */
} mf_kafka_delivery_t;

/* A task that produces n messages (all copied now, in one block of loop
 * memory), hands them to librdkafka one after the other when dispatched
 * and completes once every one has its delivery report: the cost of one
 * task and one callback for the whole batch. It succeeds even when some
 * messages failed (each one's err says; mf_kafka_error_text words it: a
 * full queue at dispatch is _QUEUE_FULL); it fails only when canceled
 * (MF_STATE_CANCELED: the messages already handed over may still be
 * delivered). n 0 succeeds at once. */
MF_API mf_task_t *
mf_task_kafka_produce_batch_create(mf_loop_t *loop, mf_kafka_t *k,
                                   const mf_kafka_message_t *msgs, size_t n,
                                   mf_task_cb cb, void *user);
/* After success: the n outcomes, in the messages' order (NULL, *n 0 for
 * another kind of task). */
MF_API const mf_kafka_delivery_t *mf_task_kafka_deliveries(const mf_task_t *t,
                                                           size_t *n);

/* Any Kafka task after a failure: librdkafka's message and error code
 * (rd_kafka_resp_err_t); NULL / 0 after success. */
MF_API const char *mf_task_kafka_error(const mf_task_t *t);
MF_API int mf_task_kafka_error_code(const mf_task_t *t);
/* "<NAME>: <message>" for a librdkafka error code (a topic's or a
 * partition's err in a metadata snapshot), written to buf (len bytes). */
MF_API void mf_kafka_error_text(int err, char *buf, size_t len);

/* ---- metadata and topics ------------------------------------------------ */

typedef struct mf_kafka_partition_info {
    int32_t id;
    int32_t leader; /* broker id; -1: none */
    int err;        /* rd_kafka_resp_err_t of this partition, 0: fine */
    const int32_t *replicas;
    size_t nreplicas;
    const int32_t *isrs;
    size_t nisrs;
} mf_kafka_partition_info_t;

typedef struct mf_kafka_topic_info {
    const char *name;
    int err; /* rd_kafka_resp_err_t: e.g. unknown topic */
    const mf_kafka_partition_info_t *partitions;
    size_t npartitions;
} mf_kafka_topic_info_t;

typedef struct mf_kafka_broker_info {
    int32_t id;
    const char *host;
    int port;
} mf_kafka_broker_info_t;

typedef struct mf_kafka_metadata {
    int32_t controller_id; /* -1: unknown */
    const mf_kafka_broker_info_t *brokers;
    size_t nbrokers;
    const mf_kafka_topic_info_t *topics;
    size_t ntopics;
} mf_kafka_metadata_t;

/* The cluster's brokers and topics (topic NULL: every topic), asked through
 * k's connections. librdkafka's metadata call waits, so it runs on the
 * loop's compute pool (MF_ENOPOOL without one); the task's timeout_ms bounds
 * it (0: 10000). */
MF_API mf_task_t *mf_task_kafka_metadata_create(mf_loop_t *loop, mf_kafka_t *k,
                                                const char *topic,
                                                int timeout_ms, mf_task_cb cb,
                                                void *user);
MF_API const mf_kafka_metadata_t *mf_task_kafka_metadata(const mf_task_t *t);

/* Creates a topic (replication -1: the broker's default). Fails with MF_EEXIST
 * when it exists, with MF_EKAFKA and the broker's words otherwise, with
 * MF_ETIMEDOUT when no answer came within timeout_ms (0: 10000; librdkafka's
 * admin request timeout, which also bounds the wait for a controller). */
MF_API mf_task_t *mf_task_kafka_create_topic_create(
    mf_loop_t *loop, mf_kafka_t *k, const char *topic, int partitions,
    int replication, int timeout_ms, mf_task_cb cb, void *user);

/* ---- consumer ------------------------------------------------------------ */

typedef struct mf_kafka_tp {
    const char *topic;
    int32_t partition;
    int64_t offset; /* commit / seek / position: an offset or
                       MF_KAFKA_OFFSET_* */
} mf_kafka_tp_t;

#define MF_KAFKA_OFFSET_BEGINNING (-2)
#define MF_KAFKA_OFFSET_END (-1)
#define MF_KAFKA_OFFSET_STORED (-1000)
#define MF_KAFKA_OFFSET_INVALID (-1001)

typedef enum mf_kafka_rebalance {
    MF_KAFKA_ASSIGNED, /* parts were added to this consumer */
    MF_KAFKA_REVOKED,  /* parts were taken away (after they were committed
                          when auto commit is on) */
    MF_KAFKA_LOST      /* taken away without a clean hand-over */
} mf_kafka_rebalance_t;

/* Runs on the consumer's loop after moonflow applied the change. parts
 * live for the call only. */
typedef void (*mf_kafka_rebalance_cb)(mf_kafka_consumer_t *c,
                                      mf_kafka_rebalance_t what,
                                      const mf_kafka_tp_t *parts, size_t n,
                                      void *user);

typedef struct mf_kafka_consumer_opts {
    const mf_kafka_prop_t *props; /* as mf_kafka_open; group.id required */
    size_t nprops;
    const char *const *topics; /* subscription (names, or ^regex) */
    size_t ntopics;
    mf_kafka_rebalance_cb on_rebalance; /* NULL: none */
    void *user;
} mf_kafka_consumer_opts_t;

/* A consumer on loop, subscribed to opts->topics. NULL with librdkafka's
 * message in errbuf for a bad property, a missing group.id or an empty
 * subscription. moonflow's defaults, where the caller gives none:
 * auto.offset.reset=earliest, enable.partition.eof=false,
 * enable.auto.offset.store=false (offsets are stored by moonflow once the
 * application has had the records: see mf_task_kafka_poll_create). */
MF_API mf_kafka_consumer_t *
mf_kafka_consumer_open(mf_loop_t *loop, const mf_kafka_consumer_opts_t *opts,
                       char *errbuf, size_t errlen);

/* Starts the close: stores the offsets of the records handed out, revokes
 * the assignment (commits it when auto commit is on), leaves the group,
 * then frees the consumer; its waiting poll task fails with MF_ECLOSED at
 * once, commit tasks get their answer or MF_ECLOSED. Done in the
 * background on the loop (the rebalance callback still runs for the
 * revocation); cb (may be NULL) runs when closed, then c is freed: until
 * then c's calls fail with MF_ECLOSED. librdkafka's final destroy (which
 * joins its threads) runs on a thread of its own. Idempotent. A loop that
 * is destroyed closes its consumers still open (waiting, without
 * callbacks). */
typedef void (*mf_kafka_closed_cb)(void *user);
MF_API void mf_kafka_consumer_close(mf_kafka_consumer_t *c,
                                    mf_kafka_closed_cb cb, void *user);

typedef struct mf_kafka_record {
    const char *topic;
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms; /* -1: none */
    const void *key;      /* NULL: no key */
    size_t key_len;
    const void *value; /* NULL: a null value */
    size_t value_len;
    const mf_kafka_header_t *headers;
    size_t nheaders;
} mf_kafka_record_t;

/* Waits for messages: completes with 1..max records as soon as any is there,
 * or with 0 records after wait_ms (0: return at once; -1: no limit).
 * Transient errors (a broker down, a leader moving) are librdkafka's to
 * retry: they are logged, counted (mf_kafka_consumer_errors) and do not end
 * the task; a fatal consumer error fails it with MF_EKAFKA and librdkafka's
 * words. One poll task at a time per consumer (a second fails with MF_EBUSY);
 * max is 1..100000 (else MF_EINVAL). Rebalances and the consumer's other
 * events are served while a poll task waits (and when the next one
 * starts): poll within max.poll.interval.ms to stay in the group.
 * Offsets: the records a poll task handed out count as done when the next
 * poll task starts, when a commit task of the current positions is created,
 * when their partition is revoked, and at close; then the offset after each
 * partition's last record is stored (rd_kafka_offsets_store), so auto commit
 * (and a commit of the current positions) never commits records the
 * application has not had back. mf_kafka_consumer_store narrows that. */
MF_API mf_task_t *mf_task_kafka_poll_create(mf_kafka_consumer_t *c, size_t max,
                                            int wait_ms, mf_task_cb cb,
                                            void *user);
MF_API const mf_kafka_record_t *mf_task_kafka_records(const mf_task_t *t,
                                                      size_t *n);

/* Commits parts (offset: the next to read) and completes on the broker's
 * answer. parts NULL: the records handed out so far count as done (see
 * above) and the stored offsets are committed (nothing to commit is a
 * success). The committed offsets show in mf_kafka_consumer_lag. */
MF_API mf_task_t *mf_task_kafka_commit_create(mf_kafka_consumer_t *c,
                                              const mf_kafka_tp_t *parts,
                                              size_t n, mf_task_cb cb,
                                              void *user);

/* Pause or resume fetching parts (offsets ignored); seek moves each part's
 * position to its offset. 0 or MF_EINVAL / MF_EKAFKA (message in errbuf). */
MF_API int mf_kafka_consumer_pause(mf_kafka_consumer_t *c,
                                   const mf_kafka_tp_t *parts, size_t n,
                                   char *errbuf, size_t errlen);
MF_API int mf_kafka_consumer_resume(mf_kafka_consumer_t *c,
                                    const mf_kafka_tp_t *parts, size_t n,
                                    char *errbuf, size_t errlen);
MF_API int mf_kafka_consumer_seek(mf_kafka_consumer_t *c,
                                  const mf_kafka_tp_t *parts, size_t n,
                                  char *errbuf, size_t errlen);

/* Sets, for each part, the offset to store at the next of those points
 * (part.offset: the next offset to read; what is below it is done),
 * replacing what the last poll task's records would store: for callers
 * that hand records on one at a time and may stop in the middle of a batch
 * (the Lua binding's messages()). 0, or MF_ENOENT when a part is not
 * assigned or its offset is negative (the others are set). */
MF_API int mf_kafka_consumer_store(mf_kafka_consumer_t *c,
                                   const mf_kafka_tp_t *parts, size_t n);

/* The current assignment (topic strings live until the next rebalance). */
MF_API size_t mf_kafka_consumer_assignment(mf_kafka_consumer_t *c,
                                           const mf_kafka_tp_t **parts);

typedef struct mf_kafka_lag {
    int64_t position;  /* next offset this consumer will read; -1: none yet */
    int64_t committed; /* last committed offset known; -1: none */
    int64_t high;      /* the partition's high watermark; -1: unknown */
    int64_t lag;       /* high - position (or high - committed before the
                          first message); -1: unknown */
} mf_kafka_lag_t;

/* Transient consumer errors seen so far, and the last one's words (NULL:
 * none). */
MF_API uint64_t mf_kafka_consumer_errors(const mf_kafka_consumer_t *c,
                                         const char **last);

/* Lag of one assigned partition, from librdkafka's cached watermarks (no
 * request is sent). MF_ENOENT when the partition is not assigned. */
MF_API int mf_kafka_consumer_lag(mf_kafka_consumer_t *c, const char *topic,
                                 int32_t partition, mf_kafka_lag_t *out);

MF_EXTERN_C_END

#endif /* MOONFLOW_KAFKA_H */
