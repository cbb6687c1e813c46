/*
 * mysql_int.h — the MySQL client's structs, shared by the files of
 * core/mysql only:
 *   mysql_task.c     the task kind: dispatch, the phases, timeouts and
 *                    cancel, results and errors, sessions
 *   mysql_client.c   options; a client (one per URL and options) as the
 *                    data of its endpoint in the loop's endpoint pool, the
 *                    pool's MySQL ops, routing between pool, connections and
 *                    tasks (open for a waiter, reset before going back),
 *                    the KILL connection and its queue
 *   mysql_conn.c     a connection: resolve (net layer DNS), connect, the
 *                    operation runner over the connector's fn_start/fn_cont
 *                    pairs, COM_RESET_CONNECTION, idle watch, the KILL
 *                    statement, close, error mapping
 *
 * Calls go down that chain only: task → client → conn. Up, a connection
 * reports to its owner through conn->hooks (registered by the client) and
 * the client to a task through t->waiter.ops (registered by the task).
 *   mysql_query.c    the text-protocol query phase (stored results)
 *   mysql_mem.c      task memory (an arena over the loop's free lists)
 *   mysql_quote.c    mf_mysql_quote
 *   mysql_stmt.c     the prepared-statement phase and the per-connection
 *                    statement cache
 *   mysql_stream.c   the streaming phase (batches, text and prepared)
 *
 * The plan.
 *
 * A task's run is a small state machine:
 *
 *   dispatch → ACQUIRE (a session's pinned connection, or the endpoint
 *   pool: an idle one, a new one opened for the task, or the wait queue;
 *   a wait for a connection being reset counts that one) → [the connection
 *   was reset before it went back if its last user left session state
 *   behind] → QUERY (t->phase->run) →
 *   the phase calls mf__mysql_task_finish(t, state, error) → the connection
 *   goes back (idle, reset, or closed if broken) → mf_task_complete.
 *
 * The query phase is an ops table (mf_mysql_phase_t) chosen at dispatch:
 * streaming asked → mf__mysql_stream_phase (mysql_stream.c); parameters
 * bound → mf__mysql_stmt_phase (mysql_stmt.c); otherwise the text phase
 * (mysql_query.c). A phase only talks to the connector through the
 * operation runner (mf__mysql_conn_run), keeps its results in task memory
 * (mf__mysql_task_alloc / mf__mysql_task_add_set) and ends once with
 * mf__mysql_task_finish or mf__mysql_task_fail_conn.
 *
 * The operation runner. Every connector call that may wait is a pair
 * fn_start(&ret, ...) / fn_cont(&ret, ..., ready). A step function wraps one
 * pair: step(conn, 0) calls the _start, step(conn, ready) the _cont, both
 * return the connector's wait mask (0: finished; the return value is in
 * conn->ret). The runner maps MYSQL_WAIT_READ/WRITE to the connection's
 * mf_io_t and MYSQL_WAIT_TIMEOUT to its op timer
 * (mysql_get_timeout_value_ms), calls the step again when the loop reports
 * readiness, and when the mask is 0 calls done(conn). done may start the
 * next operation: the runner loops instead of recursing, so a result read
 * row by row never grows the stack.
 *
 * Timeouts and cancel. opts.query_timeout_ms (a task timer armed when the
 * query phase starts) and the engine's per-task timeout (cancel) end the
 * same way: a task on a connection mid-query gets its connection KILLed on
 * the server (a short-lived extra connection sends KILL CONNECTION <thread
 * id>, which ends the statement and its connection), the connection is
 * closed on our side, and the task fails MF_STATE_TIMEOUT/MF_ETIMEDOUT (or
 * CANCELED). A phase with resources of its own releases them in
 * phase->abort before the connection closes.
 *
 * The statement cache. A connection has one opaque slot for the prepared
 * statement cache (conn->stmt_cache) and a hook the statement code sets
 * (conn->stmt_cache_drop): the connection calls it before COM_RESET_CONNECTION
 * (which deallocates the server's statements) and before it closes, so the
 * cache never outlives its statements.
 *
 * Ownership: the loop's endpoint pool owns the endpoints and, through
 * ops->free_data, their clients; the pool links the pooled connections
 * and the waiters, the client closes its connections (the pool's close op
 * for those the pool drops) and owns the KILL ones and live sessions. A
 * task is owned by its series; while it runs
 * a connection points at it (conn->task) and it at the connection
 * (t->conn). Connection memory goes back from a deferred post, never inside
 * one of its own callbacks. Task results (MYSQL_RES kept whole, value
 * arrays, copies) live in the task's arena until the task is destroyed.
 */
