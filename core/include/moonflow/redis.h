/*
 * moonflow/redis.h — the Redis client as a task kind.
 *
 *   int err;
 *   mf_redis_client_t *c = mf_redis_client(loop, "redis://127.0.0.1:6379/0",
 *                                          NULL, &err);
 *   mf_task_t *t = mf_task_redis_create(c, cb, user);
 *   const char *argv[] = {"GET", "key"};
 *   mf_task_redis_add_command(t, 2, argv, NULL);   // NULL: strlen each
 *   mf_series_push_back(series, t);                // or mf_task_start(t)
 *   ... in cb: mf_task_redis_reply(t, 0)->type == MF_REDIS_STRING ...
 *
 * Endpoints: redis://[[user]:password@]host[:port][/db] and rediss:// (TLS,
 * server verified against the system CA bundle unless opts say otherwise).
 * Every new connection sends AUTH (when the URL has a password) and SELECT
 * (when db != 0) before the first command; their failure fails the tasks
 * waiting for that connection.
 *
 * Connections. A client has, per loop:
 * - shared connections (opts.pipeline_connections, default 1): ordinary
 *   commands of concurrent tasks are appended to one output buffer and
 *   written once per loop iteration, so N handlers that each send a GET in
 *   the same iteration cost one write and one read: Redis sees a pipeline.
 *   Replies are matched to tasks in order. A task's commands are written
 *   contiguously, so MULTI ... EXEC inside one task is atomic here too.
 * - a dedicated pool (opts.max_connections, default 64): a task that
 *   contains a blocking or connection-state command (BLPOP, BRPOP, BLMOVE,
 *   BZPOPMIN/MAX, XREAD/XREADGROUP with BLOCK, WAIT, WATCH, MULTI, SELECT,
 *   CLIENT, SUBSCRIBE ...) or that asked for it (mf_task_redis_set_dedicated)
 *   runs alone on a pooled connection; a connection whose state the task
 *   changed (SELECT, WATCH left open, an error mid-transaction) is closed
 *   instead of returned. Further tasks wait for a free connection.
 * Idle pooled connections close after opts.idle_timeout_ms or as soon as the
 * server closes them.
 *
 * Replies are faithful: status, error (a reply, not a task failure: the task
 * still succeeds), integer, bulk string (binary-safe, may hold NUL bytes),
 * nil, arrays nested to any depth. Commands are binary-safe argument
 * vectors. The protocol is RESP2, parsed by hiredis's redisReader.
 *
 * Failures come back in the task's completion, never from the factory:
 *   name does not resolve   MF_STATE_DNS_ERROR      / MF_EDNS
 *   connect/reset/refused,
 *   server gone mid-reply   MF_STATE_SYS_ERROR      / MF_ECONNREFUSED ...
 *   TLS handshake/verify    MF_STATE_TLS_ERROR      / MF_ETLS
 *   AUTH/SELECT refused     MF_STATE_TASK_ERROR     / MF_EACCES (Redis's
 *                           message: mf_task_redis_error_message)
 *   connect or response
 *   timeout, task timeout   MF_STATE_TIMEOUT        / MF_ETIMEDOUT
 *   garbage from the server MF_STATE_PROTOCOL_ERROR / MF_EPROTO (connection
 *                           dropped, every task waiting on it fails)
 *   reply over max_reply    MF_STATE_TASK_ERROR     / MF_EMSGSIZE
 *   task with no command    MF_STATE_TASK_ERROR     / MF_EINVAL
 * A task that fails on a shared connection fails alone when it can (timeout:
 * its reply is discarded when it arrives); a broken connection fails every
 * task that waits on it, and the next task connects again.
 *
 * Threads: everything here runs on the loop's thread. Ownership: a client
 * belongs to its loop (freed with it); the task copies its commands; replies
 * live in the task's memory until the task is destroyed after its callback.
 */
#ifndef MOONFLOW_REDIS_H
#define MOONFLOW_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "task.h"

MF_EXTERN_C_BEGIN

typedef struct mf_redis_client mf_redis_client_t;
typedef struct mf_redis_subscriber mf_redis_subscriber_t;

typedef enum mf_redis_type {
    MF_REDIS_NIL,
    MF_REDIS_STATUS,
    MF_REDIS_ERROR,
    MF_REDIS_INTEGER,
    MF_REDIS_STRING,
    MF_REDIS_ARRAY
} mf_redis_type_t;

