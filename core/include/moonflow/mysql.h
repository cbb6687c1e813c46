/*
 * moonflow/mysql.h — the MySQL/MariaDB client as a task kind, over
 * mariadb-connector-c's non-blocking API: every wait of the connector (a
 * socket read or write, a timeout) is an event on the loop; no call ever
 * blocks a loop thread.
 *
 *   int err;
 *   mf_mysql_client_t *db = mf_mysql_client(loop,
 *       "mysql://app:secret@127.0.0.1:3306/shop", NULL, &err);
 *   mf_task_t *t = mf_task_mysql_create(db, cb, user);
 *   mf_task_mysql_set_query(t, "SELECT name FROM users WHERE id = ?", 0);
 *   mf_mysql_param_t id = MF_MYSQL_INT(42);
 *   mf_task_mysql_bind(t, 1, &id);          // a server-side prepared statement
 *   mf_series_push_back(series, t);          // or mf_task_start(t)
 *   ... in cb: const mf_mysql_result_t *r = mf_task_mysql_result(t, 0);
 *              r->rows[0][0].s (r->nfields values per row)
 *
 * Endpoints:
 *   mysql://[user[:password]@]host[:port][/db][?key=value&...]
 *   mysql://[user[:password]@]unix:/path/to/socket[:/db][?...]
 * The second form is a local socket ("unix:" not followed by '/' is a host
 * named unix). host is a name of letters, digits, '-', '.' and '_'
 * (resolved by the net layer's DNS, never by the connector), an IPv4
 * address or [IPv6]; port defaults to 3306; user, password and db are
 * %-decoded. Query keys: charset (default utf8mb4), connect_timeout (ms),
 * ssl=disabled|preferred|required|verify_ca|verify_identity (default
 * disabled; required and up fail when the server offers no TLS), ca (a CA
 * file for verify_ca/verify_identity). An unknown key or a bad value makes
 * the URL malformed.
 *
 * The pool. A client is one endpoint on one loop (a worker): at most
 * opts.max_connections connections. A task takes an idle connection, or
 * opens one while the pool has room, or waits in a queue of at most
 * opts.max_waiters tasks for opts.wait_timeout_ms; past either bound it
 * fails at once (never piles up connections). A connection that broke
 * (server gone, KILL, protocol error, a task timeout) is closed, never handed
 * out again; one whose session state a task may have changed (a session that
 * ran SET, a transaction, temporary tables, GET_LOCK) is reset with
 * COM_RESET_CONNECTION before its next use. Idle connections close after
 * opts.idle_timeout_ms.
 *
 * Pipelining. With opts.pipeline = N > 1, the prepared statements of tasks
 * outside sessions (not streamed) share the client's connections: up to N
 * COM_STMT_EXECUTE packets are written on one before their replies are
 * read, in order. A statement's error fails that task alone; a connection
 * that breaks fails exactly the statements in flight or queued on it
 * (MF_ECONNRESET, 2013), none is sent again. A client with TLS never
 * pipelines. query_timeout_ms counts from the task's start; a pipelined
 * statement past it completes with MF_ETIMEDOUT, its reply dropped.
 *
 * A task runs one query string (several statements separated by ';' are
 * allowed: one result per statement), or, once parameters are bound, one
 * prepared statement executed with them (prepared on the connection the first
 * time, then taken from that connection's LRU cache of opts.stmt_cache
 * statements). Results are stored whole in the task's memory, unless the
 * task streams (mf_task_mysql_stream): then rows come in batches and the
 * socket is not read while a batch is being consumed.
 *
 * Values (mf_mysql_value_t) are typed the same way for both protocols:
 *   NULL                      MF_MYSQL_NULL
 *   TINYINT..BIGINT, YEAR     MF_MYSQL_INT (signed) / MF_MYSQL_UINT (UNSIGNED)
 *   FLOAT, DOUBLE             MF_MYSQL_DOUBLE
 *   everything else           MF_MYSQL_TEXT: the server's text form
 *                             (DECIMAL exact, DATE/TIME/DATETIME(6) as
 *                             'YYYY-MM-DD HH:MM:SS.ffffff', JSON, BIT, strings
 *                             and BLOBs, binary-safe: may hold NUL bytes)
 * and text values are NUL-terminated after their len bytes.
 *
 * Failures come back in the task's completion, never from the factory:
 *   name does not resolve          MF_STATE_DNS_ERROR      / MF_EDNS
 *   refused, reset, server gone    MF_STATE_SYS_ERROR      / MF_ECONNREFUSED,
 *                                  MF_ECONNRESET, MF_ECLOSED ...
 *   TLS required and not offered,
 *   handshake or verification      MF_STATE_TLS_ERROR      / MF_ETLS
 *   bad credentials, unknown db    MF_STATE_TASK_ERROR     / MF_EACCES
 *   the server refused a statement MF_STATE_TASK_ERROR     / MF_ESQL
 *   connect timeout, task timeout  MF_STATE_TIMEOUT        / MF_ETIMEDOUT
 *     (a query past its timeout is killed on the server with KILL and its
 *      connection closed: nothing is left running; a canceled task's
 *      stored query outside a session runs on to its end within
 *      query_timeout_ms and keeps its connection, other canceled ones
 *      are killed)
 *   no connection within
 *   wait_timeout_ms                MF_STATE_TIMEOUT        / MF_ETIMEDOUT
 *   wait queue full                MF_STATE_TASK_ERROR     / MF_EBUSY
 *   result over opts.max_result    MF_STATE_TASK_ERROR     / MF_EMSGSIZE
 *   task with no query, bad bind   MF_STATE_TASK_ERROR     / MF_EINVAL
 * Every failure that the server or the connector explained keeps its words:
 * mf_task_mysql_error() gives the server's error number, SQLSTATE and message
 * ("1062", "23000", "Duplicate entry 'x' for key 'PRIMARY'"), or the
 * connector's ("2013", "HY000", "Lost connection to server during query").
 * A statement error in a multi-statement query keeps the results of the
 * statements before it.
 *
 * Threads: everything here runs on the loop's thread. Ownership: a client
 * belongs to its loop (freed with it); a task copies its query and its
 * parameters; results live in the task's memory until the task is destroyed
 * after its callback; a session belongs to its caller until closed.
 */
