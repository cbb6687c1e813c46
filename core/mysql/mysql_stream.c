/*
 * mysql_stream.c — the streaming query phase: rows in batches of at most
 * t->batch_rows, for a text query (mysql_use_result, then
 * mysql_fetch_row_start/_cont row by row) or a prepared one (execute, then
 * mysql_stmt_fetch_start/_cont without storing the result).
 *
 * Memory stays bounded whatever the row count: a batch's rows live in an
 * arena of their own, released when the consumer asks for the next batch,
 * and nothing is read from the socket while the consumer holds a batch (no
 * operation runs; the kernel's buffers fill and TCP holds the server back).
 * Each batch goes to on_batch; mf_task_mysql_next_batch resumes from the
 * loop (never inside the caller). After the last batch (the rows up to the
 * end, possibly none) is released, the task completes with one result: the
 * columns and the counts, no rows.
 *
 * A stream that ends early (timeout, cancel) has its connection KILLed and
 * closed by the task code: a connection is never handed out mid-result.
 * Only the first result set streams: a query that has more (several
 * statements, a procedure's) gets its connection closed after it.
 *
 * Ownership: the stream state lives in task memory; the batch arena's
 * chunks and a text stream's MYSQL_RES belong to it until released.
 */
#include <stdint.h>
#include <string.h>

#include "mysql_stmt.h"

typedef struct mf_stream {
    mf_mysql_stmt_run_t run; /* prepared streams */
    mf_mysql_task_t *task;
    MYSQL_RES *res;         /* text streams, until the end of the rows */
    mf_mysql_arena_t batch; /* the current batch's rows */
    mf_mysql_result_t pub;  /* the batch the consumer sees */
    mf_mysql_value_t **rows;
    size_t rows_cap;
    mf_post_t resume; /* next_batch → the next rows, from the loop */
    bool held;        /* a batch is out with the consumer */
    bool last;        /* it was the last one: releasing it completes */
} mf_stream_t;

static mf_stream_t *mf__stream_of(const mf_mysql_task_t *t)
{
    return t->phase_data;
}

static void *mf__batch_alloc(void *ctx, size_t size)
{
    mf_stream_t *s = ctx;
    return mf__mysql_arena_alloc(s->task->base._loop, &s->batch, size);
}

/* ---- batches ----------------------------------------------------------------
 */

static void mf__deliver(mf_mysql_task_t *t, mf_stream_t *s, bool last)
{
    s->held = true;
    s->last = last;
    s->pub.rows = (const mf_mysql_value_t *const *)s->rows;
    t->on_batch(&t->base, &s->pub, t->batch_user);
}

/* The end of the rows: the counts go to the batch and to the task's one
 * result, and the last batch goes out. */
static void mf__rows_end(mf_mysql_task_t *t, mf_stream_t *s, bool more)
{
    if (more) /* more result sets than the one streamed: not read */
        t->conn->broken = true;
    mf_mysql_set_t *set = mf__mysql_task_add_set(t);
    if (!set) {
        t->conn->broken = true;
        mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
        return;
    }
    set->pub = s->pub;
    set->pub.nrows = 0;
    set->pub.rows = NULL;
    mf__deliver(t, s, true);
}

/* Makes room for one more row; NULL when over max_result. The row array
 * grows by doubling up to batch_rows (a huge batch_rows costs nothing until
 * rows come); the outgrown arrays stay in the batch until it is released. */
static mf_mysql_value_t *mf__row_slot(mf_mysql_task_t *t, mf_stream_t *s)
{
    size_t n = s->pub.nrows;
    if (n == s->rows_cap) {
        size_t cap = n ? 2 * n : 16;
        if (cap > t->batch_rows)
            cap = t->batch_rows;
        if (cap > SIZE_MAX / sizeof *s->rows)
            return NULL;
        mf_mysql_value_t **rows = mf__batch_alloc(s, cap * sizeof *rows);
        if (!rows)
            return NULL;
        if (n)
            memcpy(rows, s->rows, n * sizeof *rows);
        s->rows = rows;
        s->rows_cap = cap;
    }
    mf_mysql_value_t *v = mf__batch_alloc(s, s->pub.nfields * sizeof *v);
    if (v)
        s->rows[n] = v;
    return v;
}

static void mf__overflow(mf_mysql_task_t *t)
{
    t->conn->broken = true; /* mid-result */
    mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
}

