/*
 * mysql_task.c — the mysql task kind: the query and parameters (copied),
 * dispatch through the pool or a session, the query phase, the wait and
 * query timeouts and cancel (a query cut off is KILLed on the server; a
 * canceled stored query of its own runs on to its end, within its query
 * timeout, and keeps its connection),
 * results and errors; and sessions, which pin one connection to a
 * sequence of tasks run one at a time.
 *
 * Ownership: the task owns its arena (the SQL, parameters, result arrays,
 * error text) and the MYSQL_RES of its sets, released in destroy after the
 * callback. A session is loop memory owned by its caller until closed, then
 * by the client until its last task ended.
 */
#include <errmsg.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <string.h>

#include "mysql_int.h"

/* ---- errors ---------------------------------------------------------------
 */

void mf__mysql_task_keep_error(mf_mysql_task_t *t, unsigned code,
                               const char *sqlstate, const char *message)
{
    t->err.code = code;
    snprintf(t->err.sqlstate, sizeof t->err.sqlstate, "%s",
             sqlstate ? sqlstate : "");
    t->err.message = NULL;
    if (!message || !*message)
        return;
    size_t n = strlen(message);
    if (n > MF_MYSQL_MESSAGE_MAX)
        n = MF_MYSQL_MESSAGE_MAX;
    /* Not charged to max_result: an explanation is never refused. */
    uint64_t limit = t->arena.limit;
    t->arena.limit = 0;
    char *copy = mf__mysql_arena_alloc(t->base._loop, &t->arena, n + 1);
    t->arena.limit = limit;
    if (!copy)
        return; /* the code and SQLSTATE stay */
    memcpy(copy, message, n);
    copy[n] = '\0';
    t->err.message = copy;
}

/* ---- memory ---------------------------------------------------------------
 */

void *mf__mysql_task_alloc(mf_mysql_task_t *t, size_t size)
{
    void *p = mf__mysql_arena_alloc(t->base._loop, &t->arena, size);
    if (!p)
        t->overflow = true;
    return p;
}

int mf__mysql_task_row_room(mf_mysql_task_t *t, mf_mysql_result_t *r,
                            mf_mysql_value_t ***rows, size_t *cap)
{
    if (r->nrows < *cap)
        return 0;
    size_t grown_cap = *cap ? 2 * *cap : 8;
    mf_mysql_value_t **grown =
        mf__mysql_task_alloc(t, grown_cap * sizeof *grown);
    if (!grown)
        return -1;
    if (r->nrows)
        memcpy(grown, *rows, r->nrows * sizeof *grown);
    *rows = grown; /* the old array stays in the arena */
    *cap = grown_cap;
    r->rows = (const mf_mysql_value_t *const *)grown;
    return 0;
}

mf_mysql_set_t *mf__mysql_task_add_set(mf_mysql_task_t *t)
{
    if (t->nsets == t->sets_cap) {
        size_t cap = t->sets_cap ? 2 * t->sets_cap : 2;
        mf_mysql_set_t *sets = mf__mysql_task_alloc(t, cap * sizeof(*sets));
        if (!sets)
            return NULL;
        if (t->nsets)
            memcpy(sets, t->sets, t->nsets * sizeof(*sets));
        t->sets = sets; /* the old array stays in the arena until destroy */
        t->sets_cap = cap;
    }
    mf_mysql_set_t *set = &t->sets[t->nsets++];
    memset(set, 0, sizeof(*set));
    return set;
}

/* ---- the run --------------------------------------------------------------
 */

static void mf__task_done(mf_mysql_task_t *t, int state, int error)
{
    mf_timer_stop(t->base._loop, &t->timer);
    t->step = MF_MT_DONE;
    mf_task_complete(&t->base, state, error);
}

/* The task runs its phase on conn: a connection it waited for, or its
 * session's. */
static void mf__task_attach(mf_mysql_task_t *t, mf_mysql_conn_t *conn)
{
    mf_timer_stop(t->base._loop, &t->timer);
    t->conn = conn;
    conn->task = t;
    if (t->session) {
        t->session->conn = conn;
        conn->session = t->session;
        conn->dirty = true; /* whatever it runs: reset before the next user */
    }
    t->step = MF_MT_QUERY;
    uint32_t ms = t->client->opts.query_timeout_ms;
    if (ms)
        mf_timer_start(t->base._loop, &t->timer, ms);
    t->phase->run(t);
}