#ifndef MF_MYSQL_INT_H
#define MF_MYSQL_INT_H

#include <stddef.h>

#include <mariadb_ctype.h>
#include <mysql.h>

#include "moonflow/dns.h"
#include "moonflow/endpoint.h"
#include "moonflow/mysql.h"
#include "moonflow/upstream.h"

typedef struct mf_mysql_conn mf_mysql_conn_t;
typedef struct mf_mysql_task mf_mysql_task_t;

/* A server's or connector's message is kept up to this many bytes. */
#define MF_MYSQL_MESSAGE_MAX 512

/* ---- task memory (mysql_mem.c) -------------------------------------------
 * A chain of chunks from the loop's free lists (big pieces from a checked
 * malloc); nothing moves once placed. Over the limit: NULL. */
typedef struct mf_mysql_chunk mf_mysql_chunk_t;
typedef struct mf_mysql_arena {
    mf_mysql_chunk_t *head;
    size_t left;    /* free bytes at the end of head */
    uint64_t total; /* bytes handed out */
    uint64_t limit; /* 0: none */
} mf_mysql_arena_t;

void mf__mysql_arena_init(mf_mysql_arena_t *a, uint64_t limit);
void *mf__mysql_arena_alloc(mf_loop_t *loop, mf_mysql_arena_t *a, size_t size);
/* Counts bytes held elsewhere (a MYSQL_RES) against the limit: 0 or
 * MF_EMSGSIZE. */
int mf__mysql_arena_charge(mf_mysql_arena_t *a, uint64_t size);
void mf__mysql_arena_release(mf_loop_t *loop, mf_mysql_arena_t *a);

/* ---- client and pool (mysql_client.c) ----------------------------------- */

typedef enum mf_mysql_ssl {
    MF_MYSQL_SSL_DISABLED,
    MF_MYSQL_SSL_PREFERRED,
    MF_MYSQL_SSL_REQUIRED,
    MF_MYSQL_SSL_VERIFY_CA,
    MF_MYSQL_SSL_VERIFY_IDENTITY
} mf_mysql_ssl_t;

/* What a URL says (strings owned, NUL-terminated; NULL when absent). */
typedef struct mf_mysql_endpoint {
    char host[MF_DNS_MAX_HOST + 1]; /* "" with a unix socket */
    uint16_t port;
    char *socket_path;
    char *user;
    char *password;
    char *db;
    char *charset; /* default "utf8mb4" */
    char *ca;
    mf_mysql_ssl_t ssl;
    uint32_t connect_timeout_ms; /* 0: not in the URL */
} mf_mysql_endpoint_t;

/* 0 or MF_EINVAL; ep is zeroed first and owns what it got even on failure
 * (mf__mysql_endpoint_free). */
int mf__mysql_endpoint_parse(mf_mysql_endpoint_t *ep, const char *url);
void mf__mysql_endpoint_free(mf_mysql_endpoint_t *ep);

/* A task's place in the pool: in the endpoint's wait queue, or waiting for
 * the connection opened for it. The task embeds it and registers ops, the
 * only way the client calls up into the task. */
typedef struct mf_mysql_waiter mf_mysql_waiter_t;
typedef struct mf_mysql_waiter_ops {
    /* conn (busy, open, clean) is the waiter's now. */
    void (*granted)(mf_mysql_waiter_t *w, mf_mysql_conn_t *conn);
    /* No connection for the waiter: the one opened for it failed
     * (code/sqlstate/message: the connector's or our words, code 0 when
     * none). */
    void (*failed)(mf_mysql_waiter_t *w, int state, int error, unsigned code,
                   const char *sqlstate, const char *message);
} mf_mysql_waiter_ops_t;

struct mf_mysql_waiter {
    mf_pwaiter_t pw;
    mf_mysql_conn_t *opening; /* the connection opened for it, not open yet */
    const mf_mysql_waiter_ops_t *ops;
};

