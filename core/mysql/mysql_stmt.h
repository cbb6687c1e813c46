/*
 * mysql_stmt.h — prepared statements: the per-connection LRU cache of
 * MYSQL_STMT handles, parameters bound from mf_mysql_param_t, and binary
 * rows converted to mf_mysql_value_t exactly as the text protocol types
 * them. Internal to core/mysql (mysql_stmt.c owns these structs; the
 * connection embeds one cache, tasks and streams call the functions).
 *
 * Ownership: a cache owns its statements, each statement its handle, its
 * copy of the SQL and its bind array. Values converted from a row point
 * into memory the caller's allocator gave.
 */
#ifndef MF_MYSQL_STMT_H
#define MF_MYSQL_STMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mysql_int.h"

/* What a column definition says of a column's values. */
typedef struct mf_mysql_stmt_coltype {
    unsigned type, flags, decimals, charsetnr;
} mf_mysql_stmt_coltype_t;

/* One statement prepared on one connection, found by its SQL text. */
typedef struct mf_mysql_stmt {
    mf_list_t link; /* the cache's list, most recently used first */
    MYSQL_STMT *handle;
    uint64_t hash;
    size_t sql_len;
    char *sql; /* NUL-terminated, in the same allocation */
    /* Reused on every execute: parameter binds, then one "dummy" result
     * bind per column (the connector then leaves each column in place for
     * mysql_stmt_fetch_column, so no row is copied twice). */
    MYSQL_BIND *binds;
    unsigned nbinds;
    /* The parameter types the connector holds (MYSQL_TYPE_* | 0x8000 when
     * unsigned), one per marker: while they match, an execute only points
     * the connector's copy of each bind at the new value, and
     * COM_STMT_EXECUTE goes without its type block (new-params-bound 0),
     * which the server would otherwise parse and convert again. Cleared by
     * a prepare (the connector forgets its binds) and by a failed execute
     * (the server may not have taken the types). */
    uint16_t *ptypes;
    unsigned nptypes;
    bool types_bound;
    /* The server holds the types a pipeline (mysql_pipeline.c) last wrote
     * in ptypes: the pipeline's own execute packets may go without them.
     * Binding through the connector clears it, and a pipeline sending
     * types clears types_bound: the server keeps one set of types per
     * statement, whoever sent them. */
    bool wire_types;
    /* The column types the server last sent a pipeline with this
     * statement's result, which need not be the prepare's (SELECT CAST(?
     * AS SIGNED) is LONG when prepared, LONGLONG when executed). The
     * server sends no definitions while they stay as last sent; the
     * pipeline then reads these. wire_ncols 0: the handle's fields hold
     * (a prepare or an execute through the connector, which keeps those
     * current, clears these). Grown, never shrunk. */
    mf_mysql_stmt_coltype_t *wire_cols;
    unsigned wire_ncols, wire_cols_cap;
} mf_mysql_stmt_t;

typedef struct mf_mysql_stmt_cache {
    mf_list_t lru;
    unsigned count;
    unsigned cap; /* opts.stmt_cache; 0 keeps none past their task */
} mf_mysql_stmt_cache_t;

void mf__mysql_stmt_cache_init(mf_mysql_stmt_cache_t *cache, unsigned cap);
/* The statement for sql, made the most recently used; NULL when absent. */
mf_mysql_stmt_t *mf__mysql_stmt_cache_find(mf_mysql_stmt_cache_t *cache,
                                           const char *sql, size_t len);
/* The least recently used statement when adding one more would pass the
 * bound (the caller closes it on the server, then removes and frees it);
 * NULL when there is room. */
mf_mysql_stmt_t *mf__mysql_stmt_cache_victim(mf_mysql_stmt_cache_t *cache);
void mf__mysql_stmt_cache_add(mf_mysql_stmt_cache_t *cache,
                              mf_mysql_stmt_t *stmt);
void mf__mysql_stmt_cache_remove(mf_mysql_stmt_cache_t *cache,
                                 mf_mysql_stmt_t *stmt);
/* Frees every statement without a word to the server: for a connection
 * about to reset (COM_RESET_CONNECTION deallocates its statements) or to
 * close. */
void mf__mysql_stmt_cache_drop(mf_mysql_stmt_cache_t *cache);

/* A statement for sql on mysql, not yet prepared; NULL when memory is
 * refused (the connector's mysql_error says so). */
mf_mysql_stmt_t *mf__mysql_stmt_new(MYSQL *mysql, const char *sql, size_t len);
/* Frees the statement and its handle, detached from its connection first
 * as the connector does on a reset: nothing is sent to the server. */
void mf__mysql_stmt_free(mf_mysql_stmt_t *stmt);