void mf__mysql_task_finish(mf_mysql_task_t *t, int state, int error)
{
    mf_mysql_conn_t *conn = t->conn;
    mf_mysql_session_t *s = t->session;
    t->conn = NULL;
    conn->task = NULL;
    unsigned status = conn->mysql.server_status;
    if (!s && (status & SERVER_STATUS_IN_TRANS))
        conn->dirty = true; /* a transaction left open: roll it back */
    mf__mysql_client_learn_status(t->client, status);
    mf__task_done(t, state, error);
    if (!s) {
        mf__mysql_client_release(conn);
        return;
    }
    if (conn->broken) {
        s->broken = true;
        s->conn = NULL;
        mf__mysql_client_release(conn); /* closes it */
    }
    mf__mysql_session_next(s);
}

void mf__mysql_task_piped_done(mf_mysql_task_t *t, unsigned status, int state,
                               int error)
{
    t->pipe = NULL;
    mf__mysql_client_learn_status(t->client, status);
    mf__task_done(t, state, error);
}

void mf__mysql_task_fail_conn(mf_mysql_task_t *t)
{
    MYSQL *m = &t->conn->mysql;
    unsigned code = mysql_errno(m);
    int state, error;
    mf__mysql_task_keep_error(t, code, mysql_sqlstate(m), mysql_error(m));
    mf__mysql_error_map(code, mysql_error(m), &state, &error);
    if (mf__mysql_conn_error_is_fatal(code))
        t->conn->broken = true;
    mf__mysql_task_finish(t, state, error);
}

/* A task waiting for a connection fails (queue full, open failed with the
 * connector's words in code/sqlstate/message, or its wait timed out). */
static void mf__task_fail_waiting(mf_mysql_task_t *t, int state, int error,
                                  unsigned code, const char *sqlstate,
                                  const char *message)
{
    if (code)
        mf__mysql_task_keep_error(t, code, sqlstate, message);
    mf__task_done(t, state, error);
    if (t->session) {
        t->session->broken = true; /* it never got its connection */
        mf__mysql_session_next(t->session);
    }
}

/* Ends a task before its phase did: a timeout, or the engine's cancel. A
 * query cut off is KILLed on the server and its connection closed. */
static void mf__task_abort(mf_mysql_task_t *t, int state, int error)
{
    mf_mysql_session_t *s = t->session;
    switch (t->step) {
    case MF_MT_WAITING:
        mf__mysql_client_unwait(&t->waiter);
        break;
    case MF_MT_QUEUED:
        mf_list_remove(&t->link);
        mf__task_done(t, state, error);
        return; /* the running task of its session goes on */
    case MF_MT_PIPED:
        mf__mysql_pipe_abandon(t);
        mf__task_done(t, state, error);
        return; /* the others on its pipeline go on */
    case MF_MT_QUERY: {
        mf_mysql_conn_t *conn = t->conn;
        if (t->phase->abort)
            t->phase->abort(t);
        t->conn = NULL;
        conn->task = NULL;
        if (s) {
            s->broken = true;
            s->conn = NULL;
        }
        mf__mysql_client_kill(conn);
        break;
    }
    default:
        return;
    }
    mf__task_done(t, state, error);
    if (s)
        mf__mysql_session_next(s);
}