/* The endpoint data of one URL and options (mf_endpoint_data of pool):
 * what the pool does not know about MySQL. The endpoint pool holds the
 * pooled connections, idle and busy, and the waiters. */
struct mf_mysql_client {
    mf_endpoint_t *pool; /* whose data this is */
    mf_loop_t *loop;
    char *url;
    mf_mysql_opts_t opts; /* zeros replaced by defaults */
    mf_mysql_endpoint_t ep;
    const MARIADB_CHARSET_INFO *charset_info; /* of ep.charset */
    bool no_backslash_escapes; /* learned from a connection's status */
    bool quoter_ready;
    MYSQL quoter;       /* never connects: mf_mysql_quote's charset and mode */
    mf_list_t killers;  /* the KILL connection in flight (not pooled) */
    mf_list_t sessions; /* open sessions */
    mf_list_t pipes;    /* its pipelines (mysql_pipeline.c), kept for reuse */
    unsigned npipes;
    /* Thread ids waiting for the KILL connection, which sends one KILL at
     * a time: a burst of timeouts or cancels queues here instead of
     * opening a connection each (that could take the server past its
     * max_connections). A ring of kill_cap ids (twice the pool), allocated
     * at the first queued kill. */
    unsigned long *kill_ids;
    unsigned kill_head, nkill_ids, kill_cap;
    unsigned nopening; /* pooled connections not open yet */
    unsigned nbound;   /* waiters whose connection is being opened */
    uint64_t connects; /* connections that opened */
};

/* Readies a task's waiter (once, at its creation). */
void mf__mysql_waiter_init(mf_mysql_waiter_t *w,
                           const mf_mysql_waiter_ops_t *ops);
/* Gives the waiter a connection: an idle one (w->ops->granted before
 * returning), a new one opened for it, or a place in the wait queue. 0, or
 * MF_EBUSY when the queue is full (nothing called). */
int mf__mysql_client_acquire(mf_mysql_client_t *c, mf_mysql_waiter_t *w);
/* A waiting waiter gives up (timeout, cancel). */
void mf__mysql_client_unwait(mf_mysql_waiter_t *w);
/* The user (task or session) is done with a pooled connection: closed if
 * broken, reset first if dirty, then the oldest waiter's or idle. */
void mf__mysql_client_release(mf_mysql_conn_t *conn);
/* Ends whatever runs on a pooled connection: KILL its thread on the server
 * from the KILL connection, and close it. */
void mf__mysql_client_kill(mf_mysql_conn_t *conn);

/* mysql_quote.c: the quoting handle of a client, and what a connection's
 * server status teaches it (NO_BACKSLASH_ESCAPES). */
void mf__mysql_quoter_init(mf_mysql_client_t *client);
void mf__mysql_quoter_close(mf_mysql_client_t *client);
void mf__mysql_client_learn_status(mf_mysql_client_t *client, unsigned status);

/* ---- connection (mysql_conn.c) ------------------------------------------ */

typedef enum mf_mysql_conn_state {
    MF_MCONN_RESOLVING,
    MF_MCONN_CONNECTING, /* TCP, TLS and authentication */
    MF_MCONN_OPEN,       /* idle or busy: the pool knows which */
    MF_MCONN_RESETTING,  /* COM_RESET_CONNECTION before going back */
    MF_MCONN_KILLING,    /* a KILL connection sending its statement */
    MF_MCONN_CLOSED      /* memory goes back from free_post */
} mf_mysql_conn_state_t;

/* One connector call pair; see "the operation runner" above. */
typedef int (*mf_mysql_step_fn)(mf_mysql_conn_t *conn, int ready);
typedef void (*mf_mysql_done_fn)(mf_mysql_conn_t *conn);

/* What a connection reports up to its owner (the client), which registers
 * them when it creates the connection; the connection never closes itself:
 * its owner decides. */
