/*
 * mysql_stmt.c — prepared statements: the per-connection LRU cache, the
 * binding of mf_mysql_param_t to MYSQL_BIND, and binary rows converted to
 * mf_mysql_value_t.
 *
 * Values come out typed exactly as the text protocol types them (see
 * moonflow/mysql.h): integer columns as INT/UINT by their UNSIGNED flag,
 * DOUBLE as a double, FLOAT through the server's shortest text form (so a
 * FLOAT 3.14 is the same double 3.14 both ways), everything else as the
 * text the server would have sent (the connector formats DATE/TIME/
 * DATETIME with the column's decimals, exactly like the server does).
 *
 * Result columns are bound as "dummy" binds: the connector then only
 * records where each column of the fetched row starts, and each value is
 * converted straight into the caller's memory with mysql_stmt_fetch_column,
 * so a row is never copied into an intermediate buffer first.
 *
 * May call: libmariadb's local statement calls (no I/O happens here: the
 * *_start/_cont calls are made by the task and stream code).
 */
#include <errmsg.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mysql_stmt.h"
#include "mysql_binary.h"

/* ---- the cache ----------------------------------------------------------
 */

uint64_t mf__mysql_sql_hash(const char *sql, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)sql[i];
        h *= 1099511628211ull;
    }
    return h;
}

void mf__mysql_stmt_cache_init(mf_mysql_stmt_cache_t *cache, unsigned cap)
{
    mf_list_init(&cache->lru);
    cache->count = 0;
    cache->cap = cap;
}

mf_mysql_stmt_t *mf__mysql_stmt_cache_find(mf_mysql_stmt_cache_t *cache,
                                           const char *sql, size_t len)
{
    uint64_t h = mf__mysql_sql_hash(sql, len);
    mf_list_t *pos;
    mf_list_foreach(pos, &cache->lru)
    {
        mf_mysql_stmt_t *s = mf_container_of(pos, mf_mysql_stmt_t, link);
        if (s->hash == h && s->sql_len == len &&
            memcmp(s->sql, sql, len) == 0) {
            mf_list_remove(&s->link);
            mf_list_push_front(&cache->lru, &s->link);
            return s;
        }
    }
    return NULL;
}

mf_mysql_stmt_t *mf__mysql_stmt_cache_victim(mf_mysql_stmt_cache_t *cache)
{
    if (cache->count == 0 || cache->count < cache->cap)
        return NULL;
    return mf_container_of(cache->lru.prev, mf_mysql_stmt_t, link);
}

void mf__mysql_stmt_cache_add(mf_mysql_stmt_cache_t *cache,
                              mf_mysql_stmt_t *stmt)
{
    mf_list_push_front(&cache->lru, &stmt->link);
    cache->count++;
}

void mf__mysql_stmt_cache_remove(mf_mysql_stmt_cache_t *cache,
                                 mf_mysql_stmt_t *stmt)
{
    mf_list_remove(&stmt->link);
    cache->count--;
}

void mf__mysql_stmt_cache_drop(mf_mysql_stmt_cache_t *cache)
{
    while (!mf_list_empty(&cache->lru)) {
        mf_mysql_stmt_t *s =
            mf_container_of(cache->lru.next, mf_mysql_stmt_t, link);
        mf__mysql_stmt_cache_remove(cache, s);
        mf__mysql_stmt_free(s);
    }
}

/* ---- one statement -------------------------------------------------------
 */

mf_mysql_stmt_t *mf__mysql_stmt_new(MYSQL *mysql, const char *sql, size_t len)
{
    /* The statement and its SQL in one piece: once per prepare, not per
     * execute. */
    mf_mysql_stmt_t *s = mf_try_malloc(sizeof *s + len + 1);
    if (!s)
        return NULL;
    memset(s, 0, sizeof *s);
    s->handle = mysql_stmt_init(mysql);
    if (!s->handle) {
        mf_free(s);
        return NULL;
    }
    s->sql = (char *)(s + 1);
    memcpy(s->sql, sql, len);
    s->sql[len] = '\0';
    mf_list_init(&s->link);
    s->sql_len = len;
    s->hash = mf__mysql_sql_hash(sql, len);
    return s;
}