typedef struct mf_redis_reply mf_redis_reply_t;
struct mf_redis_reply {
    mf_redis_type_t type;
    long long integer;          /* MF_REDIS_INTEGER */
    const char *str;            /* STATUS, ERROR, STRING: len bytes + NUL */
    size_t len;                 /* ... and for ARRAY: elements */
    mf_redis_reply_t *elements; /* ARRAY: len replies; NULL for a nil array */
};

typedef struct mf_redis_opts {
    uint32_t connect_timeout_ms;   /* TCP + TLS + AUTH/SELECT; default 5000 */
    uint32_t response_timeout_ms;  /* command written → its reply; a shared
                                      connection that stays silent this long
                                      is closed; default 30000; 0: none */
    uint32_t idle_timeout_ms;      /* pooled connection; default 60000 */
    unsigned pipeline_connections; /* shared connections; default 1 */
    unsigned max_connections;      /* dedicated pool; default 64 */
    uint64_t max_reply;            /* bytes of one task's replies;
                                      default 512 MiB */
    bool tls_verify;               /* rediss://; default true */
    const char *ca_file;           /* NULL: the system bundle */
    bool readonly;          /* READONLY on each new connection (reads from
                               a cluster replica); default false */
    bool read_from_replica; /* cluster client: read-only commands go to a
                               replica of the key's slot (see
                               redis_cluster.h); default false */
} mf_redis_opts_t;

MF_API void mf_redis_opts_init(mf_redis_opts_t *opts);

/* The loop's client for url (opts NULL: defaults). The same url and opts on
 * the same loop give the same client, so calling this per request is cheap.
 * NULL with *error = MF_EINVAL for a malformed URL.
 *
 * A host that names an upstream group (moonflow/upstream.h) when the
 * client is made gives a group client: each task asks the group for a
 * server (mf_upstream_balance, keyed by the task's first key; a task with
 * no key: NULL) and runs whole on that server's own client (the URL's
 * user, password and database, the same opts), batched with the other
 * tasks bound there. Under consistent_hash, a task whose keys belong on
 * different servers (mf_upstream_key_home) is not sent: each command's
 * reply is an error starting "CROSSSERVER" (the task succeeds). Each
 * attempt tells the group how its server did; a task whose connection
 * failed before its commands were written (refused, reset, the connect
 * timed out) goes to the group's next pick, never a server it tried, and
 * fails with that connection's error when none is left; one whose commands
 * were written fails as on one server. With no live server at dispatch:
 * MF_STATE_TASK_ERROR / MF_ENOUPSTREAM. Subscribers subscribe on the
 * server the group picks for their first channel (none live: the
 * subscriber ends with MF_ENOUPSTREAM), and PUBLISH is keyed by its
 * channel, so both meet on one server. */
MF_API mf_redis_client_t *mf_redis_client(mf_loop_t *loop, const char *url,
                                          const mf_redis_opts_t *opts,
                                          int *error);
/* Connections this client opened so far (tests observe reuse with it). */
MF_API uint64_t mf_redis_client_connects(const mf_redis_client_t *client);

/* One client of a loop (a URL and its options) as it is now: its pool of
 * dedicated connections and how well commands share writes (commands /
 * writes: the batching; 1 means each command went out alone). */
typedef struct mf_redis_client_stats {
    const char *host; /* valid during the call */
    uint16_t port;
    long db;
    unsigned dedicated; /* dedicated connections, busy or idle */
    size_t idle;        /* idle dedicated connections */
    size_t waiters;     /* tasks waiting for a dedicated connection */
    uint64_t connects;  /* connections opened */
    uint64_t writes;    /* batches of commands written */
    uint64_t commands;  /* commands sent */
} mf_redis_client_stats_t;
typedef void (*mf_redis_client_stats_fn)(void *ud,
                                         const mf_redis_client_stats_t *st);
/* Calls fn for each Redis client of the loop. Loop thread. */
MF_API void mf_redis_clients_stats(mf_loop_t *loop, mf_redis_client_stats_fn fn,
                                   void *ud);

MF_API mf_task_t *mf_task_redis_create(mf_redis_client_t *client, mf_task_cb cb,
                                       void *user);
/* Appends one command (argv[i] is argvlen[i] bytes; argvlen NULL: C
 * strings). Several calls make a pipeline: one reply per command, in order. */
MF_API void mf_task_redis_add_command(mf_task_t *task, int argc,
                                      const char *const *argv,
                                      const size_t *argvlen);