typedef struct mf_mysql_conn_hooks {
    /* Connected, authenticated, TLS as asked. */
    void (*opened)(mf_mysql_conn_t *conn);
    /* Did not open: code/sqlstate/message explain why. */
    void (*open_failed)(mf_mysql_conn_t *conn, int state, int error,
                        unsigned code, const char *sqlstate,
                        const char *message);
    /* mf__mysql_conn_reset ended: ok, or the connection is broken. */
    void (*reset_done)(mf_mysql_conn_t *conn, bool ok);
    /* mf__mysql_conn_send_kill ended; sound: the connection can send
     * another. */
    void (*kill_done)(mf_mysql_conn_t *conn, bool sound);
} mf_mysql_conn_hooks_t;

struct mf_mysql_conn {
    MYSQL mysql;
    mf_pconn_t pconn; /* the pool's part (not for a KILL connection) */
    mf_io_t io;
    mf_timer_t op_timer;      /* MYSQL_WAIT_TIMEOUT of the running step */
    mf_timer_t connect_timer; /* opts.connect_timeout_ms */
    uint64_t parked_ms;       /* loop time when last parked idle */
    mf_loop_t *loop;
    mf_mysql_client_t *client;
    const mf_mysql_conn_hooks_t *hooks;
    mf_mysql_conn_state_t state;
    bool broken;           /* never handed out again */
    bool dirty;            /* reset before its next user */
    bool in_runner;        /* the runner's loop is on the stack */
    bool resolving;        /* its DNS callback is still due */
    mf_mysql_step_fn step; /* the running operation, NULL when none */
    mf_mysql_done_fn done;
    union { /* the running operation's return value */
        int i;
        my_bool b;
        MYSQL *mysql;
        MYSQL_RES *res;
        MYSQL_ROW row;
    } ret;
    void *op_obj;       /* what the step works on (a MYSQL_STMT, a MYSQL_RES) */
    const char *op_sql; /* the text a query step sends */
    size_t op_len;
    unsigned long thread_id; /* the server's id, for KILL */
    unsigned long kill_id;   /* a KILL connection: whom to kill */
    char kill_sql[48];
    char addr[64]; /* the numeric address the connector connects to */
    /* The server it dials: the URL's, an upstream group's pick, or (a KILL
     * connection) its target's. host "" until the connect starts. */
    char host[MF_UPSTREAM_HOST_MAX + 1];
    uint16_t port;
    /* A connection to a group's name: its attempts (loop memory, freed
     * with it); NULL otherwise. */
    mf_upstream_try_t *ups;
    mf_post_t retry_post; /* the next server, out of the connector's call */
    mf_mysql_waiter_t *opener;   /* the waiter it is being opened for */
    mf_mysql_task_t *task;       /* the task it serves, if any */
    mf_mysql_session_t *session; /* the session it is pinned to */
    void *stmt_cache;            /* mysql_stmt.c's, per connection */
    void (*stmt_cache_drop)(mf_mysql_conn_t *conn); /* frees stmt_cache */
    /* A pipeline drives the socket itself between connector operations:
     * socket events while no step runs go to raw_io (raw_user: the
     * pipeline). */
    void (*raw_io)(mf_mysql_conn_t *conn, unsigned events);
    void *raw_user;
    mf_list_t link; /* client->killers for a KILL connection */
    mf_post_t free_post;
    mf_dns_query_t dns;
};

/* A new connection of client, not open yet: nothing runs until
 * mf__mysql_conn_connect. hooks: its owner's. */
mf_mysql_conn_t *mf__mysql_conn_create(mf_mysql_client_t *client,
                                       const mf_mysql_conn_hooks_t *hooks);
/* Resolves and connects; ends with hooks->opened or hooks->open_failed
 * (possibly before returning). */
void mf__mysql_conn_connect(mf_mysql_conn_t *conn);
/* Whether it connected (RESOLVING and CONNECTING are not). */
bool mf__mysql_conn_is_open(const mf_mysql_conn_t *conn);
/* Starts one operation on the connection (see the runner above). */
void mf__mysql_conn_run(mf_mysql_conn_t *conn, mf_mysql_step_fn step,
                        mf_mysql_done_fn done);
/* COM_RESET_CONNECTION (the statement cache dropped first); ends with
 * hooks->reset_done. */
void mf__mysql_conn_reset(mf_mysql_conn_t *conn);
/* Sends KILL CONNECTION id; ends with hooks->kill_done. */
void mf__mysql_conn_send_kill(mf_mysql_conn_t *conn, unsigned long id);
/* Closes the connection now (an operation in flight is cut off); its memory
 * goes back later. Its owner took it out of the pool first. */
