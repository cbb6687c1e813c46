/*
 * mysql_query.c — the text-protocol query phase: one query string (several
 * statements allowed), every result set stored whole (store_result), the
 * next ones read with next_result, values typed per moonflow/mysql.h with
 * text pointing into the connector's rows. A statement error keeps the
 * sets before it.
 *
 * Ownership: each MYSQL_RES belongs to its set (freed with the task); the
 * value and field arrays are task memory. Talks to the connector only
 * through the connection's operation runner.
 */
#include <stdlib.h>
#include <string.h>

#include "mysql_int.h"

/* ---- values ---------------------------------------------------------------
 */

static bool mf__parse_u64(const char *s, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (n == 0 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9 || x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

static void mf__int_value(mf_mysql_value_t *v, bool is_unsigned, const char *s,
                          size_t n)
{
    uint64_t u;
    bool neg = n && s[0] == '-';
    if (mf__parse_u64(s + neg, n - neg, &u)) {
        if (is_unsigned && !neg) {
            v->type = MF_MYSQL_UINT;
            v->u = u;
            return;
        }
        if (!neg && u <= INT64_MAX) {
            v->type = MF_MYSQL_INT;
            v->i = (int64_t)u;
            return;
        }
        if (neg && u <= (uint64_t)INT64_MAX + 1) {
            v->type = MF_MYSQL_INT;
            v->i = (int64_t)(0 - u);
            return;
        }
    }
    v->type = MF_MYSQL_TEXT; /* never expected; the server's text stays */
}

bool mf__mysql_type_is_integer(unsigned type)
{
    switch (type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR:
        return true;
    default:
        return false;
    }
}

void mf__mysql_text_value(mf_mysql_value_t *v, const MYSQL_FIELD *field,
                          const char *data, unsigned long len)
{
    v->len = 0;
    v->s = data;
    if (!data) {
        v->type = MF_MYSQL_NULL;
        return;
    }
    if (mf__mysql_type_is_integer(field->type)) {
        mf__int_value(v, field->flags & UNSIGNED_FLAG, data, len);
    } else if (field->type == MYSQL_TYPE_FLOAT ||
               field->type == MYSQL_TYPE_DOUBLE) {
        v->type = MF_MYSQL_DOUBLE;
        v->d = strtod(data, NULL); /* the row keeps a NUL after each value */
        return;
    } else {
        v->type = MF_MYSQL_TEXT;
    }
    if (v->type == MF_MYSQL_TEXT) {
        v->s = data;
        v->len = len;
    }
}

/* ---- a set ----------------------------------------------------------------
 */

static void mf__fields(mf_mysql_field_t *out, const MYSQL_FIELD *in, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        out[i].name = in[i].name;
        out[i].name_len = in[i].name_length;
        out[i].table = in[i].table ? in[i].table : "";
        out[i].type = in[i].type;
        out[i].flags = in[i].flags;
        out[i].decimals = in[i].decimals;
        out[i].charsetnr = in[i].charsetnr;
    }
}

int mf__mysql_set_from_res(mf_mysql_task_t *t, mf_mysql_set_t *set,
                           MYSQL_RES *res)
{
    set->res = res;
    res->handle = NULL; /* stored whole: freed without its connection */
    unsigned nf = mysql_num_fields(res);
    size_t nr = (size_t)mysql_num_rows(res);
    MYSQL_FIELD *fields = mysql_fetch_fields(res);
    mf_mysql_field_t *f = mf__mysql_task_alloc(t, nf * sizeof(*f));
    mf_mysql_value_t **rows = mf__mysql_task_alloc(
        t, nr * (sizeof(*rows) + nf * sizeof(mf_mysql_value_t)));
    if (!f || !rows)
        return MF_EMSGSIZE;
    mf__fields(f, fields, nf);
    mf_mysql_value_t *v = (mf_mysql_value_t *)(void *)(rows + nr);
    uint64_t bytes = 0;
    for (size_t r = 0; r < nr; r++) {
        MYSQL_ROW row = mysql_fetch_row(res); /* stored: no I/O */
        unsigned long *lens = mysql_fetch_lengths(res);
        rows[r] = v;
        for (unsigned c = 0; c < nf; c++, v++) {
            mf__mysql_text_value(v, &fields[c], row[c], lens[c]);
            bytes += lens[c] + 1;
        }
    }
    if (mf__mysql_arena_charge(&t->arena, bytes) < 0) {
        t->overflow = true;
        return MF_EMSGSIZE;
    }
    set->pub.nfields = nf;
    set->pub.fields = f;
    set->pub.nrows = nr;
    set->pub.rows = (const mf_mysql_value_t *const *)rows;
    return 0;
}

void mf__mysql_set_counts(mf_mysql_set_t *set, MYSQL *mysql)
{
    my_ulonglong affected = mysql_affected_rows(mysql);
    set->pub.affected_rows = affected == (my_ulonglong)-1 ? 0 : affected;
    set->pub.insert_id = mysql_insert_id(mysql);
    set->pub.warnings = mysql_warning_count(mysql);
    set->pub.server_status = mysql->server_status;
}

/* ---- the phase ------------------------------------------------------------
 */

static void mf__store(mf_mysql_conn_t *conn);

int mf__mysql_step_query(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_real_query_start(&conn->ret.i, &conn->mysql, conn->op_sql,
                                      conn->op_len);
    return mysql_real_query_cont(&conn->ret.i, &conn->mysql, ready);
}

static int mf__step_store(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_store_result_start(&conn->ret.res, &conn->mysql);
    return mysql_store_result_cont(&conn->ret.res, &conn->mysql, ready);
}

static int mf__step_next(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_next_result_start(&conn->ret.i, &conn->mysql);
    return mysql_next_result_cont(&conn->ret.i, &conn->mysql, ready);
}

static void mf__next_done(mf_mysql_conn_t *conn)
{
    if (conn->ret.i > 0) /* a later statement failed: the sets stay */
        mf__mysql_task_fail_conn(conn->task);
    else if (conn->ret.i == 0)
        mf__store(conn);
    else
        mf__mysql_task_finish(conn->task, MF_STATE_SUCCESS, 0);
}

/* Over max_result: the rest of the results cannot be read into the task,
 * so the connection is not handed out again. */
static void mf__overflow(mf_mysql_task_t *t)
{
    t->conn->broken = true;
    mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
}

static void mf__store_done(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = conn->task;
    MYSQL_RES *res = conn->ret.res;
    if (!res && mysql_field_count(&conn->mysql)) {
        mf__mysql_task_fail_conn(t); /* the rows did not arrive */
        return;
    }
    mf_mysql_set_t *set = mf__mysql_task_add_set(t);
    if (!set) {
        if (res)
            mysql_free_result(res);
        mf__overflow(t);
        return;
    }
    if (res && mf__mysql_set_from_res(t, set, res) < 0) {
        mf__overflow(t);
        return;
    }
    mf__mysql_set_counts(set, &conn->mysql);
    if (mysql_more_results(&conn->mysql))
        mf__mysql_conn_run(conn, mf__step_next, mf__next_done);
    else
        mf__mysql_task_finish(t, MF_STATE_SUCCESS, 0);
}

static void mf__store(mf_mysql_conn_t *conn)
{
    mf__mysql_conn_run(conn, mf__step_store, mf__store_done);
}

static void mf__query_done(mf_mysql_conn_t *conn)
{
    if (conn->ret.i)
        mf__mysql_task_fail_conn(conn->task);
    else
        mf__store(conn);
}

static void mf__text_run(mf_mysql_task_t *t)
{
    t->conn->op_sql = t->sql;
    t->conn->op_len = t->sql_len;
    mf__mysql_conn_run(t->conn, mf__mysql_step_query, mf__query_done);
}

const mf_mysql_phase_t mf__mysql_text_phase = {"text", mf__text_run, NULL,
                                               NULL};