#ifndef MOONFLOW_MYSQL_H
#define MOONFLOW_MYSQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "task.h"

MF_EXTERN_C_BEGIN

typedef struct mf_mysql_client mf_mysql_client_t;
typedef struct mf_mysql_session mf_mysql_session_t;

typedef struct mf_mysql_opts {
    uint32_t connect_timeout_ms; /* TCP + TLS + auth; default 5000 (the URL's
                                    connect_timeout wins) */
    uint32_t query_timeout_ms;   /* a task's query, sent → last row; default
                                    30000; 0: none */
    uint32_t idle_timeout_ms;    /* an idle pooled connection; default 60000 */
    unsigned max_connections;    /* per loop; default 16 */
    unsigned max_waiters;        /* tasks waiting for a connection; default
                                    1024 */
    uint32_t wait_timeout_ms;    /* a task's wait for a connection; default
                                    5000 */
    unsigned stmt_cache;         /* prepared statements kept per connection,
                                    least recently used out; default 64 */
    uint64_t max_result;         /* bytes of one task's stored results;
                                    default 512 MiB */
    unsigned pipeline;           /* prepared statements in flight per
                                    connection (see "Pipelining" below);
                                    default 1: none pipelined */
} mf_mysql_opts_t;

/* The deepest pipeline a client takes (opts.pipeline). */
#define MF_MYSQL_PIPELINE_MAX 4096

MF_API void mf_mysql_opts_init(mf_mysql_opts_t *opts);