/* What the connector does to a connection's statements when it resets or
 * closes: the handle forgets its connection, so closing it sends nothing. */
static void mf__detach(MYSQL_STMT *h)
{
    MYSQL *m = h->mysql;
    if (!m)
        return;
    LIST *e = &h->list;
    if (e->prev)
        e->prev->next = e->next;
    else
        m->stmts = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
    h->mysql = NULL;
}

void mf__mysql_stmt_free(mf_mysql_stmt_t *stmt)
{
    if (!stmt)
        return;
    if (stmt->handle) {
        mf__detach(stmt->handle);
        mysql_stmt_close(stmt->handle); /* detached: frees memory only */
    }
    mf_free(stmt->binds);
    mf_free(stmt->ptypes);
    mf_free(stmt->wire_cols);
    mf_free(stmt);
}

/* The bind array holds the parameters and the columns; the connector
 * copies binds when they are bound, so it is scratch: grown (without
 * copying), never shrunk, and a cached statement binds without
 * allocating. */
static int mf__stmt_reserve(mf_mysql_stmt_t *stmt, unsigned n)
{
    if (n <= stmt->nbinds)
        return 0;
    MYSQL_BIND *b = mf_try_malloc(n * sizeof *b);
    if (!b)
        return MF_ENOMEM;
    mf_free(stmt->binds);
    stmt->binds = b;
    stmt->nbinds = n;
    return 0;
}

/* A parameter as the connector sends it: its type key (MYSQL_TYPE_* |
 * 0x8000 when unsigned), where its value is and, for strings, its
 * length. */
#define MF__UNSIGNED_TYPE 0x8000u

static uint16_t mf__param_ref(const mf_mysql_param_t *p, void **buf,
                              unsigned long *len)
{
    *len = 0;
    switch (p->type) {
    case MF_MYSQL_INT:
        *buf = (void *)&p->i;
        break;
    case MF_MYSQL_UINT:
        *buf = (void *)&p->u;
        break;
    case MF_MYSQL_DOUBLE:
        *buf = (void *)&p->d;
        break;
    case MF_MYSQL_TEXT:
    case MF_MYSQL_BLOB:
        /* An empty string still needs a buffer: a NULL one means SQL
         * NULL to the connector. */
        *buf = (void *)(p->s ? p->s : "");
        *len = (unsigned long)p->len;
        break;
    case MF_MYSQL_NULL:
    default:
        *buf = NULL;
        break;
    }
    /* the same key the pipeline's execute packets carry */
    return mf__mysql_bin_param_type(p);
}

static bool mf__is_string_type(uint16_t type)
{
    return type == MYSQL_TYPE_STRING || type == MYSQL_TYPE_BLOB;
}

void mf__mysql_stmt_unbind(mf_mysql_stmt_t *stmt)
{
    stmt->types_bound = false;
    stmt->wire_types = false;
}

/* The types match the connector's: its copies of the binds (the
 * MYSQL_STMT's params, which mysql_stmt_bind_param filled) are pointed at
 * the new values. mysql_stmt_bind_param is not called: it would set
 * send_types_to_server, and every COM_STMT_EXECUTE would carry the types
 * for the server to parse again. false: a type changed. */
static bool mf__rebind_values(mf_mysql_stmt_t *stmt,
                              const mf_mysql_param_t *params, size_t n)
{
    MYSQL_BIND *held = stmt->handle->params;
    for (size_t i = 0; i < n; i++) {
        void *buf;
        unsigned long len;
        uint16_t type = mf__param_ref(&params[i], &buf, &len);
        if (type != stmt->ptypes[i])
            return false;
        if (type == MYSQL_TYPE_NULL)
            continue;
        held[i].buffer = buf;
        if (mf__is_string_type(type))
            held[i].buffer_length = len; /* held[i].length points here */
    }
    return true;
}