void mf__mysql_conn_close(mf_mysql_conn_t *conn);
/* The connection is about to go idle: the watch is for the server's close
 * only, and the time is noted for mf__mysql_conn_alive. */
void mf__mysql_conn_park(mf_mysql_conn_t *conn);
/* Whether an idle connection's socket is still quiet: the server's close
 * (a restart, KILL) may be waiting unseen in this loop pass. */
bool mf__mysql_conn_alive(const mf_mysql_conn_t *conn);
/* Whether the connector's last error means the connection is unusable. */
bool mf__mysql_conn_error_is_fatal(unsigned code);
/* (state, error) for a connector or server error number. */
void mf__mysql_error_map(unsigned code, const char *message, int *state,
                         int *error);

/* ---- task (mysql_task.c) ------------------------------------------------- */

/* One result set (or OK packet) of a task. pub is what mysql.h shows. */
typedef struct mf_mysql_set {
    mf_mysql_result_t pub;
    MYSQL_RES *res; /* kept until the task is destroyed (NULL: none) */
} mf_mysql_set_t;

/* A query phase; see "the plan" above. */
typedef struct mf_mysql_phase {
    const char *name;
    /* Runs on t->conn (busy, open); ends with mf__mysql_task_finish or
     * mf__mysql_task_fail_conn. */
    void (*run)(mf_mysql_task_t *t);
    /* The task ends early (timeout, cancel) while the phase runs: drop what
     * refers to the connection; it is killed and closed next. May be NULL. */
    void (*abort)(mf_mysql_task_t *t);
    /* The task is destroyed: free what the phase kept. May be NULL. */
    void (*release)(mf_mysql_task_t *t);
} mf_mysql_phase_t;

extern const mf_mysql_phase_t mf__mysql_text_phase;   /* mysql_query.c */
extern const mf_mysql_phase_t mf__mysql_stmt_phase;   /* mysql_stmt.c */
extern const mf_mysql_phase_t mf__mysql_stream_phase; /* mysql_stream.c */

typedef enum mf_mysql_task_step {
    MF_MT_IDLE,
    MF_MT_WAITING, /* for a connection: t->waiter */
    MF_MT_QUEUED,  /* behind another task of its session */
    MF_MT_QUERY,   /* its phase runs on t->conn */
    MF_MT_PIPED,   /* queued on or in flight in t->pipe */
    MF_MT_DONE
} mf_mysql_task_step_t;

struct mf_mysql_task {
    mf_task_t base;
    mf_mysql_client_t *client;
    mf_mysql_session_t *session;
    mf_mysql_conn_t *conn;
    struct mf_mysql_pipe *pipe; /* MF_MT_PIPED: its pipeline */
    const mf_mysql_phase_t *phase;
    mf_mysql_task_step_t step;
    mf_mysql_waiter_t waiter; /* its place in the pool */
    mf_list_t link;           /* session->queue */
    mf_timer_t timer;         /* wait timeout, then query timeout */
    char *sql;                /* arena copy, NUL-terminated */
    size_t sql_len;
    bool bound;    /* mf_task_mysql_bind was called */
    bool invalid;  /* a bad argument: fails with EINVAL */
    bool overflow; /* results over opts.max_result */
    bool unstored; /* the query or a parameter could not be copied */
    size_t nparams;
    mf_mysql_param_t *params; /* arena copies (strings too) */
    size_t batch_rows;        /* > 0: streaming */
    mf_mysql_batch_cb on_batch;
    void *batch_user;
    void *phase_data; /* the phase's own state */
    mf_mysql_set_t *sets;
    size_t nsets, sets_cap;
    mf_mysql_error_t err;
    /* Why it never got a connection (mf_task_mysql_pool_error); "": it
     * did, or failed otherwise. */
    char pool_why[80];
    mf_mysql_arena_t arena; /* everything above that the task allocates */
};

static inline mf_mysql_task_t *mf__mysql_task_of(const mf_task_t *task)
{
    return (mf_mysql_task_t *)(void *)task;
}