/* Binds n parameters for the next execute: the types go to the connector
 * (and from it to the server) only when they differ from the last ones
 * bound. MF_EINVAL when n is not the
 * statement's marker count (*markers says how many it has), MF_ENOMEM,
 * or MF_EPROTO when the connector refused them (its words on the handle). */
int mf__mysql_stmt_bind(mf_mysql_stmt_t *stmt, const mf_mysql_param_t *params,
                        size_t n, unsigned *markers);
/* The connector's binds of stmt no longer stand (a prepare, a failed
 * execute): the next bind sends the types again. */
void mf__mysql_stmt_unbind(mf_mysql_stmt_t *stmt);
/* Binds the result columns after an execute that produced a result set
 * (their number may change when the server re-prepares). 0 or MF_ENOMEM. */
int mf__mysql_stmt_bind_columns(mf_mysql_stmt_t *stmt);

/* Memory for converted values; NULL when refused (the conversion then
 * fails with *error set by the allocator, e.g. MF_EMSGSIZE). */
typedef void *(*mf_mysql_alloc_fn)(void *ctx, size_t size);

/* Converts the row the last mysql_stmt_fetch returned into values[ncols].
 * Text values get len + 1 bytes from alloc (NUL-terminated). Returns 0 or
 * -1 when alloc refused. */
int mf__mysql_stmt_row(MYSQL_STMT *handle, mf_mysql_value_t *values,
                       mf_mysql_alloc_fn alloc, void *ctx);

/* FNV-1a of the SQL text: the cache compares hashes before bytes. */
uint64_t mf__mysql_sql_hash(const char *sql, size_t len);

/* ---- running a statement (mysql_stmt.c), shared with mysql_stream.c ----
 * A task's prepared statement: found in its connection's cache or prepared
 * (the least recently used one closed first when the cache is full), its
 * parameters bound, executed (re-prepared once when the server asks for it
 * with ER_NEED_REPREPARE, or when the result's shape changed), then
 * executed() runs with the result's rows waiting on the connection. */
typedef struct mf_mysql_stmt_run {
    mf_mysql_stmt_t *stmt;   /* cached: the running statement */
    mf_mysql_stmt_t *fresh;  /* being prepared, not cached yet */
    mf_mysql_stmt_t *victim; /* being closed (its handle the connector's) */
    bool reprepared;
    void (*executed)(mf_mysql_task_t *t);
} mf_mysql_stmt_run_t;

void mf__mysql_stmt_start(mf_mysql_task_t *t, mf_mysql_stmt_run_t *run);
/* The task ends early (its connection is closed next): see phase->abort. */
void mf__mysql_stmt_run_abort(mf_mysql_task_t *t, mf_mysql_stmt_run_t *run);
/* Frees what a run kept when its task ended early (the task is destroyed,
 * its connection closed: nothing is sent). */
void mf__mysql_stmt_run_release(mf_mysql_stmt_run_t *run);
/* The statement failed: keeps its code/SQLSTATE/message, marks the
 * connection broken when the code says it is gone, and finishes. */
void mf__mysql_stmt_fail(mf_mysql_task_t *t, MYSQL_STMT *handle);
/* Copies n columns, names too (a later task may re-prepare the statement,
 * a streamed MYSQL_RES goes before the task ends), into task memory; NULL
 * when over max_result. */
mf_mysql_field_t *mf__mysql_copy_fields(mf_mysql_task_t *t,
                                        const MYSQL_FIELD *in, unsigned n);
/* The counts of an OK packet or the end of a result set. */
void mf__mysql_stmt_counts(mf_mysql_result_t *r, MYSQL_STMT *h);

/* The connection's statement cache, made at first use; NULL when memory is
 * refused. */
mf_mysql_stmt_cache_t *mf__mysql_stmt_cache_of(mf_mysql_conn_t *conn);
/* Records the types of n parameters as those the server holds (ptypes
 * grown when needed); 0 or MF_ENOMEM. */
int mf__mysql_stmt_note_types(mf_mysql_stmt_t *stmt,
                              const mf_mysql_param_t *params, size_t n);

/* Operation steps on conn->op_obj (a MYSQL_STMT), see mysql_int.h:
 * prepare (conn->op_sql, op_len), close (COM_STMT_CLOSE; the connector
 * frees the handle). */
int mf__mysql_step_stmt_prepare(mf_mysql_conn_t *conn, int ready);
int mf__mysql_step_stmt_close(mf_mysql_conn_t *conn, int ready);
int mf__mysql_step_stmt_fetch(mf_mysql_conn_t *conn, int ready);
int mf__mysql_step_stmt_next(mf_mysql_conn_t *conn, int ready);
int mf__mysql_step_stmt_free(mf_mysql_conn_t *conn, int ready);

#endif /* MF_MYSQL_STMT_H */
