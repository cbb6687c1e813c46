/*
 * mysql_pipeline.c — pipelined prepared statements (see mysql_pipeline.h):
 * choosing a pipeline, holding its connection, preparing through the
 * connector while nothing is in flight, writing COM_STMT_EXECUTE packets
 * with our codec, reading the replies in order into the tasks' results,
 * and failing exactly the statements in flight or queued when the
 * connection breaks.
 *
 * Never retried: a statement that may have been written is failed with the
 * connection, never sent again (it may have been applied).
 *
 * May call: the client (acquire, release), the connection (its runner for
 * the connector's prepare and close), the statement cache, the codec, the
 * task (results, completion). Buffers grow to the largest burst and stay:
 * a warm pipeline allocates nothing per statement but task memory.
 */
#include <errmsg.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "mysql_pipeline.h"

static void mf__pipe_pump(mf_mysql_pipe_t *p);
static void mf__pipe_raw_io(mf_mysql_conn_t *conn, unsigned events);
static void mf__pipe_flush_cb(mf_post_t *post);

/* ---- choosing a pipeline -------------------------------------------------
 */

bool mf__mysql_pipe_wants(const mf_mysql_task_t *t)
{
    const mf_mysql_client_t *c = t->client;
    /* TLS: the connector owns the TLS session; our codec would bypass it. */
    return t->bound && !t->session && !t->batch_rows &&
           c->opts.pipeline > 1 && c->ep.ssl == MF_MYSQL_SSL_DISABLED;
}

static unsigned mf__load(const mf_mysql_pipe_t *p)
{
    return p->nqueued + p->nsent;
}

static mf_mysql_pipe_t *mf__pipe_of_waiter(mf_mysql_waiter_t *w)
{
    return mf_container_of(w, mf_mysql_pipe_t, waiter);
}

static void mf__pipe_granted(mf_mysql_waiter_t *w, mf_mysql_conn_t *conn);
static void mf__pipe_failed(mf_mysql_waiter_t *w, int state, int error,
                            unsigned code, const char *sqlstate,
                            const char *message);
static const mf_mysql_waiter_ops_t mf__pipe_waiter_ops = {mf__pipe_granted,
                                                          mf__pipe_failed};

static mf_mysql_pipe_t *mf__pipe_new(mf_mysql_client_t *c)
{
    mf_mysql_pipe_t *p = mf_xcalloc(1, sizeof *p);
    p->client = c;
    p->depth = c->opts.pipeline;
    p->ring = mf_xcalloc(p->depth, sizeof *p->ring);
    mf_list_init(&p->queue);
    mf_post_init(&p->flush_post, mf__pipe_flush_cb, p);
    mf__mysql_waiter_init(&p->waiter, &mf__pipe_waiter_ops);
    mf_list_push_back(&c->pipes, &p->link);
    c->npipes++;
    return p;
}

/* Fills connections to their depth before opening more (fewer
 * connections cost the server less), up to max_connections pipelines;
 * past that the least loaded one queues. NULL: max_waiters tasks already
 * wait beyond what the pipelines can have in flight. */
static mf_mysql_pipe_t *mf__pipe_pick(mf_mysql_client_t *c)
{
    mf_mysql_pipe_t *idle = NULL, *least = NULL;
    unsigned queued = 0;
    mf_list_t *pos;
    mf_list_foreach(pos, &c->pipes)
    {
        mf_mysql_pipe_t *p = mf_container_of(pos, mf_mysql_pipe_t, link);
        queued += p->nqueued;
        bool active = p->conn || p->acquiring;
        if (active && mf__load(p) < p->depth)
            return p;
        if (!active && !idle)
            idle = p;
        if (active && (!least || mf__load(p) < mf__load(least)))
            least = p;
    }
    if (idle)
        return idle;
    if (c->npipes < c->opts.max_connections)
        return mf__pipe_new(c);
    return queued < c->opts.max_waiters ? least : NULL;
}

