/*
 * redis_int.h — the Redis client's structs, shared by its files, which
 * form a chain (each calls only those below it; a lower one speaks to an
 * upper one through the function pointers the upper one registered):
 *   redis_session.c  sessions: one dedicated connection held, cleaned
 *                    before it goes back
 *   redis_task.c     the task kind
 *   redis_client.c   URL, the client as an endpoint's data, which
 *                    connection serves a task
 *   redis_sub.c      pub/sub
 *   redis_conn.c     a connection: open, AUTH/SELECT, write batching,
 *                    reading replies; tells its owner (mf_redis_conn_owner_t)
 *                    and its tasks (mf_redis_task_hooks_t) what happened
 *   redis_format.c   commands in protocol form
 *   redis_reply.c    reply memory and the redisReader adapter
 * Internal.
 *
 * Ownership: the loop's endpoint pool (moonflow/endpoint.h) owns the
 * endpoints; a client is the data of its endpoint (freed with it) and owns
 * its shared connections and subscribers. The dedicated connections are
 * counted, kept idle and handed out by the pool, and freed by the client's
 * ops. A connection never owns a task: it holds the tasks whose replies it
 * expects, in order, and completes them. Connection memory goes back from a
 * deferred post, never inside one of its own callbacks.
 */
#ifndef MF_REDIS_INT_H
#define MF_REDIS_INT_H

#include <hiredis/read.h>

#include "engine/buf.h"
#include "net/client_open.h"
#include "moonflow/dns.h"
#include "moonflow/endpoint.h"
#include "moonflow/redis.h"
#include "moonflow/upstream.h"
#include "net/tls.h"

typedef struct mf_redis_conn mf_redis_conn_t;
typedef struct mf_redis_task mf_redis_task_t;

/* A session's hold on one dedicated connection (redis_session.c): its
 * tasks run there, in order, and what they leave on the connection is
 * tracked here so the session can clean it before the pool has it back.
 * Plain data: the connection's end clears conn (the client's closed hook),
 * the tasks' commands set the flags as they are added. */
typedef struct mf_redis_pin {
    mf_redis_conn_t *conn; /* NULL: not granted yet, or it closed */
    int error;             /* why it closed (0: it did not) */
    bool in_multi;         /* MULTI without EXEC/DISCARD so far */
    bool watching;         /* WATCH without EXEC/DISCARD/UNWATCH so far */
    bool selected;         /* SELECT: another database, maybe */
    bool dirty;            /* other connection state (CLIENT, HELLO ...) */
    bool streaming;        /* SUBSCRIBE, MONITOR ...: replies it did not ask */
} mf_redis_pin_t;

/* The length of argument i (argvlen NULL: C strings). */
#define MF__REDIS_ARGLEN(lens, argv, i) ((lens) ? (lens)[i] : strlen((argv)[i]))

/* Redis's refusals are one short line ("WRONGPASS invalid username-password
 * pair or user is disabled."); a longer one is cut there, never dropped. */
#define MF_REDIS_REFUSAL_MAX 256

/* ---- reply memory (redis_reply.c) ---------------------------------------
 * A chain of chunks: small ones from the loop's free lists, big strings from
 * a checked malloc. Nothing moves once placed, so the reader may keep
 * pointers to arrays it is still filling. */
typedef struct mf_redis_chunk mf_redis_chunk_t;
typedef struct mf_redis_arena {
    mf_redis_chunk_t *head;
    size_t used;    /* bytes used in head */
    uint64_t total; /* bytes handed out since the last reset */
    uint64_t limit; /* 0: none */
} mf_redis_arena_t;

void mf__redis_arena_init(mf_redis_arena_t *a, uint64_t limit);
/* NULL when over the limit or out of memory. */
void *mf__redis_arena_alloc(mf_loop_t *loop, mf_redis_arena_t *a, size_t size);
void mf__redis_arena_reset(mf_loop_t *loop, mf_redis_arena_t *a);
/* Moves from's memory into into (nothing is copied or moved in memory:
 * the replies built in from stay where they are); from is left empty. */