int mf__mysql_stmt_note_types(mf_mysql_stmt_t *stmt,
                              const mf_mysql_param_t *params, size_t n)
{
    if (n > stmt->nptypes) {
        uint16_t *t = mf_try_malloc(n * sizeof *t);
        if (!t)
            return MF_ENOMEM;
        mf_free(stmt->ptypes);
        stmt->ptypes = t;
        stmt->nptypes = (unsigned)n;
    }
    for (size_t i = 0; i < n; i++) {
        void *buf;
        unsigned long len;
        stmt->ptypes[i] = mf__param_ref(&params[i], &buf, &len);
    }
    return 0;
}

/* Binds every parameter through the connector (which sends the types with
 * the next execute) and remembers the types. */
static int mf__bind_types(mf_mysql_stmt_t *stmt, const mf_mysql_param_t *params,
                          size_t n)
{
    stmt->types_bound = false;
    stmt->wire_types = false;
    if (mf__mysql_stmt_note_types(stmt, params, n) != 0)
        return MF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        MYSQL_BIND *b = &stmt->binds[i];
        void *buf;
        unsigned long len;
        uint16_t type = mf__param_ref(&params[i], &buf, &len);
        memset(b, 0, sizeof *b);
        b->buffer_type = (enum enum_field_types)(type & ~MF__UNSIGNED_TYPE);
        b->is_unsigned = (type & MF__UNSIGNED_TYPE) != 0;
        b->buffer = buf;
        b->buffer_length = len;
    }
    /* Refused by the connector: its words are on the statement. */
    if (mysql_stmt_bind_param(stmt->handle, stmt->binds))
        return MF_EPROTO;
    stmt->types_bound = true;
    return 0;
}

int mf__mysql_stmt_bind(mf_mysql_stmt_t *stmt, const mf_mysql_param_t *params,
                        size_t n, unsigned *markers)
{
    unsigned want = (unsigned)mysql_stmt_param_count(stmt->handle);
    *markers = want;
    if (n != want)
        return MF_EINVAL;
    if (n == 0)
        return 0;
    if (stmt->types_bound && mf__rebind_values(stmt, params, n))
        return 0;
    unsigned cols = mysql_stmt_field_count(stmt->handle);
    if (mf__stmt_reserve(stmt, want + cols) != 0)
        return MF_ENOMEM;
    return mf__bind_types(stmt, params, n);
}

int mf__mysql_stmt_bind_columns(mf_mysql_stmt_t *stmt)
{
    unsigned params = (unsigned)mysql_stmt_param_count(stmt->handle);
    unsigned cols = mysql_stmt_field_count(stmt->handle);
    if (cols == 0)
        return 0;
    if (mf__stmt_reserve(stmt, params + cols) != 0)
        return MF_ENOMEM;
    MYSQL_BIND *b = stmt->binds + params;
    memset(b, 0, cols * sizeof *b);
    for (unsigned i = 0; i < cols; i++) {
        b[i].buffer_type = MYSQL_TYPE_NULL;
        b[i].flags = MADB_BIND_DUMMY;
    }
    return mysql_stmt_bind_result(stmt->handle, b) ? MF_ENOMEM : 0;
}

/* ---- binary rows to values ----------------------------------------------
 */