static void mf__fetch_next(mf_mysql_task_t *t, mf_stream_t *s);

/* A row was added: a full batch goes out, otherwise the next row. */
static void mf__row_added(mf_mysql_task_t *t, mf_stream_t *s)
{
    if (++s->pub.nrows == t->batch_rows)
        mf__deliver(t, s, false);
    else
        mf__fetch_next(t, s);
}

/* ---- text streams -----------------------------------------------------------
 */

/* The counts of the text protocol's OK packet or end of rows. */
static void mf__counts(mf_stream_t *s, MYSQL *mysql)
{
    mf_mysql_set_t counts;
    memset(&counts, 0, sizeof counts);
    mf__mysql_set_counts(&counts, mysql);
    s->pub.affected_rows = counts.pub.affected_rows;
    s->pub.insert_id = counts.pub.insert_id;
    s->pub.warnings = counts.pub.warnings;
    s->pub.server_status = counts.pub.server_status;
}

static int mf__step_query(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_real_query_start(&conn->ret.i, &conn->mysql, conn->op_sql,
                                      conn->op_len);
    return mysql_real_query_cont(&conn->ret.i, &conn->mysql, ready);
}

static int mf__step_fetch_row(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_fetch_row_start(&conn->ret.row, conn->op_obj);
    return mysql_fetch_row_cont(&conn->ret.row, conn->op_obj, ready);
}

static void mf__text_row_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_stream_t *s = mf__stream_of(t);
    MYSQL_ROW row = conn->ret.row;
    if (!row) {
        if (mysql_errno(&conn->mysql)) { /* the server failed mid-way */
            mf__mysql_task_fail_conn(t);
            return;
        }
        /* After the last row nothing is left to read: no I/O here. */
        mysql_free_result(s->res);
        s->res = NULL;
        mf__counts(s, &conn->mysql);
        mf__rows_end(t, s, mysql_more_results(&conn->mysql));
        return;
    }
    mf_mysql_value_t *v = mf__row_slot(t, s);
    if (!v) {
        mf__overflow(t);
        return;
    }
    const MYSQL_FIELD *fields = mysql_fetch_fields(s->res);
    const unsigned long *lens = mysql_fetch_lengths(s->res);
    for (unsigned c = 0; c < s->pub.nfields; c++) {
        mf__mysql_text_value(&v[c], &fields[c], row[c], lens[c]);
        if (v[c].type != MF_MYSQL_TEXT)
            continue;
        /* The row is the connector's read buffer, overwritten by the
         * next read: the text is copied into the batch. */
        char *copy = mf__batch_alloc(s, v[c].len + 1);
        if (!copy) {
            mf__overflow(t);
            return;
        }
        memcpy(copy, v[c].s, v[c].len);
        copy[v[c].len] = '\0';
        v[c].s = copy;
    }
    mf__row_added(t, s);
}

static void mf__text_query_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_stream_t *s = mf__stream_of(t);
    if (conn->ret.i) {
        mf__mysql_task_fail_conn(t);
        return;
    }
    s->res = mysql_use_result(&conn->mysql); /* no I/O */
    if (!s->res) {
        if (mysql_field_count(&conn->mysql)) {
            mf__mysql_task_fail_conn(t);
            return;
        }
        mf__counts(s, &conn->mysql);
        mf__rows_end(t, s, mysql_more_results(&conn->mysql));
        return;
    }
    s->pub.nfields = mysql_num_fields(s->res);
    s->pub.fields =
        mf__mysql_copy_fields(t, mysql_fetch_fields(s->res), s->pub.nfields);
    if (!s->pub.fields) {
        mf__overflow(t);
        return;
    }
    mf__fetch_next(t, s);
}

/* ---- prepared streams -------------------------------------------------------
 */

static void mf__stmt_row_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    mf_stream_t *s = mf__stream_of(t);
    MYSQL_STMT *h = s->run.stmt->handle;
    int rc = conn->ret.i;
    if (rc == MYSQL_NO_DATA) {
        mf__mysql_stmt_counts(&s->pub, h);
        mf__rows_end(t, s, mysql_stmt_more_results(h));
        return;
    }
    if (rc != 0 && rc != MYSQL_DATA_TRUNCATED) {
        mf__mysql_stmt_fail(t, h); /* the server failed mid-way */
        return;
    }
    mf_mysql_value_t *v = mf__row_slot(t, s);
    if (!v || mf__mysql_stmt_row(h, v, mf__batch_alloc, s) != 0) {
        mf__overflow(t);
        return;
    }
    mf__row_added(t, s);
}