/* The loop's client for url (opts NULL: defaults). The same url and opts on
 * the same loop give the same client, so calling this per request is cheap.
 * NULL with *error = MF_EINVAL for a malformed URL. */
MF_API mf_mysql_client_t *mf_mysql_client(mf_loop_t *loop, const char *url,
                                          const mf_mysql_opts_t *opts,
                                          int *error);
/* Connections this client opened so far, and open now (tests observe the
 * pool with them). */
MF_API uint64_t mf_mysql_client_connects(const mf_mysql_client_t *client);

/* One client of a loop (a URL and its options) as its pool is now. */
typedef struct mf_mysql_client_stats {
    const char *host; /* or the unix socket's path; valid during the call */
    uint16_t port;
    const char *db;       /* "" without one */
    unsigned connections; /* pooled, opening included */
    size_t idle;          /* kept for the next query */
    unsigned waiters;     /* tasks waiting for a connection */
    uint64_t connects;    /* connections opened */
    uint64_t evictions;   /* idle ones closed: timed out, or by the server */
} mf_mysql_client_stats_t;
typedef void (*mf_mysql_client_stats_fn)(void *ud,
                                         const mf_mysql_client_stats_t *st);
/* Calls fn for each MySQL client of the loop. Loop thread. */
MF_API void mf_mysql_clients_stats(mf_loop_t *loop, mf_mysql_client_stats_fn fn,
                                   void *ud);
MF_API unsigned mf_mysql_client_open(const mf_mysql_client_t *client);

/* Writes s as a quoted SQL string literal ('...', with the quotes) for the
 * client's charset, escaping as the server expects (backslashes, or doubled
 * quotes under NO_BACKSLASH_ESCAPES when a connection reported it). out has
 * room for 2 * len + 3 bytes; returns the length written (NUL-terminated). */
MF_API size_t mf_mysql_quote(const mf_mysql_client_t *client, char *out,
                             const char *s, size_t len);

/* ---- parameters and values -------------------------------------------- */

typedef enum mf_mysql_type {
    MF_MYSQL_NULL,
    MF_MYSQL_INT,    /* i */
    MF_MYSQL_UINT,   /* u */
    MF_MYSQL_DOUBLE, /* d */
    MF_MYSQL_TEXT,   /* s, len: a string, DECIMAL, date, JSON ... */
    MF_MYSQL_BLOB    /* s, len: parameters only: sent as binary data */
} mf_mysql_type_t;

typedef struct mf_mysql_value {
    mf_mysql_type_t type;
    size_t len; /* TEXT, BLOB */
    union {
        int64_t i;
        uint64_t u;
        double d;
        const char *s;
    };
} mf_mysql_value_t;

typedef mf_mysql_value_t mf_mysql_param_t;

#define MF_MYSQL_INT(v) ((mf_mysql_param_t){.type = MF_MYSQL_INT, .i = (v)})
#define MF_MYSQL_TEXTN(p, n) \
    ((mf_mysql_param_t){.type = MF_MYSQL_TEXT, .len = (n), .s = (p)})

/* One column of a result. type is the server's (MYSQL_TYPE_* of
 * <mariadb/mysql.h>: 3 LONG, 8 LONGLONG, 246 NEWDECIMAL, 12 DATETIME ...);
 * flags its column flags (UNSIGNED_FLAG 32, BINARY_FLAG 128 ...). */
typedef struct mf_mysql_field {
    const char *name;
    size_t name_len;
    const char *table; /* "" for expressions */
    unsigned type;
    unsigned flags;
    unsigned decimals;
    unsigned charsetnr; /* 63: binary */
} mf_mysql_field_t;

/* One statement's result: rows (possibly none) or, for a statement that
 * returns none, the OK packet's counts. */