static void mf__fetch_number(MYSQL_STMT *h, unsigned col, const MYSQL_FIELD *f,
                             mf_mysql_value_t *v)
{
    MYSQL_BIND b;
    my_bool is_null = 0, err = 0;
    unsigned long len = 0;
    memset(&b, 0, sizeof b);
    b.is_null = &is_null;
    b.error = &err;
    b.length = &len;
    if (f->type == MYSQL_TYPE_DOUBLE) {
        b.buffer_type = MYSQL_TYPE_DOUBLE;
        b.buffer = &v->d;
        v->type = MF_MYSQL_DOUBLE;
    } else {
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = &v->i;
        b.is_unsigned = (f->flags & UNSIGNED_FLAG) != 0;
        v->type = b.is_unsigned ? MF_MYSQL_UINT : MF_MYSQL_INT;
    }
    mysql_stmt_fetch_column(h, &b, col, 0);
    if (is_null)
        v->type = MF_MYSQL_NULL;
}

/* Everything else comes as the server's text: a first try into a small
 * stack buffer (dates, decimals, short strings), a second straight into
 * the value's own memory when longer. */
static int mf__fetch_text(MYSQL_STMT *h, unsigned col, const MYSQL_FIELD *f,
                          mf_mysql_value_t *v, mf_mysql_alloc_fn alloc,
                          void *ctx)
{
    char small[64];
    MYSQL_BIND b;
    my_bool is_null = 0, err = 0;
    unsigned long len = 0;
    memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_STRING;
    b.buffer = small;
    b.buffer_length = sizeof small;
    b.is_null = &is_null;
    b.error = &err;
    b.length = &len;
    mysql_stmt_fetch_column(h, &b, col, 0);
    if (is_null) {
        v->type = MF_MYSQL_NULL;
        return 0;
    }
    if (f->type == MYSQL_TYPE_FLOAT && len < sizeof small) {
        /* The text protocol's FLOAT is this shortest form read back as a
         * double; (double)3.14f would be 3.1400001049... */
        v->type = MF_MYSQL_DOUBLE;
        v->d = strtod(small, NULL);
        return 0;
    }
    char *dst = alloc(ctx, (size_t)len + 1);
    if (!dst)
        return -1;
    if (len < sizeof small) {
        memcpy(dst, small, len);
    } else {
        b.buffer = dst;
        b.buffer_length = len + 1;
        mysql_stmt_fetch_column(h, &b, col, 0);
    }
    dst[len] = '\0';
    if (f->type == MYSQL_TYPE_FLOAT) { /* FLOAT(M,D) with many digits */
        v->type = MF_MYSQL_DOUBLE;
        v->d = strtod(dst, NULL);
        return 0;
    }
    v->type = MF_MYSQL_TEXT;
    v->s = dst;
    v->len = len;
    return 0;
}

int mf__mysql_stmt_row(MYSQL_STMT *handle, mf_mysql_value_t *values,
                       mf_mysql_alloc_fn alloc, void *ctx)
{
    unsigned n = mysql_stmt_field_count(handle);
    const MYSQL_FIELD *fields = mariadb_stmt_fetch_fields(handle);
    for (unsigned c = 0; c < n; c++) {
        mf_mysql_value_t *v = &values[c];
        v->len = 0;
        if (mf__mysql_type_is_integer(fields[c].type) ||
            fields[c].type == MYSQL_TYPE_DOUBLE)
            mf__fetch_number(handle, c, &fields[c], v);
        else if (mf__fetch_text(handle, c, &fields[c], v, alloc, ctx) != 0)
            return -1;
    }
    return 0;
}

/* ---- the connection's cache ----------------------------------------------
 */

/* The connection is about to reset (the server forgets its statements) or
 * to close: every cached statement goes, without a word to the server. A
 * statement an operation in flight still uses is not in the cache any more
 * (mf__stmt_abort took it out). */
static void mf__cache_drop_conn(mf_mysql_conn_t *conn)
{
    mf_mysql_stmt_cache_t *cache = conn->stmt_cache;
    if (!cache)
        return;
    mf__mysql_stmt_cache_drop(cache);
    mf_free(cache);
    conn->stmt_cache = NULL;
}