static void mf__task_timer_cb(mf_timer_t *timer)
{
    mf_mysql_task_t *t = timer->data;
    if (t->step == MF_MT_WAITING) /* not the query's time: the pool's */
        snprintf(t->pool_why, sizeof t->pool_why,
                 "mysql: waited %u ms for a connection",
                 (unsigned)t->client->opts.wait_timeout_ms);
    mf__task_abort(t, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
}

/* ---- the pool's answers (through t->waiter) ---------------------------------
 */

static mf_mysql_task_t *mf__task_of_waiter(mf_mysql_waiter_t *w)
{
    return mf_container_of(w, mf_mysql_task_t, waiter);
}

static void mf__waiter_granted(mf_mysql_waiter_t *w, mf_mysql_conn_t *conn)
{
    mf__task_attach(mf__task_of_waiter(w), conn);
}

static void mf__waiter_failed(mf_mysql_waiter_t *w, int state, int error,
                              unsigned code, const char *sqlstate,
                              const char *message)
{
    mf__task_fail_waiting(mf__task_of_waiter(w), state, error, code, sqlstate,
                          message);
}

static const mf_mysql_waiter_ops_t mf__task_waiter_ops = {mf__waiter_granted,
                                                          mf__waiter_failed};

static void mf__task_run(mf_mysql_task_t *t)
{
    mf_mysql_session_t *s = t->session;
    if (s && s->broken) {
        mf__task_done(t, MF_STATE_SYS_ERROR, MF_ECLOSED);
        mf__mysql_session_next(s);
        return;
    }
    if (s && s->conn) {
        mf__task_attach(t, s->conn);
        return;
    }
    t->step = MF_MT_WAITING;
    if (mf__mysql_client_acquire(t->client, &t->waiter) < 0) {
        snprintf(t->pool_why, sizeof t->pool_why,
                 "mysql: no free connection in the pool of %u (queue full)",
                 (unsigned)t->client->opts.max_connections);
        mf__task_fail_waiting(t, MF_STATE_TASK_ERROR, MF_EBUSY, 0, NULL, NULL);
        return;
    }
    if (t->step == MF_MT_WAITING) /* not served at once */
        mf_timer_start(t->base._loop, &t->timer,
                       t->client->opts.wait_timeout_ms);
}

static void mf__task_dispatch(mf_task_t *task)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    if (t->unstored) {
        mf__task_done(t, MF_STATE_TASK_ERROR, MF_ENOMEM);
        return;
    }
    if (!t->sql || t->invalid) {
        mf__task_done(t, MF_STATE_TASK_ERROR, MF_EINVAL);
        return;
    }
    if (t->batch_rows)
        t->phase = &mf__mysql_stream_phase;
    else if (t->bound)
        t->phase = &mf__mysql_stmt_phase;
    else
        t->phase = &mf__mysql_text_phase;
    mf_mysql_session_t *s = t->session;
    if (s && s->closed) {
        mf__task_done(t, MF_STATE_TASK_ERROR, MF_EINVAL);
        return;
    }
    if (s && s->running) {
        t->step = MF_MT_QUEUED;
        mf_list_push_back(&s->queue, &t->link);
        return;
    }
    if (s)
        s->running = t;
    if (mf__mysql_pipe_wants(t)) {
        mf__mysql_pipe_submit(t);
        return;
    }
    mf__task_run(t);
}

/* Whether a canceled task's query may run on to its end instead of being
 * KILLed: a query of its own (no session: an abandoned transaction must
 * roll back now) that stores its result (a stream may be endless), with a
 * query timeout to bound it. Most such queries are a point select a few
 * hundred microseconds from done; killing it would cost a KILL, a new
 * connection with its authentication and the statements prepared again. */
static bool mf__task_may_run_on(const mf_mysql_task_t *t)
{
    return t->step == MF_MT_QUERY && !t->session &&
           t->phase != &mf__mysql_stream_phase &&
           t->client->opts.query_timeout_ms != 0;
}

/* The engine's per-task timeout comes here too, decided as a timeout: that
 * one KILLs. A plain cancel (the caller left) lets a query that may run on
 * finish; the engine frees the task when it completes (or when the query
 * timeout KILLs it), and its connection goes back to the pool. */
static void mf__task_cancel(mf_task_t *task)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    if (mf_task_state(task) == MF_STATE_CANCELED && mf__task_may_run_on(t))
        return;
    mf__task_abort(t, mf_task_state(task), mf_task_error(task));
}

static void mf__task_destroy(mf_task_t *task)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    if (t->phase && t->phase->release)
        t->phase->release(t);
    for (size_t i = 0; i < t->nsets; i++)
        if (t->sets[i].res)
            mysql_free_result(t->sets[i].res);
    mf__mysql_arena_release(task->_loop, &t->arena);
    mf_loop_free(task->_loop, t, sizeof(*t));
}

static const mf_task_ops_t mf__mysql_ops = {"mysql", mf__task_dispatch,
                                            mf__task_cancel, mf__task_destroy};

/* ---- sessions -------------------------------------------------------------
 */

static void mf__session_free(mf_mysql_session_t *s)
{
    if (s->conn) {
        s->conn->session = NULL;
        mf__mysql_client_release(s->conn); /* dirty: reset before reuse */
    }
    mf_list_remove(&s->link);
    mf_loop_free(s->client->loop, s, sizeof(*s));
}

/* Tasks of a broken session, or failing at once (EBUSY), end inside
 * mf__task_run and call this again: the outer call loops instead of
 * recursing through a long queue. */
void mf__mysql_session_next(mf_mysql_session_t *s)
{
    s->running = NULL;
    if (s->advancing) {
        s->again = true;
        return;
    }
    s->advancing = true;
    do {
        s->again = false;
        mf_list_t *node = mf_list_pop_front(&s->queue);
        if (!node)
            break;
        mf_mysql_task_t *t = mf_container_of(node, mf_mysql_task_t, link);
        s->running = t;
        mf__task_run(t);
    } while (s->again);
    s->advancing = false;
    if (!s->running && mf_list_empty(&s->queue) && s->closed)
        mf__session_free(s);
}