void mf__mysql_pipe_submit(mf_mysql_task_t *t)
{
    mf_mysql_client_t *c = t->client;
    mf_mysql_pipe_t *p = mf__pipe_pick(c);
    if (!p) {
        snprintf(t->pool_why, sizeof t->pool_why,
                 "mysql: %u statements already wait in the pipelines",
                 (unsigned)c->opts.max_waiters);
        mf__mysql_task_piped_done(t, 0, MF_STATE_TASK_ERROR, MF_EBUSY);
        return;
    }
    t->pipe = p;
    t->step = MF_MT_PIPED;
    mf_list_push_back(&p->queue, &t->link);
    p->nqueued++;
    /* One bound for the wait and the query: a pipelined statement has no
     * moment of its own when it gets its connection. */
    uint32_t ms = c->opts.query_timeout_ms;
    if (ms)
        mf_timer_start(t->base._loop, &t->timer, ms);
    mf__pipe_pump(p);
}

/* ---- the connection --------------------------------------------------------
 */

static void mf__read_reset(mf_mysql_pipe_t *p)
{
    p->rstate = MF_PR_FIRST;
    p->ncols = p->col = 0;
    p->set = NULL;
    p->rows = NULL;
    p->rows_cap = 0;
    p->overflow = p->failed = false;
}

/* Nothing in flight or queued: the connection goes back to the pool. */
static void mf__pipe_release(mf_mysql_pipe_t *p)
{
    mf_mysql_conn_t *conn = p->conn;
    conn->raw_io = NULL;
    conn->raw_user = NULL;
    p->conn = NULL;
    p->in_len = 0;
    p->out_len = p->out_off = 0;
    if (conn->mysql.server_status & SERVER_STATUS_IN_TRANS)
        conn->dirty = true; /* a statement began a transaction: reset */
    mf__mysql_client_release(conn);
}

static void mf__pipe_granted(mf_mysql_waiter_t *w, mf_mysql_conn_t *conn)
{
    mf_mysql_pipe_t *p = mf__pipe_of_waiter(w);
    p->acquiring = false;
    p->conn = conn;
    conn->task = NULL;
    conn->raw_io = mf__pipe_raw_io;
    conn->raw_user = p;
    mf__read_reset(p);
    mf__pipe_pump(p);
}

/* Every task queued (none is in flight without a connection) fails the
 * same way. The queue is taken first: a callback may submit anew. */
static void mf__fail_queued(mf_mysql_pipe_t *p, int state, int error,
                            unsigned code, const char *sqlstate,
                            const char *message)
{
    mf_list_t gone;
    mf_list_init(&gone);
    mf_list_splice_back(&gone, &p->queue);
    p->nqueued = 0;
    mf_list_t *node;
    while ((node = mf_list_pop_front(&gone)) != NULL) {
        mf_mysql_task_t *t = mf_container_of(node, mf_mysql_task_t, link);
        if (code)
            mf__mysql_task_keep_error(t, code, sqlstate, message);
        mf__mysql_task_piped_done(t, 0, state, error);
    }
}

static void mf__pipe_failed(mf_mysql_waiter_t *w, int state, int error,
                            unsigned code, const char *sqlstate,
                            const char *message)
{
    mf_mysql_pipe_t *p = mf__pipe_of_waiter(w);
    p->acquiring = false;
    mf__fail_queued(p, state, error, code, sqlstate, message);
}

/* The connection broke (reset, closed, a protocol error): it is closed,
 * and exactly the statements in flight or queued on it fail, with words
 * the handler can see. None is sent again. */
static void mf__pipe_fail_conn(mf_mysql_pipe_t *p, unsigned code,
                               const char *message)
{
    mf_mysql_conn_t *conn = p->conn;
    if (!conn)
        return;
    int state, error;
    mf__mysql_error_map(code, message, &state, &error);
    conn->broken = true;
    mf__pipe_release(p); /* closes it: broken */
    /* A prepare or close cut off by the close: the handles go after it. */
    mf__mysql_stmt_free(p->fresh);
    mf__mysql_stmt_free(p->victim);
    p->fresh = p->victim = NULL;
    p->preparing = false;
    /* The slots first: they were written before anything queued. */
    while (p->nsent) {
        mf_mysql_pipe_slot_t s = p->ring[p->head];
        p->head = (p->head + 1) % p->depth;
        p->nsent--;
        if (s.task) {
            mf__mysql_task_keep_error(s.task, code, "HY000", message);
            mf__mysql_task_piped_done(s.task, 0, state, error);
        }
    }
    mf__read_reset(p);
    mf__fail_queued(p, state, error, code, "HY000", message);
}

static void mf__pipe_lost(mf_mysql_pipe_t *p)
{
    mf__pipe_fail_conn(p, CR_SERVER_LOST, "Lost connection to server during query");
}