static void mf__stmt_executed(mf_mysql_task_t *t)
{
    mf_stream_t *s = mf__stream_of(t);
    MYSQL_STMT *h = s->run.stmt->handle;
    unsigned nf = mysql_stmt_field_count(h);
    if (nf == 0) {
        mf__mysql_stmt_counts(&s->pub, h);
        mf__rows_end(t, s, mysql_stmt_more_results(h));
        return;
    }
    s->pub.nfields = nf;
    s->pub.fields = mf__mysql_copy_fields(t, mariadb_stmt_fetch_fields(h), nf);
    if (!s->pub.fields) {
        mf__overflow(t);
        return;
    }
    if (mf__mysql_stmt_bind_columns(s->run.stmt) != 0) {
        t->conn->broken = true;
        mf__mysql_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    mf__fetch_next(t, s);
}

/* ---- the phase --------------------------------------------------------------
 */

static void mf__fetch_next(mf_mysql_task_t *t, mf_stream_t *s)
{
    if (s->res) {
        t->conn->op_obj = s->res;
        mf__mysql_conn_run(t->conn, mf__step_fetch_row, mf__text_row_done);
    } else {
        t->conn->op_obj = s->run.stmt->handle;
        mf__mysql_conn_run(t->conn, mf__mysql_step_stmt_fetch,
                           mf__stmt_row_done);
    }
}

static void mf__resume_cb(mf_post_t *post)
{
    mf_stream_t *s = post->data;
    mf_mysql_task_t *t = s->task;
    if (t->step != MF_MT_QUERY || !s->held)
        return; /* ended meanwhile (timeout, cancel) */
    s->held = false;
    mf__mysql_arena_release(t->base._loop, &s->batch);
    s->rows = NULL;
    s->rows_cap = 0;
    s->pub.nrows = 0;
    if (s->last)
        mf__mysql_task_finish(t, MF_STATE_SUCCESS, 0);
    else
        mf__fetch_next(t, s);
}

void mf_task_mysql_next_batch(mf_task_t *task)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    mf_stream_t *s = t->phase == &mf__mysql_stream_phase ? t->phase_data : NULL;
    if (!s || !s->held || t->step != MF_MT_QUERY ||
        mf_list_linked(&s->resume._link))
        return;
    mf_loop_defer(task->_loop, &s->resume);
}

static void mf__stream_run(mf_mysql_task_t *t)
{
    mf_stream_t *s = mf__mysql_task_alloc(t, sizeof *s);
    if (!s) {
        mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
        return;
    }
    memset(s, 0, sizeof *s);
    s->task = t;
    mf__mysql_arena_init(&s->batch, t->client->opts.max_result);
    mf_post_init(&s->resume, mf__resume_cb, s);
    t->phase_data = s;
    if (t->bound) {
        s->run.executed = mf__stmt_executed;
        mf__mysql_stmt_start(t, &s->run);
        return;
    }
    t->conn->op_sql = t->sql;
    t->conn->op_len = t->sql_len;
    mf__mysql_conn_run(t->conn, mf__step_query, mf__text_query_done);
}

static void mf__stream_abort(mf_mysql_task_t *t)
{
    mf_stream_t *s = mf__stream_of(t);
    if (s && t->bound)
        mf__mysql_stmt_run_abort(t, &s->run);
    /* A text stream's MYSQL_RES may be in use by the operation the close
     * cuts off: it goes with the task (mf__stream_release). */
}

static void mf__stream_release(mf_mysql_task_t *t)
{
    mf_stream_t *s = mf__stream_of(t);
    if (!s)
        return;
    if (mf_list_linked(&s->resume._link))
        mf_list_remove(&s->resume._link); /* a resume not run yet */
    if (s->res) {
        /* Cut off mid-result and its connection closed: without a handle
         * the connector frees the result without reading the rest. */
        s->res->handle = NULL;
        mysql_free_result(s->res);
        s->res = NULL;
    }
    mf__mysql_arena_release(t->base._loop, &s->batch);
    mf__mysql_stmt_run_release(&s->run);
}

const mf_mysql_phase_t mf__mysql_stream_phase = {
    "stream", mf__stream_run, mf__stream_abort, mf__stream_release};