mf_mysql_stmt_cache_t *mf__mysql_stmt_cache_of(mf_mysql_conn_t *conn)
{
    if (!conn->stmt_cache) {
        mf_mysql_stmt_cache_t *cache = mf_try_malloc(sizeof *cache);
        if (!cache)
            return NULL;
        mf__mysql_stmt_cache_init(cache, conn->client->opts.stmt_cache);
        conn->stmt_cache = cache;
        conn->stmt_cache_drop = mf__cache_drop_conn;
    }
    return conn->stmt_cache;
}

/* ---- steps -----------------------------------------------------------------
 */

int mf__mysql_step_stmt_prepare(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_prepare_start(&conn->ret.i, conn->op_obj,
                                        conn->op_sql, conn->op_len);
    return mysql_stmt_prepare_cont(&conn->ret.i, conn->op_obj, ready);
}

static int mf__step_execute(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_execute_start(&conn->ret.i, conn->op_obj);
    return mysql_stmt_execute_cont(&conn->ret.i, conn->op_obj, ready);
}

int mf__mysql_step_stmt_close(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_close_start(&conn->ret.b, conn->op_obj);
    return mysql_stmt_close_cont(&conn->ret.b, conn->op_obj, ready);
}

int mf__mysql_step_stmt_fetch(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_fetch_start(&conn->ret.i, conn->op_obj);
    return mysql_stmt_fetch_cont(&conn->ret.i, conn->op_obj, ready);
}

int mf__mysql_step_stmt_next(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_next_result_start(&conn->ret.i, conn->op_obj);
    return mysql_stmt_next_result_cont(&conn->ret.i, conn->op_obj, ready);
}

int mf__mysql_step_stmt_free(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_stmt_free_result_start(&conn->ret.b, conn->op_obj);
    return mysql_stmt_free_result_cont(&conn->ret.b, conn->op_obj, ready);
}

/* ---- results ---------------------------------------------------------------
 */

/* Keeps the statement's explanation; the (state, error) it maps to. */
static void mf__keep_stmt_error(mf_mysql_task_t *t, MYSQL_STMT *h, int *state,
                                int *error)
{
    unsigned code = mysql_stmt_errno(h);
    const char *msg = mysql_stmt_error(h);
    const char *sqlstate = mysql_stmt_sqlstate(h);
    if (code == 0) { /* a failed fetch leaves its words on the connection */
        MYSQL *m = &t->conn->mysql;
        code = mysql_errno(m);
        msg = mysql_error(m);
        sqlstate = mysql_sqlstate(m);
    }
    mf__mysql_task_keep_error(t, code, sqlstate, msg);
    mf__mysql_error_map(code, msg, state, error);
    if (mf__mysql_conn_error_is_fatal(code))
        t->conn->broken = true;
}

void mf__mysql_stmt_fail(mf_mysql_task_t *t, MYSQL_STMT *h)
{
    int state, error;
    mf__keep_stmt_error(t, h, &state, &error);
    mf__mysql_task_finish(t, state, error);
}

mf_mysql_field_t *mf__mysql_copy_fields(mf_mysql_task_t *t,
                                        const MYSQL_FIELD *in, unsigned n)
{
    mf_mysql_field_t *out = mf__mysql_task_alloc(t, n * sizeof *out);
    for (unsigned i = 0; out && i < n; i++) {
        const char *table = in[i].table ? in[i].table : "";
        size_t tlen = strlen(table);
        char *names = mf__mysql_task_alloc(t, in[i].name_length + tlen + 2);
        if (!names)
            return NULL;
        memcpy(names, in[i].name, in[i].name_length);
        names[in[i].name_length] = '\0';
        memcpy(names + in[i].name_length + 1, table, tlen + 1);
        out[i].name = names;
        out[i].name_len = in[i].name_length;
        out[i].table = names + in[i].name_length + 1;
        out[i].type = in[i].type;
        out[i].flags = in[i].flags;
        out[i].decimals = in[i].decimals;
        out[i].charsetnr = in[i].charsetnr;
    }
    return out;
}