/* ---- writing -----------------------------------------------------------------
 */

static int mf__pipe_watch(mf_mysql_pipe_t *p, bool write)
{
    unsigned ev = MF_IO_READ | (write ? MF_IO_WRITE : 0);
    return mf_io_start(p->conn->loop, &p->conn->io, ev);
}

/* Writes what is pending; false when the connection failed (the pipeline
 * has no connection any more). */
static bool mf__pipe_flush(mf_mysql_pipe_t *p)
{
    int fd = p->conn->io.fd;
    while (p->out_off < p->out_len) {
        ssize_t n = send(fd, p->out + p->out_off, p->out_len - p->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (mf__pipe_watch(p, true) == 0)
                return true;
        }
        mf__pipe_lost(p);
        return false;
    }
    p->out_off = p->out_len = 0;
    return true;
}

/* The deferred flush: by now every caller resumed in this iteration has
 * appended its statement. The connection may have gone meanwhile (its
 * bytes went with it). */
static void mf__pipe_flush_cb(mf_post_t *post)
{
    mf_mysql_pipe_t *p = post->data;
    p->flush_queued = false;
    if (p->conn && !p->preparing && p->out_off < p->out_len)
        mf__pipe_flush(p);
}

/* Pending bytes go out from the loop's deferred phase, not from the
 * caller: statements submitted one after another (an mf.parallel, the
 * callers a batch of replies resumed) share one send. A write already
 * waiting for room (out_off > 0) takes the new bytes with it. */
static void mf__pipe_schedule_flush(mf_mysql_pipe_t *p)
{
    if (p->flush_queued || p->out_off != 0 || p->out_len == 0)
        return;
    p->flush_queued = true;
    mf_loop_defer(p->conn->loop, &p->flush_post);
}

/* Appends the task's COM_STMT_EXECUTE to the pending bytes. */
static int mf__pipe_encode(mf_mysql_pipe_t *p, mf_mysql_task_t *t,
                           mf_mysql_stmt_t *s)
{
    bool types = !s->wire_types;
    for (size_t i = 0; !types && i < t->nparams; i++)
        types = mf__mysql_bin_param_type(&t->params[i]) != s->ptypes[i];
    size_t room = p->out_cap - p->out_len;
    size_t need = mf__mysql_bin_execute(p->out + p->out_len, room,
                                        (uint32_t)s->handle->stmt_id,
                                        t->params, t->nparams, types);
    if (need >= 4 + MF_MYSQL_BIN_MAX_PAYLOAD)
        return MF_EMSGSIZE;
    if (need > room) {
        size_t cap = p->out_cap ? p->out_cap : 4096;
        while (cap - p->out_len < need)
            cap *= 2;
        p->out = mf_xrealloc(p->out, cap);
        p->out_cap = cap;
        mf__mysql_bin_execute(p->out + p->out_len, cap - p->out_len,
                              (uint32_t)s->handle->stmt_id, t->params,
                              t->nparams, types);
    }
    p->out_len += need;
    if (types) {
        if (mf__mysql_stmt_note_types(s, t->params, t->nparams) != 0) {
            s->wire_types = false; /* sent again next time */
        } else {
            s->wire_types = true;
            s->types_bound = false; /* the connector's binds are stale */
        }
    }
    return 0;
}

/* ---- preparing through the connector (nothing in flight) -------------------
 */

static mf_mysql_pipe_t *mf__pipe_of_conn(mf_mysql_conn_t *conn)
{
    return conn->raw_user;
}

static mf_mysql_task_t *mf__front(mf_mysql_pipe_t *p)
{
    return mf_list_empty(&p->queue)
               ? NULL
               : mf_container_of(p->queue.next, mf_mysql_task_t, link);
}

static void mf__unqueue(mf_mysql_pipe_t *p, mf_mysql_task_t *t)
{
    mf_list_remove(&t->link);
    p->nqueued--;
}

/* The front task fails before it was written; the others go on. */
static void mf__fail_front(mf_mysql_pipe_t *p, mf_mysql_task_t *t, int state,
                           int error)
{
    mf__unqueue(p, t);
    mf__mysql_task_piped_done(t, p->conn ? p->conn->mysql.server_status : 0,
                              state, error);
}