void mf__redis_arena_adopt(mf_redis_arena_t *into, mf_redis_arena_t *from);

/* Where the reader puts the next top-level reply: root == NULL discards
 * it (a task that gave up, or one over its max_reply). */
typedef struct mf_redis_sink {
    mf_redis_arena_t *arena;
    mf_redis_reply_t *root;
    bool overflow; /* set when the arena refused memory */
} mf_redis_sink_t;

/* A reader whose replies are mf_redis_reply_t trees built in sink memory. */
redisReader *mf__redis_reader_create(mf_loop_t *loop, mf_redis_sink_t *sink);
void mf__redis_reader_free(redisReader *reader);

/* ---- protocol form (redis_format.c) ------------------------------------ */

/* Bytes of one command in protocol form; 0 on overflow. */
size_t mf__redis_format_size(int argc, const char *const *argv,
                             const size_t *argvlen);
/* Reads back one command this client wrote ("*N\r\n", then N times
 * "$len\r\nbytes\r\n") at p + *at, moving *at past it, and gives its
 * arguments to fn (argv points into p; lens their lengths). false when the
 * argument arrays could not be allocated (over 16 arguments). */
typedef void (*mf_redis_argv_fn)(void *ud, int argc, const char *const *argv,
                                 const size_t *lens);
bool mf__redis_read_command(const char *p, const char *end, size_t *at,
                            mf_redis_argv_fn fn, void *ud);
/* Writes one command at p (mf__redis_format_size bytes of room). */
void mf__redis_format_at(char *p, int argc, const char *const *argv,
                         const size_t *argvlen);
/* Appends one command in protocol form. 0 or MF_ENOMEM. */
int mf__redis_format(mf_loop_t *loop, mf_buf_t *out, int argc,
                     const char *const *argv, const size_t *argvlen);

/* ---- cluster slots (redis_slot.c) --------------------------------------- */

#define MF_REDIS_SLOTS 16384
#define MF_REDIS_SLOT_NONE (-1)    /* a command with no key */
#define MF_REDIS_SLOT_CROSS (-2)   /* keys in more than one slot */
#define MF_REDIS_SLOT_UNKNOWN (-3) /* a command whose keys we cannot find */

/* The slot of a key (its hash tag's when it has one). */
int mf__redis_key_slot(const char *key, size_t len);
/* The slot of a command's keys, or one of the MF_REDIS_SLOT_* above;
 * *readonly: the command only reads. */
int mf__redis_cmd_slot(int argc, const char *const *argv, const size_t *lens,
                       bool *readonly);
/* Calls fn with each key of a command, in order, until fn returns false;
 * false when the command's keys are unknown (not in the table). */
typedef bool (*mf_redis_key_fn)(void *ud, const char *key, size_t len);
bool mf__redis_cmd_keys(int argc, const char *const *argv, const size_t *lens,
                        mf_redis_key_fn fn, void *ud);

/* ---- the client's data (functions: redis_client.c) ----------------------- */

/* How the tasks of a client run: NULL for a single node (redis_task.c's
 * own); a cluster client's are redis_cluster.c's. */
typedef struct mf_redis_kind {
    const mf_task_ops_t *ops;
    const struct mf_redis_task_hooks *hooks;
    /* Connections opened for the client (a cluster: by its nodes). */
    uint64_t (*connects)(const struct mf_redis_client *client);
    /* The client whose node serves a sharded channel (SSUBSCRIBE). */
    struct mf_redis_client *(*shard_node)(struct mf_redis_client *client,
                                          const char *channel, size_t len);
} mf_redis_kind_t;

typedef struct mf_redis_cluster mf_redis_cluster_t;
typedef struct mf_redis_group mf_redis_group_t;

/* The data of a "redis" endpoint, keyed by the URL and the options. A
 * cluster client (the data of a "redis-cluster" endpoint) has cluster and
 * kind set, and no connection of its own: its tasks run on its nodes'
 * clients. */