void mf__mysql_stmt_counts(mf_mysql_result_t *r, MYSQL_STMT *h)
{
    my_ulonglong affected = mysql_stmt_affected_rows(h);
    r->affected_rows = affected == (my_ulonglong)-1 ? 0 : affected;
    r->insert_id = mysql_stmt_insert_id(h);
    r->warnings = (unsigned)mysql_stmt_warning_count(h);
    r->server_status = h->mysql ? h->mysql->server_status : 0;
}

/* ---- prepare, bind, execute -----------------------------------------------
 */

static void mf__prepare(mf_mysql_task_t *t, mf_mysql_stmt_t *s);
static void mf__execute(mf_mysql_task_t *t);

static mf_mysql_stmt_run_t *mf__run_of(const mf_mysql_task_t *t)
{
    return t->phase_data;
}

static void mf__close_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_mysql_stmt_run_t *run = mf__run_of(t);
    /* The connector freed the handle whatever the outcome; a failure to
     * send COM_STMT_CLOSE means the link is gone, and the prepare that
     * follows reports it. */
    mf__mysql_stmt_free(run->victim);
    run->victim = NULL;
    mf__prepare(t, run->fresh);
}

static void mf__prepare_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_mysql_stmt_run_t *run = mf__run_of(t);
    mf_mysql_stmt_t *s = run->fresh ? run->fresh : run->stmt;
    if (conn->ret.i) {
        int state, error;
        mf__keep_stmt_error(t, s->handle, &state, &error);
        if (run->fresh) {
            /* A failed prepare leaves nothing on the server. */
            mf__mysql_stmt_free(run->fresh);
            run->fresh = NULL;
        } else { /* a re-prepare failed: the handle is no use any more */
            mf__mysql_stmt_cache_remove(conn->stmt_cache, s);
            mf__mysql_stmt_free(s);
            run->stmt = NULL;
        }
        mf__mysql_task_finish(t, state, error);
        return;
    }
    if (run->fresh) {
        mf__mysql_stmt_cache_add(conn->stmt_cache, run->fresh);
        run->stmt = run->fresh;
        run->fresh = NULL;
    }
    mf__execute(t);
}

static void mf__prepare(mf_mysql_task_t *t, mf_mysql_stmt_t *s)
{
    mf_mysql_conn_t *conn = t->conn;
    mf__mysql_stmt_unbind(s); /* the connector drops its binds */
    s->wire_ncols = 0;        /* the prepare's columns are the handle's */
    conn->op_obj = s->handle;
    conn->op_sql = s->sql;
    conn->op_len = s->sql_len;
    mf__mysql_conn_run(conn, mf__mysql_step_stmt_prepare, mf__prepare_done);
}

/* ER_NEED_REPREPARE, or the connector saw the columns change under a
 * cached statement (a table altered since it was prepared). */
static bool mf__needs_reprepare(unsigned code)
{
    return code == ER_NEED_REPREPARE || code == CR_NEW_STMT_METADATA;
}

static void mf__execute_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_mysql_stmt_run_t *run = mf__run_of(t);
    MYSQL_STMT *h = run->stmt->handle;
    if (conn->ret.i == 0) {
        run->executed(t);
        return;
    }
    /* Whether the server took the types before it failed is unknown: the
     * next execute sends them again. */
    mf__mysql_stmt_unbind(run->stmt);
    if (!run->reprepared && mf__needs_reprepare(mysql_stmt_errno(h))) {
        run->reprepared = true;
        mf__prepare(t, run->stmt); /* the same handle, prepared anew */
        return;
    }
    mf__mysql_stmt_fail(t, h);
}