static void mf__prepare_done(mf_mysql_conn_t *conn)
{
    mf_mysql_pipe_t *p = mf__pipe_of_conn(conn);
    mf_mysql_stmt_t *s = p->fresh;
    p->fresh = NULL;
    p->preparing = false;
    if (conn->ret.i == 0) {
        mf__mysql_stmt_cache_add(conn->stmt_cache, s);
        mf__pipe_pump(p);
        return;
    }
    unsigned code = mysql_stmt_errno(s->handle);
    char msg[MF_MYSQL_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "%s", mysql_stmt_error(s->handle));
    char sqlstate[6];
    snprintf(sqlstate, sizeof sqlstate, "%s", mysql_stmt_sqlstate(s->handle));
    uint64_t hash = s->hash;
    mf__mysql_stmt_free(s);
    if (mf__mysql_conn_error_is_fatal(code)) {
        mf__pipe_fail_conn(p, code, msg);
        return;
    }
    /* The statement's own error (syntax, unknown table): its task fails,
     * if it still waits at the front. */
    mf_mysql_task_t *t = mf__front(p);
    if (t && mf__mysql_sql_hash(t->sql, t->sql_len) == hash) {
        int state, error;
        mf__mysql_error_map(code, msg, &state, &error);
        mf__mysql_task_keep_error(t, code, sqlstate, msg);
        mf__fail_front(p, t, state, error);
    }
    mf__pipe_pump(p);
}

static void mf__prepare_start(mf_mysql_pipe_t *p)
{
    mf_mysql_conn_t *conn = p->conn;
    mf_mysql_stmt_t *s = p->fresh;
    conn->op_obj = s->handle;
    conn->op_sql = s->sql;
    conn->op_len = s->sql_len;
    mf__mysql_conn_run(conn, mf__mysql_step_stmt_prepare, mf__prepare_done);
}

static void mf__close_done(mf_mysql_conn_t *conn)
{
    mf_mysql_pipe_t *p = mf__pipe_of_conn(conn);
    /* The connector freed the handle whatever the outcome; a link that is
     * gone shows in the prepare next. */
    mf__mysql_stmt_free(p->victim);
    p->victim = NULL;
    mf__prepare_start(p);
}

/* The front task's statement is not prepared on this connection: prepare
 * it (closing the least recently used one first when the cache is full). */