/* A list of commands encoded once, for many tasks: a load generator's or a
 * handler's fixed commands are then copied into each task with one
 * memcpy instead of being encoded again.
 *
 *   mf_redis_prepared_t *p = mf_redis_prepared_create();
 *   mf_redis_prepared_add(p, 2, (const char *[]){"GET", "k"}, NULL);
 *   ... per task: mf_task_redis_add_prepared(task, p);
 *   mf_redis_prepared_destroy(p);
 *
 * A prepared list is plain heap memory, tied to no loop or client; the task
 * copies it, so it may be destroyed while tasks that used it still run. */
typedef struct mf_redis_prepared mf_redis_prepared_t;
MF_API mf_redis_prepared_t *mf_redis_prepared_create(void);
/* Appends one command (as mf_task_redis_add_command). 0, MF_EINVAL (no
 * argument) or MF_ENOMEM (the list is left as it was). */
MF_API int mf_redis_prepared_add(mf_redis_prepared_t *p, int argc,
                                 const char *const *argv,
                                 const size_t *argvlen);
MF_API size_t mf_redis_prepared_count(const mf_redis_prepared_t *p);
MF_API void mf_redis_prepared_destroy(mf_redis_prepared_t *p);
/* Appends the prepared commands to the task, as that many
 * mf_task_redis_add_command calls would. */
MF_API void mf_task_redis_add_prepared(mf_task_t *task,
                                       const mf_redis_prepared_t *p);
/* Run on a connection of its own even if no command requires it. */
MF_API void mf_task_redis_set_dedicated(mf_task_t *task, bool dedicated);

/* Results, valid in the task's callback: one reply per command when the task
 * succeeded (MF_STATE_SUCCESS), none otherwise. */
MF_API size_t mf_task_redis_nreplies(const mf_task_t *task);
MF_API const mf_redis_reply_t *mf_task_redis_reply(const mf_task_t *task,
                                                   size_t i);
/* How many of those replies are error replies (MF_REDIS_ERROR at the top):
 * a caller that only asks whether a command failed reads no reply. */
MF_API size_t mf_task_redis_error_replies(const mf_task_t *task);
/* When the task failed with MF_EACCES (Redis refused the connection's AUTH
 * or SELECT): Redis's own message, e.g. "WRONGPASS invalid
 * username-password pair or user is disabled." or "ERR DB index is out of
 * range" (at most 256 bytes). NULL otherwise. Valid in the callback. */
MF_API const char *mf_task_redis_error_message(const mf_task_t *task);

/* ---- sessions: one connection held across tasks --------------------- */

/* A check-then-set (WATCH k, GET k, MULTI, SET k ..., EXEC) needs its
 * commands on one connection, with the caller's own work between them:
 * a session holds one dedicated connection of the client's pool for that.
 *
 *   mf_redis_session_t *s = mf_redis_session_open(client, ready, user);
 *   ... in ready(s, 0, user): tasks of the session, one after the other:
 *   mf_task_t *t = mf_task_redis_session_create(s, cb, user);
 *   mf_task_redis_add_command(t, 2, (const char *[]){"WATCH", "k"}, NULL);
 *   mf_task_start(t);   ... GET, MULTI, SET, EXEC in later tasks ...
 *   mf_redis_session_close(s);  // after the session's last task ended
 *
 * Its tasks run on its connection alone, in the order they start (replies
 * in order, as on any connection); WATCH, MULTI, EXEC, DISCARD, UNWATCH
 * and SELECT are allowed across them. The connection counts against
 * opts.max_connections while held: a session waits for a free one as a
 * dedicated task does.
 *
 * The close hands the connection back clean: a MULTI left open is
 * DISCARDed, a WATCH left open UNWATCHed, a SELECT undone (SELECT of the
 * URL's database); other state (CLIENT SETNAME, HELLO, AUTH, READONLY ...)
 * is undone with RESET (Redis >= 6.2), then the URL's AUTH and SELECT
 * again. Only once Redis answered every one of those OK does the pool have
 * it again (meanwhile its waiters wait for it rather than open another).
 * A connection the session put in pub/sub or MONITOR mode (SUBSCRIBE,
 * PSUBSCRIBE, SSUBSCRIBE, MONITOR, SYNC), with replies still due, or whose
 * cleanup failed (an older server refuses RESET) is closed instead.
 *
 * A session is one server's. On a cluster client (or a client whose host
 * is an upstream group) open it with mf_redis_session_open_keys, naming
 * the keys it will touch: a cluster's session holds a connection of the
 * master serving their slot (read from the slot map, fetched first when
 * the client has none yet); a group's, of the server the group picks for
 * the first key (no key: the policy's pick with none; no verdict on the
 * server is reported). ready then gets MF_EINVAL when the keys are in
 * more than one slot (cluster), on more than one server (consistent_hash
 * group) or a cluster's session names no key; MF_ENOUPSTREAM when no
 * server of the group is live. mf_redis_session_open(client, ...) is
 * mf_redis_session_open_keys with no key: a single node's, or a group's.
 *
 * ready runs once, from the loop (never inside mf_redis_session_open): error
 * 0 when the session holds a connection (which may still be opening: its
 * first task then waits for it, and fails as any task would if it cannot
 * open), MF_EBUSY when the pool's line is full. A session's task whose
 * connection closed (server gone, a timeout, a canceled task: its
 * connection is closed as a dedicated one's is) fails with the
 * connection's error, and so do the later ones. Start a session's tasks
 * before closing it; close every session (also after a failed open), from
 * anywhere but its tasks' own dispatch. */