static void mf__execute(mf_mysql_task_t *t)
{
    mf_mysql_stmt_run_t *run = mf__run_of(t);
    unsigned markers = 0;
    int rc = mf__mysql_stmt_bind(run->stmt, t->params, t->nparams, &markers);
    if (rc == MF_EINVAL) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 "Invalid parameter count: the statement has %u parameter "
                 "markers, %zu values were bound",
                 markers, t->nparams);
        mf__mysql_task_keep_error(t, CR_INVALID_PARAMETER_NO, "HY000", msg);
        mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EINVAL);
        return;
    }
    if (rc == MF_EPROTO) {
        mf__mysql_stmt_fail(t, run->stmt->handle);
        return;
    }
    if (rc != 0) {
        mf__mysql_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    /* The connector keeps the handle's columns as the server sends them:
     * a pipeline's copy would be stale. */
    run->stmt->wire_ncols = 0;
    t->conn->op_obj = run->stmt->handle;
    mf__mysql_conn_run(t->conn, mf__step_execute, mf__execute_done);
}

void mf__mysql_stmt_start(mf_mysql_task_t *t, mf_mysql_stmt_run_t *run)
{
    mf_mysql_conn_t *conn = t->conn;
    mf_mysql_stmt_cache_t *cache = mf__mysql_stmt_cache_of(conn);
    t->phase_data = run;
    run->stmt =
        cache ? mf__mysql_stmt_cache_find(cache, t->sql, t->sql_len) : NULL;
    if (run->stmt) {
        mf__execute(t);
        return;
    }
    run->fresh =
        cache ? mf__mysql_stmt_new(&conn->mysql, t->sql, t->sql_len) : NULL;
    if (!run->fresh) {
        mf__mysql_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    run->victim = mf__mysql_stmt_cache_victim(cache);
    if (!run->victim) {
        mf__prepare(t, run->fresh);
        return;
    }
    /* The cache is full: the least recently used statement is closed on
     * the server first (COM_STMT_CLOSE; the connector frees the handle). */
    mf__mysql_stmt_cache_remove(cache, run->victim);
    conn->op_obj = run->victim->handle;
    run->victim->handle = NULL;
    mf__mysql_conn_run(conn, mf__mysql_step_stmt_close, mf__close_done);
}

void mf__mysql_stmt_run_abort(mf_mysql_task_t *t, mf_mysql_stmt_run_t *run)
{
    /* The connection is closed next, and an operation in flight on a cached
     * statement is run to its end by the close: take that statement out of
     * the cache, whose statements are freed first, and free it with the
     * task once the close detached it. */
    if (run->stmt && t->conn->step && !run->fresh) {
        mf__mysql_stmt_cache_remove(t->conn->stmt_cache, run->stmt);
        run->fresh = run->stmt;
    }
    run->stmt = NULL;
}

void mf__mysql_stmt_run_release(mf_mysql_stmt_run_t *run)
{
    mf__mysql_stmt_free(run->victim);
    run->victim = NULL;
    mf__mysql_stmt_free(run->fresh);
    run->fresh = NULL;
}

/* ---- the stored-results phase ---------------------------------------------
 */

typedef struct mf_stmt_phase {
    mf_mysql_stmt_run_t run; /* first: the run's state is the phase's */
    mf_mysql_set_t *set;
    mf_mysql_value_t **rows;
    size_t rows_cap;
} mf_stmt_phase_t;

static void mf__stmt_result(mf_mysql_task_t *t);

static void *mf__task_alloc_cb(void *ctx, size_t size)
{
    return mf__mysql_task_alloc(ctx, size);
}

static void mf__overflow(mf_mysql_task_t *t)
{
    /* The rest of the rows cannot be read into the task: the connection
     * is mid-result and is not handed out again. */
    t->conn->broken = true;
    mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
}

static int mf__append_row(mf_mysql_task_t *t, mf_stmt_phase_t *p, MYSQL_STMT *h)
{
    mf_mysql_result_t *r = &p->set->pub;
    if (mf__mysql_task_row_room(t, r, &p->rows, &p->rows_cap) != 0)
        return -1;
    mf_mysql_value_t *v = mf__mysql_task_alloc(t, r->nfields * sizeof *v);
    if (!v || mf__mysql_stmt_row(h, v, mf__task_alloc_cb, t) != 0)
        return -1;
    p->rows[r->nrows++] = v;
    return 0;
}

static void mf__next_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_stmt_phase_t *p = t->phase_data;
    if (conn->ret.i == 0)
        mf__stmt_result(t);
    else if (conn->ret.i < 0)
        mf__mysql_task_finish(t, MF_STATE_SUCCESS, 0);
    else
        mf__mysql_stmt_fail(t, p->run.stmt->handle);
}