struct mf_redis_client {
    const mf_redis_kind_t *kind; /* NULL: a single node */
    mf_redis_cluster_t *cluster;
    mf_redis_group_t *group;   /* its host names an upstream group */
    mf_redis_client_t *pubsub; /* cluster: the node client subscribers use */
    mf_endpoint_t *ep;         /* its dedicated connections and their waiters */
    mf_loop_t *loop;
    char *url;
    mf_redis_opts_t opts; /* ca_file points at ca_copy */
    char *ca_copy;
    char host[MF_DNS_MAX_HOST + 1];
    uint16_t port;
    bool tls;
    char *user; /* NULL: none */
    char *password;
    long db;
    mf_redis_conn_t **shared; /* opts.pipeline_connections slots */
    unsigned next_shared;
    mf_list_t subs; /* live subscribers */
    uint64_t connects;
    uint64_t writes;   /* writes of queued commands (mf_redis_clients_stats) */
    uint64_t commands; /* commands queued on its connections */
};

/* ---- the task's data (functions: redis_task.c) ------------------------- */

typedef enum mf_redis_phase {
    MF_RT_IDLE,
    MF_RT_WAITING, /* for a dedicated connection */
    MF_RT_QUEUED,  /* on a connection that is not ready yet */
    MF_RT_SENT,    /* commands in the output buffer or on the wire */
    MF_RT_DONE
} mf_redis_phase_t;

/* What a connection tells the tasks on its queue, through functions the
 * task kind puts in each task: the connection calls nothing above it. */
typedef struct mf_redis_task_hooks {
    /* One whole reply of t is in place (where mf__redis_task_slot said). */
    void (*reply)(mf_redis_task_t *t);
    /* t leaves its connection with (state, error); t->conn is NULL when the
     * connection is closing. */
    void (*end)(mf_redis_task_t *t, int state, int error);
    /* The connection's AUTH or SELECT was refused with this error reply
     * (end follows). */
    void (*refused)(mf_redis_task_t *t, const mf_redis_reply_t *reply);
} mf_redis_task_hooks_t;

struct mf_redis_task {
    mf_task_t base;
    const mf_redis_task_hooks_t *hooks;
    mf_redis_client_t *client;
    mf_buf_t cmds; /* the commands in protocol form */
    size_t ncmds;
    bool dedicated;      /* a command needs a connection of its own */
    bool forced;         /* mf_task_redis_set_dedicated */
    bool blocking;       /* BLPOP ...: no response timeout, only its own */
    bool dirty;          /* leaves the connection changed: close it after */
    bool in_multi;       /* MULTI without EXEC/DISCARD so far */
    bool watching;       /* WATCH without EXEC/DISCARD/UNWATCH so far */
    bool abandoned;      /* timed out or canceled with replies still due */
    bool overflow;       /* replies over max_reply */
    bool unformatted;    /* a command could not be copied (out of memory) */
    mf_redis_pin_t *pin; /* a session's task: its connection, no other */
    mf_redis_phase_t phase;
    mf_redis_conn_t *conn;
    mf_list_t link; /* conn->queue */
    size_t nread;   /* replies received */
    size_t nerrors; /* ... of which error replies */
    mf_redis_reply_t *replies;
    mf_redis_arena_t arena;
    const char *refusal; /* Redis's answer to a refused AUTH/SELECT (arena) */
    struct mf_redis_ctask *cl;  /* a cluster client's task: its routing */
    struct mf_redis_gtask *grp; /* a group client's task: its attempts */
    /* Last, left out of the task's zeroing: set up by the client's route
     * for a task that takes a dedicated connection, read only then. */
    mf_pwaiter_t waiter;
};

/* Where the next reply of the task goes (NULL: discard it). */
static inline mf_redis_reply_t *mf__redis_task_slot(mf_redis_task_t *t)
{
    if (t->abandoned || t->overflow || t->nread >= t->ncmds)
        return NULL;
    return &t->replies[t->nread];
}