typedef struct mf_mysql_result {
    unsigned nfields;
    const mf_mysql_field_t *fields;
    size_t nrows;
    const mf_mysql_value_t *const *rows; /* rows[r][c], c < nfields */
    uint64_t affected_rows;
    uint64_t insert_id;
    unsigned warnings;
    unsigned server_status; /* SERVER_STATUS_* bits */
} mf_mysql_result_t;

/* ---- the task ----------------------------------------------------------- */

MF_API mf_task_t *mf_task_mysql_create(mf_mysql_client_t *client, mf_task_cb cb,
                                       void *user);
/* The SQL (copied; len 0: strlen). Several statements are allowed unless
 * parameters are bound. */
MF_API int mf_task_mysql_set_query(mf_task_t *task, const char *sql,
                                   size_t len);
/* Binds n parameters (copied) to the query's '?' markers: the task runs a
 * prepared statement. n must match the statement's markers (MF_EINVAL in
 * the completion otherwise). */
MF_API int mf_task_mysql_bind(mf_task_t *task, size_t n,
                              const mf_mysql_param_t *params);
/* Runs the task on the session's connection (see below). */
MF_API void mf_task_mysql_set_session(mf_task_t *task,
                                      mf_mysql_session_t *session);

/* Streaming: the task stores at most batch_rows rows at a time; each batch
 * calls on_batch(task, result, user) with the rows so far (result->nrows of
 * them) and reading stops until mf_task_mysql_next_batch(task). The task
 * completes (its callback) after the last batch; the last batch may be
 * empty. Only the first result set streams; a streaming task's query must be
 * one statement. */
typedef void (*mf_mysql_batch_cb)(mf_task_t *task,
                                  const mf_mysql_result_t *batch, void *user);
MF_API void mf_task_mysql_stream(mf_task_t *task, size_t batch_rows,
                                 mf_mysql_batch_cb on_batch, void *user);
/* Frees the current batch and reads the next. */
MF_API void mf_task_mysql_next_batch(mf_task_t *task);

/* Results, valid in the callback: one per statement when the task succeeded
 * (and the ones before a statement error otherwise). */
MF_API size_t mf_task_mysql_nresults(const mf_task_t *task);
MF_API const mf_mysql_result_t *mf_task_mysql_result(const mf_task_t *task,
                                                     size_t i);

/* The server's or the connector's explanation of a failure: error number
 * (0 when there is none), SQLSTATE ("" when none) and message (at most 512
 * bytes, NULL when none). Valid in the callback. */
typedef struct mf_mysql_error {
    unsigned code;
    char sqlstate[6];
    const char *message;
} mf_mysql_error_t;
MF_API const mf_mysql_error_t *mf_task_mysql_error(const mf_task_t *task);
/* Why a task that never got a connection failed, apart from a query's own
 * failures: "mysql: no free connection in the pool of 16 (queue full)"
 * (MF_EBUSY), "mysql: waited 5000 ms for a connection" (the wait's
 * MF_ETIMEDOUT, not the query's); NULL otherwise. */
MF_API const char *mf_task_mysql_pool_error(const mf_task_t *task);

/* ---- sessions ----------------------------------------------------------- */

/* A session pins one pooled connection to a sequence of tasks: transactions,
 * temporary tables, SET @var, GET_LOCK. The first task run with it takes a
 * connection as any task does; the ones after run on that connection, one
 * at a time, in the order started. mf_mysql_session_close gives the
 * connection back: reset (COM_RESET_CONNECTION, which also rolls back an
 * open transaction) before another task uses it, or closed if it broke.
 * Closing a session with a task still running closes its connection when
 * the task ends. */
MF_API mf_mysql_session_t *mf_mysql_session_open(mf_mysql_client_t *client);
/* Whether the session's connection broke (a later task would fail). */
MF_API bool mf_mysql_session_broken(const mf_mysql_session_t *session);
MF_API void mf_mysql_session_close(mf_mysql_session_t *session);

MF_EXTERN_C_END

#endif /* MOONFLOW_MYSQL_H */