/* The current result set is complete: its counts, then the next one (a
 * procedure's) or the end. */
static void mf__set_done(mf_mysql_task_t *t, mf_stmt_phase_t *p)
{
    MYSQL_STMT *h = p->run.stmt->handle;
    mf__mysql_stmt_counts(&p->set->pub, h);
    if (p->set->pub.nfields)
        p->set->pub.affected_rows = p->set->pub.nrows; /* as the text one */
    if (mysql_stmt_more_results(h)) {
        t->conn->op_obj = h;
        mf__mysql_conn_run(t->conn, mf__mysql_step_stmt_next, mf__next_done);
        return;
    }
    mf__mysql_task_finish(t, MF_STATE_SUCCESS, 0);
}

static void mf__fetch_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_stmt_phase_t *p = t->phase_data;
    MYSQL_STMT *h = p->run.stmt->handle;
    int rc = conn->ret.i;
    if (rc == 0 || rc == MYSQL_DATA_TRUNCATED) {
        if (mf__append_row(t, p, h) != 0) {
            mf__overflow(t);
            return;
        }
        mf__mysql_conn_run(conn, mf__mysql_step_stmt_fetch, mf__fetch_done);
        return;
    }
    if (rc == MYSQL_NO_DATA)
        mf__set_done(t, p);
    else
        mf__mysql_stmt_fail(t, h); /* an error mid-result: the sets stay */
}

static void mf__stmt_result(mf_mysql_task_t *t)
{
    mf_stmt_phase_t *p = t->phase_data;
    MYSQL_STMT *h = p->run.stmt->handle;
    p->set = mf__mysql_task_add_set(t);
    p->rows = NULL;
    p->rows_cap = 0;
    if (!p->set) {
        mf__overflow(t);
        return;
    }
    unsigned nf = mysql_stmt_field_count(h);
    if (nf == 0) {
        mf__set_done(t, p);
        return;
    }
    mf_mysql_field_t *f =
        mf__mysql_copy_fields(t, mariadb_stmt_fetch_fields(h), nf);
    if (!f) {
        mf__overflow(t);
        return;
    }
    if (mf__mysql_stmt_bind_columns(p->run.stmt) != 0) {
        t->conn->broken = true; /* the rows stay unread */
        mf__mysql_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    p->set->pub.nfields = nf;
    p->set->pub.fields = f;
    t->conn->op_obj = h;
    mf__mysql_conn_run(t->conn, mf__mysql_step_stmt_fetch, mf__fetch_done);
}

static void mf__stmt_run(mf_mysql_task_t *t)
{
    mf_stmt_phase_t *p = mf__mysql_task_alloc(t, sizeof *p);
    if (!p) {
        mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
        return;
    }
    memset(p, 0, sizeof *p);
    p->run.executed = mf__stmt_result;
    mf__mysql_stmt_start(t, &p->run);
}

static void mf__stmt_abort(mf_mysql_task_t *t)
{
    if (t->phase_data)
        mf__mysql_stmt_run_abort(t, t->phase_data);
}

static void mf__stmt_release(mf_mysql_task_t *t)
{
    if (t->phase_data)
        mf__mysql_stmt_run_release(t->phase_data);
}

const mf_mysql_phase_t mf__mysql_stmt_phase = {
    "stmt", mf__stmt_run, mf__stmt_abort, mf__stmt_release};