/* ---- connection (redis_conn.c) ---------------------------------------- */

typedef enum mf_redis_conn_kind {
    MF_RCONN_SHARED,
    MF_RCONN_POOLED,
    MF_RCONN_SUB
} mf_redis_conn_kind_t;

typedef enum mf_redis_conn_state {
    MF_RCONN_OPENING, /* resolving, connecting, TLS */
    MF_RCONN_SETUP,   /* AUTH / SELECT written, replies due */
    MF_RCONN_READY,
    MF_RCONN_CLOSED
} mf_redis_conn_state_t;

/* What a connection tells whoever opened it (the client for a shared or
 * dedicated one, a subscriber for its own), registered at open. NULL
 * members: nothing to say. */
typedef struct mf_redis_conn_owner {
    /* A reply in the connection's scratch memory, valid during the call
     * (a subscriber's connection: every reply). */
    void (*message)(mf_redis_conn_t *conn, const mf_redis_reply_t *reply);
    /* Its AUTH or SELECT was refused with this error reply (closed next). */
    void (*refused)(mf_redis_conn_t *conn, const mf_redis_reply_t *reply);
    /* It is closing (error 0: on purpose or idle), before its tasks end:
     * forget it. */
    void (*closed)(mf_redis_conn_t *conn, int error);
} mf_redis_conn_owner_t;

struct mf_redis_conn {
    mf_pconn_t pc; /* dedicated: its place in the client's endpoint */
    mf_io_t io;
    mf_timer_t timer;  /* connect, then response, then idle */
    uint64_t timer_at; /* loop ms the timer fires at; 0: stopped */
    uint64_t due_ms;   /* ready: the response or idle deadline; 0: none */
    mf_loop_t *loop;
    mf_redis_client_t *client;          /* where to, how, and its counters */
    mf_redis_pin_t *pin;                /* the session holding it, if any */
    const mf_redis_conn_owner_t *owner; /* NULL: tell nobody (teardown) */
    void *owner_data;                   /* e.g. the subscriber */
    mf_redis_conn_kind_t kind;
    mf_redis_conn_state_t state;
    bool resolving;
    bool flush_pending;
    SSL *ssl;
    unsigned slot; /* shared: index in client->shared */
    unsigned setup_replies_left;
    mf_client_open_t opener; /* while opening */
    redisReader *reader;
    mf_redis_sink_t sink;
    mf_redis_arena_t scratch; /* AUTH/SELECT and pub/sub replies */
    mf_redis_reply_t scratch_root;
    mf_buf_t out;
    size_t out_done;
    mf_list_t queue; /* tasks whose replies are due, in order */
    mf_post_t flush_post;
    mf_post_t free_post;
    mf_dns_query_t dns;
};

/* A new connection of the client; it starts opening at once. owner (and
 * owner_data) hear from it until it closes. */
mf_redis_conn_t *mf__redis_conn_open(mf_redis_client_t *client,
                                     mf_redis_conn_kind_t kind,
                                     const mf_redis_conn_owner_t *owner,
                                     void *owner_data);
/* Queues the task's commands behind those already on the connection. */
void mf__redis_conn_attach(mf_redis_conn_t *conn, mf_redis_task_t *t);
/* Appends raw protocol bytes and schedules a write (pub/sub commands). */
void mf__redis_conn_send(mf_redis_conn_t *conn, const char *data, size_t len);
/* Closes the connection; tasks still on it end with (state, error). */
void mf__redis_conn_close(mf_redis_conn_t *conn, int state, int error);
/* Closes it telling nobody, its owner nor its tasks: they go with the loop
 * (teardown), or there are none (an idle one the pool dropped). */
void mf__redis_conn_drop(mf_redis_conn_t *conn);
/* A dedicated connection is taken by a task / put back. */
void mf__redis_conn_set_busy(mf_redis_conn_t *conn, bool busy);

/* ---- pub/sub (redis_sub.c) -------------------------------------------- */