/* Task memory; NULL (and t->overflow) when over opts.max_result. */
void *mf__mysql_task_alloc(mf_mysql_task_t *t, size_t size);
/* Room for one more row in r: its rows array (*rows, *cap places, the
 * caller's) doubled in task memory when full, r->rows pointed at it. 0, or
 * -1 when over opts.max_result. */
int mf__mysql_task_row_room(mf_mysql_task_t *t, mf_mysql_result_t *r,
                            mf_mysql_value_t ***rows, size_t *cap);
/* A new zeroed result set at the end of the task's results; NULL when over
 * opts.max_result. */
mf_mysql_set_t *mf__mysql_task_add_set(mf_mysql_task_t *t);
/* Keeps the explanation of a failure (message cut at MF_MYSQL_MESSAGE_MAX). */
void mf__mysql_task_keep_error(mf_mysql_task_t *t, unsigned code,
                               const char *sqlstate, const char *message);
/* The query phase ends: the connection goes back; the task completes. */
void mf__mysql_task_finish(mf_mysql_task_t *t, int state, int error);
/* A pipelined task ends (mysql_pipeline.c): the server status its last
 * packet carried is learned, the task completes. */
void mf__mysql_task_piped_done(mf_mysql_task_t *t, unsigned status, int state,
                               int error);
/* The connector failed on t->conn: keeps its code/SQLSTATE/message, maps it
 * to (state, error), marks the connection broken when the code says the
 * connection is gone, and finishes. */
void mf__mysql_task_fail_conn(mf_mysql_task_t *t);

/* ---- pipelines (mysql_pipeline.c) ------------------------------------------
 * See mysql_pipeline.h. */
/* Whether t goes through a pipeline: a prepared statement of its own (no
 * session, no stream) on a client with pipeline > 1 and no TLS. */
bool mf__mysql_pipe_wants(const mf_mysql_task_t *t);
/* Queues t on a pipeline of its client (t->step becomes MF_MT_PIPED, or
 * the task completes at once with EBUSY). */
void mf__mysql_pipe_submit(mf_mysql_task_t *t);
/* t ends early (timeout, cancel): taken off its queue, or, when already
 * written, its reply is read and dropped when it comes. */
void mf__mysql_pipe_abandon(mf_mysql_task_t *t);
/* Frees the client's pipelines (the pool closed their connections). */
void mf__mysql_pipes_free(mf_mysql_client_t *c);

/* ---- sessions (mysql_task.c) --------------------------------------------- */

struct mf_mysql_session {
    mf_list_t link; /* client->sessions */
    mf_mysql_client_t *client;
    mf_mysql_conn_t *conn; /* pinned once its first task got one */
    mf_mysql_task_t *running;
    mf_list_t queue; /* tasks started behind the running one */
    bool closed;
    bool broken;
    bool advancing; /* mf__mysql_session_next is on the stack */
    bool again;     /* ... and its task ended at once: run the next */
};

/* The running task of the session ended: the next queued one runs, or the
 * connection goes back when the session is closed. */
void mf__mysql_session_next(mf_mysql_session_t *s);

/* ---- text results (mysql_query.c) --------------------------------------- */

/* Fills set->pub from a stored MYSQL_RES (values typed per mysql.h, text
 * pointing into the result's rows); 0 or MF_EMSGSIZE. */
int mf__mysql_set_from_res(mf_mysql_task_t *t, mf_mysql_set_t *set,
                           MYSQL_RES *res);
/* Fills the OK-packet fields of set->pub from the connection. */
void mf__mysql_set_counts(mf_mysql_set_t *set, MYSQL *mysql);
/* The step that sends conn->op_sql and reads its first result's header
 * (mysql_real_query); the streaming phase starts with it too. */
int mf__mysql_step_query(mf_mysql_conn_t *conn, int ready);
/* Whether a column of this MYSQL_TYPE_* holds an integer (MF_MYSQL_INT or
 * MF_MYSQL_UINT by its UNSIGNED flag), for both protocols. */
bool mf__mysql_type_is_integer(unsigned type);
/* The value of one text-protocol column (type from field). */
void mf__mysql_text_value(mf_mysql_value_t *v, const MYSQL_FIELD *field,
                          const char *data, unsigned long len);

#endif /* MF_MYSQL_INT_H */