mf_mysql_session_t *mf_mysql_session_open(mf_mysql_client_t *client)
{
    mf_mysql_session_t *s = mf_loop_alloc(client->loop, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->client = client;
    mf_list_init(&s->queue);
    mf_list_push_back(&client->sessions, &s->link);
    return s;
}

bool mf_mysql_session_broken(const mf_mysql_session_t *session)
{
    return session->broken;
}

void mf_mysql_session_close(mf_mysql_session_t *s)
{
    if (!s || s->closed)
        return;
    s->closed = true;
    if (s->running) {
        if (s->conn)
            s->conn->broken = true; /* closed when its task ends */
        return;
    }
    mf__session_free(s);
}

/* ---- public ---------------------------------------------------------------
 */

mf_task_t *mf_task_mysql_create(mf_mysql_client_t *client, mf_task_cb cb,
                                void *user)
{
    mf_mysql_task_t *t = mf_loop_alloc(client->loop, sizeof(*t));
    memset(t, 0, sizeof(*t));
    mf_task_init(&t->base, &mf__mysql_ops, client->loop, cb, user);
    t->client = client;
    mf_list_init(&t->link);
    mf__mysql_waiter_init(&t->waiter, &mf__task_waiter_ops);
    mf_timer_init(&t->timer, mf__task_timer_cb, t);
    mf__mysql_arena_init(&t->arena, client->opts.max_result);
    return &t->base;
}

/* A copy in task memory not charged to max_result (the task's own input);
 * NULL when even a checked malloc refused (the task fails with ENOMEM). */
static char *mf__task_copy(mf_mysql_task_t *t, const char *s, size_t n)
{
    uint64_t limit = t->arena.limit;
    t->arena.limit = 0;
    char *copy = mf__mysql_arena_alloc(t->base._loop, &t->arena, n + 1);
    t->arena.limit = limit;
    if (!copy) {
        t->unstored = true;
        return NULL;
    }
    if (n)
        memcpy(copy, s, n);
    copy[n] = '\0';
    return copy;
}

int mf_task_mysql_set_query(mf_task_t *task, const char *sql, size_t len)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    if (!sql) {
        t->invalid = true;
        return MF_EINVAL;
    }
    if (!len)
        len = strlen(sql);
    t->sql = mf__task_copy(t, sql, len);
    t->sql_len = len;
    return t->sql ? 0 : MF_ENOMEM;
}

int mf_task_mysql_bind(mf_task_t *task, size_t n,
                       const mf_mysql_param_t *params)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    if (n && !params) {
        t->invalid = true;
        return MF_EINVAL;
    }
    t->bound = true;
    t->nparams = 0;
    t->params = NULL;
    if (!n)
        return 0;
    t->params = (mf_mysql_param_t *)(void *)mf__task_copy(
        t, (const char *)params, n * sizeof(*params));
    if (!t->params)
        return MF_ENOMEM;
    t->nparams = n;
    for (size_t i = 0; i < n; i++) {
        mf_mysql_param_t *p = &t->params[i];
        if (p->type > MF_MYSQL_BLOB || p->type < MF_MYSQL_NULL) {
            t->invalid = true;
        } else if (p->type == MF_MYSQL_TEXT || p->type == MF_MYSQL_BLOB) {
            if (!p->s && p->len)
                t->invalid = true;
            else if (!(p->s = mf__task_copy(t, p->s ? p->s : "",
                                            p->s ? p->len : 0)))
                return MF_ENOMEM;
        }
    }
    return t->invalid ? MF_EINVAL : 0;
}

void mf_task_mysql_set_session(mf_task_t *task, mf_mysql_session_t *session)
{
    mf__mysql_task_of(task)->session = session;
}

void mf_task_mysql_stream(mf_task_t *task, size_t batch_rows,
                          mf_mysql_batch_cb on_batch, void *user)
{
    mf_mysql_task_t *t = mf__mysql_task_of(task);
    t->batch_rows = batch_rows ? batch_rows : 256;
    t->on_batch = on_batch;
    t->batch_user = user;
    if (!on_batch)
        t->invalid = true;
}

size_t mf_task_mysql_nresults(const mf_task_t *task)
{
    return mf__mysql_task_of(task)->nsets;
}

const mf_mysql_result_t *mf_task_mysql_result(const mf_task_t *task, size_t i)
{
    const mf_mysql_task_t *t = mf__mysql_task_of(task);
    return i < t->nsets ? &t->sets[i].pub : NULL;
}

const mf_mysql_error_t *mf_task_mysql_error(const mf_task_t *task)
{
    return &mf__mysql_task_of(task)->err;
}

const char *mf_task_mysql_pool_error(const mf_task_t *task)
{
    const mf_mysql_task_t *t = mf__mysql_task_of(task);
    return t->pool_why[0] ? t->pool_why : NULL;
}