struct mf_redis_subscriber {
    mf_list_t link; /* client->subs until its end is reported */
    mf_redis_client_t *client;
    mf_redis_conn_t *conn; /* NULL once closed */
    mf_redis_message_cb cb;
    void *user;
    bool closing;
    bool sharded; /* SSUBSCRIBE / SUNSUBSCRIBE */
    int error;
    char refusal[MF_REDIS_REFUSAL_MAX + 1]; /* the error reply that ended it */
    mf_post_t end_post; /* the final callback, never inside a call */
};

/* Frees a subscriber whose connection is gone (loop teardown). */
void mf__redis_sub_free(mf_redis_subscriber_t *sub);

/* ---- client (redis_client.c) ------------------------------------------ */

/* Gives the task a connection (shared or dedicated) or a place in line.
 * 0, or MF_EBUSY when the pool's line is full. */
int mf__redis_client_route(mf_redis_task_t *t);
/* The same on client c (a cluster's node) instead of t->client. */
int mf__redis_client_route_to(mf_redis_client_t *c, mf_redis_task_t *t);
/* The client of (url, opts) as mf_redis_client, opts complete. */
mf_redis_client_t *mf__redis_client_get(mf_loop_t *loop, const char *url,
                                        const mf_redis_opts_t *opts);
/* opts with their zero fields set to the defaults (in NULL: defaults). */
void mf__redis_opts_normalize(mf_redis_opts_t *o, const mf_redis_opts_t *in);

/* ---- upstream groups (redis_group.c) ------------------------------------ */

/* Makes c, whose URL's host is up's name, a group client: its tasks run on
 * the clients of the servers the group picks. */
void mf__redis_group_attach(mf_redis_client_t *c, mf_upstream_t *up);
void mf__redis_group_free(mf_redis_group_t *g);
/* The member client a session on keys opens on (picked by the first key;
 * no verdict reported): 0, MF_EINVAL (keys on two servers of a
 * consistent_hash group) or MF_ENOUPSTREAM. */
int mf__redis_group_session_node(mf_redis_client_t *front, int nkeys,
                                 const char *const *keys, const size_t *lens,
                                 mf_redis_client_t **node);

/* ---- cluster (redis_cluster.c) ------------------------------------------ */

/* The client of the master serving slot; NULL while no map was read. */
mf_redis_client_t *mf__redis_cluster_slot_client(mf_redis_client_t *front,
                                                 int slot);

/* ---- the task kind (redis_task.c), for the cluster ----------------------- */

/* The single-node task's reply hook and end (completes t). */
void mf__redis_task_on_reply(mf_redis_task_t *t);
void mf__redis_task_end(mf_redis_task_t *t, int state, int error);
/* The single-node task's refused hook: keeps Redis's words. */
void mf__redis_task_keep_refusal(mf_redis_task_t *t,
                                 const mf_redis_reply_t *reply);
/* t leaves its connection without completing: the connection goes back
 * (dedicated) or idles. */
void mf__redis_task_leave(mf_redis_task_t *t, bool reuse);
/* The single-node cancel and destroy. */
void mf__redis_task_cancel(mf_task_t *task);
void mf__redis_task_destroy(mf_task_t *task);
/* Replies of t's ncmds commands, zeroed, in its arena; 0 or MF_EMSGSIZE. */
int mf__redis_task_alloc_replies(mf_redis_task_t *t);
/* A dedicated connection is done with its task: back to the pool (the
 * next waiter, or idle) when reuse and it is sound, else closed. */
void mf__redis_client_release(mf_redis_conn_t *conn, bool reuse);
/* A task gave up while waiting for a dedicated connection. */
void mf__redis_client_unwait(mf_redis_task_t *t);
/* Asks the client's endpoint for a dedicated connection for w, whose
 * granted function gets it (a new one may still be opening); 0 or
 * MF_EBUSY. For a session: w is not a task's. */
int mf__redis_client_acquire(mf_redis_client_t *client, mf_pwaiter_t *w);

#endif /* MF_REDIS_INT_H */