static void mf__pipe_prepare(mf_mysql_pipe_t *p, mf_mysql_task_t *t,
                             mf_mysql_stmt_cache_t *cache)
{
    mf_mysql_conn_t *conn = p->conn;
    p->fresh = mf__mysql_stmt_new(&conn->mysql, t->sql, t->sql_len);
    if (!p->fresh) {
        mf__fail_front(p, t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        mf__pipe_pump(p);
        return;
    }
    p->preparing = true;
    p->victim = mf__mysql_stmt_cache_victim(cache);
    if (!p->victim) {
        mf__prepare_start(p);
        return;
    }
    mf__mysql_stmt_cache_remove(cache, p->victim);
    conn->op_obj = p->victim->handle;
    p->victim->handle = NULL;
    mf__mysql_conn_run(conn, mf__mysql_step_stmt_close, mf__close_done);
}

/* ---- the pump --------------------------------------------------------------
 */

/* Checks the front task against its statement; false: it failed (and left
 * the queue). */
static bool mf__pipe_markers_ok(mf_mysql_pipe_t *p, mf_mysql_task_t *t,
                                mf_mysql_stmt_t *s)
{
    unsigned markers = (unsigned)mysql_stmt_param_count(s->handle);
    if (markers == t->nparams)
        return true;
    char msg[128];
    snprintf(msg, sizeof msg,
             "Invalid parameter count: the statement has %u parameter "
             "markers, %zu values were bound",
             markers, t->nparams);
    mf__mysql_task_keep_error(t, CR_INVALID_PARAMETER_NO, "HY000", msg);
    mf__fail_front(p, t, MF_STATE_TASK_ERROR, MF_EINVAL);
    return false;
}

/* Moves queued tasks into flight while there is room, prepares the next
 * statement when nothing is in flight, writes, and gives the connection
 * back when all is answered. */
static void mf__pipe_pump(mf_mysql_pipe_t *p)
{
    if (!p->conn) {
        if (!p->acquiring && p->nqueued) {
            p->acquiring = true;
            if (mf__mysql_client_acquire(p->client, &p->waiter) < 0)
                mf__pipe_failed(&p->waiter, MF_STATE_TASK_ERROR, MF_EBUSY, 0,
                                NULL, NULL);
        }
        return;
    }
    if (p->preparing)
        return;
    while (p->nqueued && p->nsent < p->depth) {
        mf_mysql_task_t *t = mf__front(p);
        mf_mysql_stmt_cache_t *cache = mf__mysql_stmt_cache_of(p->conn);
        if (!cache) {
            mf__fail_front(p, t, MF_STATE_SYS_ERROR, MF_ENOMEM);
            continue;
        }
        mf_mysql_stmt_t *s = mf__mysql_stmt_cache_find(cache, t->sql, t->sql_len);
        if (!s) {
            if (p->nsent == 0)
                mf__pipe_prepare(p, t, cache);
            break; /* the connector needs the socket to itself */
        }
        if (!mf__pipe_markers_ok(p, t, s))
            continue;
        if (mf__pipe_encode(p, t, s) != 0) {
            mf__fail_front(p, t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
            continue;
        }
        mf__unqueue(p, t);
        p->ring[(p->head + p->nsent) % p->depth] =
            (mf_mysql_pipe_slot_t){.task = t, .stmt = s};
        p->nsent++;
    }
    if (p->preparing || !p->conn)
        return;
    mf__pipe_schedule_flush(p);
    if (p->nsent == 0 && p->nqueued == 0)
        mf__pipe_release(p);
}

void mf__mysql_pipe_abandon(mf_mysql_task_t *t)
{
    mf_mysql_pipe_t *p = t->pipe;
    t->pipe = NULL;
    for (unsigned i = 0; i < p->nsent; i++) {
        mf_mysql_pipe_slot_t *s = &p->ring[(p->head + i) % p->depth];
        if (s->task == t) {
            s->task = NULL; /* written: its reply is read and dropped */
            return;
        }
    }
    mf__unqueue(p, t);
    if (p->conn && !p->preparing && p->nsent == 0 && p->nqueued == 0)
        mf__pipe_release(p);
}

/* ---- reading replies ---------------------------------------------------------
 */

static void *mf__task_alloc_cb(void *ctx, size_t size)
{
    return mf__mysql_task_alloc(ctx, size);
}

static mf_mysql_pipe_slot_t *mf__head(mf_mysql_pipe_t *p)
{
    return &p->ring[p->head];
}

/* Whether the head's reply is kept: its task is still there and has not
 * failed or overflowed. */
static mf_mysql_task_t *mf__keeper(mf_mysql_pipe_t *p)
{
    mf_mysql_task_t *t = mf__head(p)->task;
    return t && !p->overflow && !p->failed ? t : NULL;
}

/* The head's reply is complete: its task completes, the next one's reply
 * is read, more may be written. */
static void mf__slot_done(mf_mysql_pipe_t *p, unsigned status)
{
    mf_mysql_pipe_slot_t s = *mf__head(p);
    bool overflow = p->overflow, failed = p->failed;
    int fail_error = p->fail_error;
    p->head = (p->head + 1) % p->depth;
    p->nsent--;
    mf__read_reset(p);
    if (s.task) {
        if (overflow)
            mf__mysql_task_piped_done(s.task, status, MF_STATE_TASK_ERROR,
                                      MF_EMSGSIZE);
        else if (failed)
            mf__mysql_task_piped_done(s.task, status, MF_STATE_TASK_ERROR,
                                      fail_error);
        else
            mf__mysql_task_piped_done(s.task, status, MF_STATE_SUCCESS, 0);
    }
}

static void mf__reply_err(mf_mysql_pipe_t *p, const uint8_t *pl, size_t n)
{
    mf_mysql_bin_err_t e;
    mf_mysql_task_t *t = mf__keeper(p);
    if (mf__mysql_bin_err(pl, n, &e) != 0)
        e = (mf_mysql_bin_err_t){.code = CR_MALFORMED_PACKET,
                                 .sqlstate = "HY000",
                                 .message = "malformed error packet",
                                 .message_len = 22};
    /* Whether the server took the types before it failed is unknown. */
    mf__head(p)->stmt->wire_types = false;
    if (t) {
        char msg[MF_MYSQL_MESSAGE_MAX];
        size_t len = e.message_len < sizeof msg - 1 ? e.message_len
                                                    : sizeof msg - 1;
        memcpy(msg, e.message, len);
        msg[len] = '\0';
        int state, error;
        mf__mysql_error_map(e.code, msg, &state, &error);
        mf__mysql_task_keep_error(t, e.code, e.sqlstate, msg);
        p->failed = true;
        p->fail_error = error;
    }
    mf__slot_done(p, p->conn ? p->conn->mysql.server_status : 0);
}

static void mf__set_counts(mf_mysql_pipe_t *p, const mf_mysql_bin_ok_t *ok)
{
    p->conn->mysql.server_status = ok->status; /* for the release's check */
    if (!mf__keeper(p) || !p->set)
        return;
    mf_mysql_result_t *r = &p->set->pub;
    r->affected_rows = r->nfields ? r->nrows : ok->affected_rows;
    r->insert_id = ok->insert_id;
    r->warnings = ok->warnings;
    r->server_status = ok->status;
}

/* An OK or the EOF after the rows: the set is complete; another follows
 * when the server says so (a procedure's). */
static void mf__set_end(mf_mysql_pipe_t *p, const mf_mysql_bin_ok_t *ok)
{
    mf__set_counts(p, ok);
    if (ok->status & SERVER_MORE_RESULTS_EXIST) {
        p->rstate = MF_PR_FIRST;
        p->set = NULL;
        return;
    }
    mf__slot_done(p, ok->status);
}

static void mf__new_set(mf_mysql_pipe_t *p)
{
    mf_mysql_task_t *t = mf__keeper(p);
    p->rows = NULL;
    p->rows_cap = 0;
    p->set = t ? mf__mysql_task_add_set(t) : NULL;
    if (t && !p->set)
        p->overflow = true;
}

static void mf__cols_reserve(mf_mysql_pipe_t *p, unsigned n)
{
    if (n <= p->cols_cap)
        return;
    p->cols = mf_xrealloc(p->cols, n * sizeof *p->cols);
    p->cols_cap = n;
}

/* The columns are known (their names already in task memory): the
 * set's field list. */
static void mf__cols_done(mf_mysql_pipe_t *p)
{
    mf_mysql_task_t *t = mf__keeper(p);
    p->rstate = MF_PR_ROWS;
    if (!t || !p->set)
        return;
    mf_mysql_field_t *f = mf__mysql_task_alloc(t, p->ncols * sizeof *f);
    if (!f) {
        p->overflow = true;
        return;
    }
    for (unsigned i = 0; i < p->ncols; i++) {
        const mf_mysql_bin_col_t *c = &p->cols[i];
        f[i] = (mf_mysql_field_t){c->name,  c->name_len, c->table,
                                  c->type,  c->flags,    c->decimals,
                                  c->charsetnr};
    }
    p->set->pub.nfields = p->ncols;
    p->set->pub.fields = f;
}

/* A column's names, which point into a packet (whose bytes move once
 * parsed) or into the statement's fields (a later prepare frees them),
 * are copied into the task's memory. */
static void mf__keep_names(mf_mysql_pipe_t *p, mf_mysql_bin_col_t *c)
{
    mf_mysql_task_t *t = mf__keeper(p);
    if (!t)
        return; /* dropped: the names are never read */
    char *names = mf__mysql_task_alloc(t, c->name_len + c->table_len + 2);
    if (!names) {
        p->overflow = true;
        return;
    }
    memcpy(names, c->name, c->name_len);
    names[c->name_len] = '\0';
    memcpy(names + c->name_len + 1, c->table, c->table_len);
    names[c->name_len + 1 + c->table_len] = '\0';
    c->name = names;
    c->table = names + c->name_len + 1;
}

/* The server sent no column definitions (the connector asked it to cache
 * them): they are as the server last sent them for this statement, to a
 * pipeline (its types kept on the statement) or else to the connector (the
 * handle's fields); the names are the handle's. false: they do not match. */
static bool mf__cols_from_stmt(mf_mysql_pipe_t *p)
{
    const mf_mysql_stmt_t *s = mf__head(p)->stmt;
    MYSQL_STMT *h = s->handle;
    const MYSQL_FIELD *fs = mariadb_stmt_fetch_fields(h);
    if (!fs || mysql_stmt_field_count(h) != p->ncols)
        return false;
    bool wire = s->wire_ncols == p->ncols;
    for (unsigned i = 0; i < p->ncols; i++) {
        const MYSQL_FIELD *f = &fs[i];
        const char *table = f->table ? f->table : "";
        mf_mysql_stmt_coltype_t ct = {f->type, f->flags, f->decimals,
                                      f->charsetnr};
        if (wire)
            ct = s->wire_cols[i];
        p->cols[i] = (mf_mysql_bin_col_t){
            f->name, f->name_length, table, strlen(table), ct.type,
            ct.flags, ct.decimals, ct.charsetnr};
        mf__keep_names(p, &p->cols[i]);
    }
    /* The EOF that ends the (absent) definitions still comes. */
    p->rstate = MF_PR_COLS_EOF;
    return true;
}

/* A column definition the server sent is kept on the statement: the next
 * time it may send none. */
static void mf__note_wire_col(mf_mysql_pipe_t *p, const mf_mysql_bin_col_t *c)
{
    mf_mysql_stmt_t *s = mf__head(p)->stmt;
    if (p->col == 0) {
        s->wire_ncols = 0; /* complete only with the last column */
        if (s->wire_cols_cap < p->ncols) {
            s->wire_cols = mf_xrealloc(s->wire_cols,
                                       p->ncols * sizeof *s->wire_cols);
            s->wire_cols_cap = p->ncols;
        }
    }
    s->wire_cols[p->col] =
        (mf_mysql_stmt_coltype_t){c->type, c->flags, c->decimals, c->charsetnr};
    if (p->col + 1 == p->ncols)
        s->wire_ncols = p->ncols;
}

static bool mf__read_first(mf_mysql_pipe_t *p, const uint8_t *pl, size_t n)
{
    mf_mysql_bin_ok_t ok;
    if (mf__mysql_bin_is_err(pl, n)) {
        mf__reply_err(p, pl, n);
        return true;
    }
    if (n && pl[0] == 0x00) {
        if (mf__mysql_bin_ok(pl, n, &ok) != 0)
            return false;
        mf__new_set(p);
        mf__set_end(p, &ok);
        return true;
    }
    const uint8_t *q = pl, *end = pl + n;
    uint64_t ncols;
    if (mf__mysql_bin_lenenc(&q, end, &ncols) != 0 || ncols == 0 ||
        ncols > 4096)
        return false; /* 0xfb: LOAD DATA LOCAL, never asked for */
    p->ncols = (unsigned)ncols;
    p->col = 0;
    mf__cols_reserve(p, p->ncols);
    mf__new_set(p);
    /* With metadata caching, one more byte: whether definitions follow. */
    if (q < end && *q == 0)
        return mf__cols_from_stmt(p);
    p->rstate = MF_PR_COLS;
    return true;
}

static bool mf__read_col(mf_mysql_pipe_t *p, const uint8_t *pl, size_t n)
{
    if (mf__mysql_bin_coldef(pl, n, &p->cols[p->col]) != 0)
        return false;
    mf__note_wire_col(p, &p->cols[p->col]);
    mf__keep_names(p, &p->cols[p->col]);
    if (++p->col == p->ncols)
        p->rstate = MF_PR_COLS_EOF;
    return true;
}

static bool mf__append_row(mf_mysql_pipe_t *p, const uint8_t *pl, size_t n)
{
    mf_mysql_task_t *t = mf__keeper(p);
    if (!t || !p->set)
        return true; /* dropped */
    mf_mysql_result_t *r = &p->set->pub;
    if (mf__mysql_task_row_room(t, r, &p->rows, &p->rows_cap) != 0) {
        p->overflow = true;
        return true;
    }
    mf_mysql_value_t *v = mf__mysql_task_alloc(t, p->ncols * sizeof *v);
    if (!v) {
        p->overflow = true;
        return true;
    }
    int rc = mf__mysql_bin_row(pl, n, p->cols, p->ncols, v, mf__task_alloc_cb, t);
    if (rc == -1)
        return false;
    if (rc == -2) {
        p->overflow = true;
        return true;
    }
    p->rows[r->nrows++] = v;
    return true;
}

/* One packet of the head's reply; false: the stream makes no sense. */
static bool mf__pipe_packet(mf_mysql_pipe_t *p, const uint8_t *pl, size_t n)
{
    mf_mysql_bin_ok_t ok;
    if (p->nsent == 0)
        return false; /* nothing was asked */
    switch (p->rstate) {
    case MF_PR_FIRST:
        return mf__read_first(p, pl, n);
    case MF_PR_COLS:
        return mf__read_col(p, pl, n);
    case MF_PR_COLS_EOF:
        if (mf__mysql_bin_eof(pl, n, &ok) != 0)
            return false;
        mf__cols_done(p);
        return true;
    case MF_PR_ROWS:
    default:
        if (mf__mysql_bin_is_eof(pl, n)) {
            if (mf__mysql_bin_eof(pl, n, &ok) != 0)
                return false;
            mf__set_end(p, &ok);
            return true;
        }
        if (mf__mysql_bin_is_err(pl, n)) {
            mf__reply_err(p, pl, n);
            return true;
        }
        return mf__append_row(p, pl, n);
    }
}

/* Consumes whole packets from the input; false when the connection went
 * (failed, or given back after the last reply). */
static bool mf__pipe_parse(mf_mysql_pipe_t *p)
{
    mf_mysql_conn_t *conn = p->conn;
    size_t off = 0;
    mf_mysql_bin_packet_t pk;
    int rc;
    while (p->conn == conn &&
           (rc = mf__mysql_bin_frame(p->in + off, p->in_len - off, &pk)) != 0) {
        if (rc < 0 || !mf__pipe_packet(p, pk.payload, pk.len)) {
            mf__pipe_fail_conn(p, CR_MALFORMED_PACKET,
                               "Malformed packet in a pipelined reply");
            return false;
        }
        off += pk.total;
    }
    if (p->conn != conn)
        return false;
    memmove(p->in, p->in + off, p->in_len - off);
    p->in_len -= off;
    return true;
}

/* Reads until the socket is empty, parsing every reply a read brought.
 * closing: the peer's shutdown or an error came with the event; the close
 * is then seen by reading on to recv's 0 (no later edge would show it). */
static void mf__pipe_read(mf_mysql_pipe_t *p, bool closing)
{
    mf_mysql_conn_t *conn = p->conn;
    for (;;) {
        if (p->in_cap - p->in_len < 4096) {
            size_t cap = p->in_cap ? 2 * p->in_cap : 16384;
            p->in = mf_xrealloc(p->in, cap);
            p->in_cap = cap;
        }
        size_t room = p->in_cap - p->in_len;
        ssize_t n = recv(conn->io.fd, p->in + p->in_len, room,
                         MSG_DONTWAIT); /* the connector leaves it blocking */
        if (n > 0) {
            p->in_len += (size_t)n;
            if (!mf__pipe_parse(p))
                return;
            /* A short read emptied the socket: what comes later raises a
             * new edge, so the recv that would say EAGAIN is saved. */
            if ((size_t)n < room && !closing)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        mf__pipe_lost(p); /* closed by the server, or reset */
        return;
    }
    /* Replies made room: write what waits. */
    mf__pipe_pump(p);
}

static void mf__pipe_raw_io(mf_mysql_conn_t *conn, unsigned events)
{
    mf_mysql_pipe_t *p = conn->raw_user;
    /* The write watch goes once nothing waits, also when the deferred
     * flush sent the rest: left on, every ACK would wake the loop. */
    if (events & MF_IO_WRITE) {
        if (p->out_off < p->out_len && !mf__pipe_flush(p))
            return;
        if (p->out_off == p->out_len && mf__pipe_watch(p, false) != 0) {
            mf__pipe_lost(p);
            return;
        }
    }
    if (events & ~MF_IO_WRITE)
        mf__pipe_read(p, events & (MF_IO_RDHUP | MF_IO_HUP | MF_IO_ERROR));
}

/* ---- freeing ---------------------------------------------------------------
 */

void mf__mysql_pipes_free(mf_mysql_client_t *c)
{
    mf_list_t *node;
    while ((node = mf_list_pop_front(&c->pipes)) != NULL) {
        mf_mysql_pipe_t *p = mf_container_of(node, mf_mysql_pipe_t, link);
        /* The pool closed the connection; the loop drops the tasks. */
        mf__mysql_stmt_free(p->fresh);
        mf__mysql_stmt_free(p->victim);
        if (p->flush_queued) /* the loop's deferred queue outlives us */
            mf_list_remove(&p->flush_post._link);
        mf_free(p->ring);
        mf_free(p->out);
        mf_free(p->in);
        mf_free(p->cols);
        mf_free(p);
    }
    c->npipes = 0;
}