typedef struct mf_redis_session mf_redis_session_t;
typedef void (*mf_redis_session_cb)(mf_redis_session_t *s, int error,
                                    void *user);
MF_API mf_redis_session_t *mf_redis_session_open(mf_redis_client_t *client,
                                                 mf_redis_session_cb ready,
                                                 void *user);
MF_API mf_redis_session_t *
mf_redis_session_open_keys(mf_redis_client_t *client, int nkeys,
                           const char *const *keys, const size_t *lens,
                           mf_redis_session_cb cb, void *user);
/* A task whose commands run on the session's connection (otherwise as
 * mf_task_redis_create). */
MF_API mf_task_t *mf_task_redis_session_create(mf_redis_session_t *s,
                                               mf_task_cb cb, void *user);
/* Whether the session holds a connection now (false before ready, and once
 * its connection closed). */
MF_API bool mf_redis_session_has_connection(const mf_redis_session_t *s);
/* Hands the connection back (cleaned, or closed) and frees the session. */
MF_API void mf_redis_session_close(mf_redis_session_t *s);

/* ---- Redis Cluster ----------------------------------------------------
 *
 *   mf_redis_client_t *c = mf_redis_cluster_client(
 *       loop, "redis-cluster://127.0.0.1:7000,127.0.0.1:7001", NULL, &err);
 *   ... then tasks exactly as on a single node (mf_task_redis_create ...).
 *
 * URL: redis-cluster://[[user]:password@]host[:port][,host[:port]...]
 * [/][?read_from=replica] (rediss-cluster:// for TLS). The hosts are seeds:
 * the first task asks one of them for the slot map (CLUSTER SHARDS, or
 * CLUSTER SLOTS on servers before 7.0) and waits for it. Each node is then
 * an ordinary client of the loop (the same options), so the commands bound
 * to one node share its pipelined connection's writes as on a single node.
 *
 * Routing: each command goes to the master of its key's slot (CRC16 of the
 * key, or of its hash tag: "{user1}.a" and "{user1}.b" share a slot). The
 * key positions come from a table of the commands the client knows (every
 * data command of Redis 7: strings, hashes, lists, sets, sorted sets,
 * streams, geo, HyperLogLog, EVAL/FCALL by numkeys, XREAD by STREAMS); a
 * command not in it is not sent and gets the error reply "ERR the cluster
 * client does not know where this command's keys are: not sent". A command
 * whose keys hash to different slots gets "CROSSSLOT Keys in request don't
 * hash to the same slot (refused by the cluster client)" without being
 * sent. Commands with no key (PING, INFO, PUBLISH, MULTI, WAIT ...) go with
 * the task's first keyed command, or to one master. A task whose commands
 * go to several nodes is split per node; the replies come back in the
 * order of its commands. MULTI ... EXEC, WATCH, blocking commands and
 * dedicated tasks go to one node as a whole.
 *
 * MOVED: the slot's new owner is noted at once, the command is sent there,
 * and the map is refreshed (one refresh at a time, at most one per 100 ms;
 * the MOVED replies that come meanwhile only retry at the node they name).
 * ASK: the command is sent again to the named node behind ASKING, in the
 * same write. A command follows at most 16 redirections; then the
 * redirection is its reply. A failed connection to a node refreshes the
 * map (a master gone, its replica promoted). Commands whose node's
 * connection failed before any of them was written (the connect refused)
 * are routed again once the map is read again, at most 5 times; commands
 * that were written fail the task as on a single node (a write is never
 * sent twice).
 *
 * read_from_replica (opts, or ?read_from=replica): read-only commands go
 * to a replica of their slot's master, over connections that sent
 * READONLY; a slot whose replicas are not known yet is read from its
 * master. Pub/sub: mf_redis_subscribe on a cluster client subscribes on
 * the first seed node (Redis Cluster delivers PUBLISH to every node);
 * mf_redis_ssubscribe on the node of the channel's slot.
 * NULL with *error = MF_EINVAL for a malformed URL. */
MF_API mf_redis_client_t *mf_redis_cluster_client(mf_loop_t *loop,
                                                  const char *url,
                                                  const mf_redis_opts_t *opts,
                                                  int *error);

typedef struct mf_redis_cluster_stats {
    unsigned nodes;     /* known nodes (seeds, the map's, redirections') */
    bool mapped;        /* a slot map was read */
    uint64_t refreshes; /* slot maps asked for */
    uint64_t moved;     /* MOVED replies followed */
    uint64_t asks;      /* ASK replies followed */
} mf_redis_cluster_stats_t;
/* 0, or MF_EINVAL when c is not a cluster client. Loop thread. */
MF_API int mf_redis_cluster_stats(const mf_redis_client_t *c,
                                  mf_redis_cluster_stats_t *st);

/* ---- pub/sub ---------------------------------------------------------- */

/* Called for each message, in order, on the loop thread. msg is the array
 * Redis sent ("message", channel, payload) or ("pmessage", pattern, channel,
 * payload), or a confirmation ("subscribe" | "psubscribe" | "unsubscribe" |
 * "punsubscribe", channel, count of subscriptions left: an integer; the
 * channel is nil for an unsubscribe-all that had nothing to drop), one per
 * channel, so a caller can wait until it is subscribed. msg is valid during
 * the call only. When the connection ends (error, server gone, or
 * mf_redis_subscriber_close) the callback runs once more with msg == NULL
 * and error set (0 after close); the subscriber is then freed by the client.
 * A live subscriber keeps its loop running. */
typedef void (*mf_redis_message_cb)(mf_redis_subscriber_t *sub,
                                    const mf_redis_reply_t *msg, int error,
                                    void *user);

/* Opens a dedicated connection and SUBSCRIBEs (or PSUBSCRIBEs when pattern)
 * to the channels. */
MF_API mf_redis_subscriber_t *
mf_redis_subscribe(mf_redis_client_t *client, int nchannels,
                   const char *const *channels, const size_t *lens,
                   bool pattern, mf_redis_message_cb cb, void *user);
/* Sharded pub/sub (Redis 7): SSUBSCRIBEs to the channels, which must share
 * a slot (Redis refuses others with CROSSSLOT, which ends the subscriber).
 * On a cluster client the connection goes to the master of the first
 * channel's slot (a MOVED reply, when the map is not known yet or the slot
 * moved, ends the subscriber: subscribe again); on a single node, to it.
 * Messages are ("smessage", channel, payload), confirmations
 * ("ssubscribe" | "sunsubscribe", channel, count); when a slot moves away
 * Redis drops its channels with "sunsubscribe". mf_redis_subscriber_update
 * on it (pattern false) sends SSUBSCRIBE / SUNSUBSCRIBE. */
MF_API mf_redis_subscriber_t *
mf_redis_ssubscribe(mf_redis_client_t *client, int nchannels,
                    const char *const *channels, const size_t *lens,
                    mf_redis_message_cb cb, void *user);
/* Adds or drops channels on a live subscriber; dropping with nchannels 0
 * drops every channel (or every pattern). */
MF_API void mf_redis_subscriber_update(mf_redis_subscriber_t *sub,
                                       bool subscribe, int nchannels,
                                       const char *const *channels,
                                       const size_t *lens, bool pattern);
/* In the final callback (msg NULL): Redis's error reply that ended the
 * subscriber — a refused AUTH or SELECT ("WRONGPASS ...", error MF_EACCES)
 * or SUBSCRIBE ("NOPERM ...") — at most 256 bytes; NULL otherwise. */
MF_API const char *
mf_redis_subscriber_error_message(const mf_redis_subscriber_t *sub);
/* Stops reading, delivers no more messages except the final NULL one. */
MF_API void mf_redis_subscriber_close(mf_redis_subscriber_t *sub);

MF_EXTERN_C_END

#endif /* MOONFLOW_REDIS_H */
