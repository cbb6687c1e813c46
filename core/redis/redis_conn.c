/*
 * redis_conn.c — one Redis connection: resolve, non-blocking connect, TLS,
 * AUTH/SELECT, then commands out (batched: one write per loop iteration)
 * and replies in (matched, in order, to the tasks on its queue).
 *
 * It calls nothing above it: replies and its end reach the tasks through
 * their hooks (mf_redis_task_hooks_t) and whoever opened it through the
 * owner it was given (mf_redis_conn_owner_t).
 *
 * Ownership: its opener owns the connection (the client keeps it in a
 * shared slot or the endpoint pool, a subscriber its own). The connection
 * holds the tasks whose replies it expects but never frees them: it
 * completes them. Closing shuts the socket at once and frees the memory
 * from a deferred post, after the pending flush and DNS callbacks have run.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "net/net.h"
#include "redis_int.h"

static void mf__rconn_on_io(mf_io_t *io, unsigned events);
static void mf__rconn_on_timer(mf_timer_t *timer);
static void mf__rconn_flush_cb(mf_post_t *post);
static void mf__rconn_free_cb(mf_post_t *post);
static void mf__rconn_on_resolved(mf_dns_query_t *q, int status);

/* ---- timer: connect, response, idle -------------------------------------
 * While opening, the timer is the connect timeout (it keeps the loop
 * alive). Once ready it is armed lazily: each reply and each busy/idle
 * change moves the deadline (due_ms), and the timer itself is touched only
 * when the deadline comes before it; a timer that fires early re-arms for
 * what is left. Busy with a reply every few microseconds, a connection then
 * costs no timer work per reply. */

static void mf__rconn_arm(mf_redis_conn_t *conn, uint64_t ms, bool ref)
{
    mf_timer_stop(conn->loop, &conn->timer);
    conn->timer_at = 0;
    if (!ms)
        return;
    mf_timer_set_ref(conn->loop, &conn->timer, ref);
    mf_timer_start(conn->loop, &conn->timer, ms);
    conn->timer_at = mf_loop_now(conn->loop) + ms;
}

/* The response timer while busy: none for a blocking command (BLPOP 0
 * waits as long as it was told; the task's own timeout bounds it). */
static uint32_t mf__rconn_response_ms(const mf_redis_conn_t *conn)
{
    if (conn->kind == MF_RCONN_POOLED && !mf_list_empty(&conn->queue)) {
        const mf_redis_task_t *t =
            mf_container_of(conn->queue.next, mf_redis_task_t, link);
        if (t->blocking)
            return 0;
    }
    return conn->client->opts.response_timeout_ms;
}

/* A ready connection's deadline: ms from now (0: none). */
static void mf__rconn_set_due(mf_redis_conn_t *conn, uint32_t ms)
{
    uint64_t now = mf_loop_now(conn->loop);
    conn->due_ms = ms ? now + ms : 0;
    if (conn->due_ms && (!conn->timer_at || conn->timer_at > conn->due_ms))
        mf__rconn_arm(conn, ms, false);
}

/* Busy: the socket and the response timer keep the loop alive. Idle: the
 * connection waits for work without keeping the loop running; a shared
 * one closes after the idle timeout, a dedicated one's idle timer is the
 * pool's. */
void mf__redis_conn_set_busy(mf_redis_conn_t *conn, bool busy)
{
    if (conn->io.fd >= 0)
        mf_io_set_ref(conn->loop, &conn->io, busy);
    if (conn->state != MF_RCONN_READY || conn->kind == MF_RCONN_SUB)
        return;
    uint32_t ms = busy ? mf__rconn_response_ms(conn)
                  : conn->kind == MF_RCONN_POOLED
                      ? 0
                      : conn->client->opts.idle_timeout_ms;
    mf__rconn_set_due(conn, ms);
}

static void mf__rconn_on_timer(mf_timer_t *timer)
{
    mf_redis_conn_t *conn = timer->data;
    conn->timer_at = 0;
    if (conn->state == MF_RCONN_READY) {
        uint64_t now = mf_loop_now(conn->loop);
        if (!conn->due_ms)
            return; /* nothing due now (a blocking command) */
        if (conn->due_ms > now) {
            mf__rconn_arm(conn, conn->due_ms - now, false);
            return;
        }
    }
    if (conn->state != MF_RCONN_READY || !mf_list_empty(&conn->queue))
        mf__redis_conn_close(conn, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    else
        mf__redis_conn_close(conn, MF_STATE_SUCCESS, 0); /* idle */
}

/* ---- opening -------------------------------------------------------------
 */

static void mf__rconn_put_setup(mf_redis_conn_t *conn)
{
    mf_redis_client_t *c = conn->client;
    if (c->password) {
        const char *argv[3] = {"AUTH", c->user, c->password};
        if (c->user)
            mf__redis_format(conn->loop, &conn->out, 3, argv, NULL);
        else
            mf__redis_format(conn->loop, &conn->out, 2,
                             (const char *[]){"AUTH", c->password}, NULL);
        conn->setup_replies_left++;
    }
    if (c->opts.readonly) { /* a cluster replica serves reads */
        mf__redis_format(conn->loop, &conn->out, 1,
                         (const char *[]){"READONLY"}, NULL);
        conn->setup_replies_left++;
    }
    if (c->db) {
        char num[24];
        snprintf(num, sizeof num, "%ld", c->db);
        mf__redis_format(conn->loop, &conn->out, 2,
                         (const char *[]){"SELECT", num}, NULL);
        conn->setup_replies_left++;
    }
}

mf_redis_conn_t *mf__redis_conn_open(mf_redis_client_t *client,
                                     mf_redis_conn_kind_t kind,
                                     const mf_redis_conn_owner_t *owner,
                                     void *owner_data)
{
    mf_loop_t *loop = client->loop;
    mf_redis_conn_t *conn = mf_loop_alloc(loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->loop = loop;
    conn->client = client;
    conn->kind = kind;
    conn->owner = owner;
    conn->owner_data = owner_data;
    conn->state = MF_RCONN_OPENING;
    mf_io_init(&conn->io, -1, mf__rconn_on_io, conn);
    mf__client_open_init(&conn->opener, loop, &conn->io, &conn->ssl);
    mf_timer_init(&conn->timer, mf__rconn_on_timer, conn);
    mf_list_init(&conn->queue);
    mf_list_init(&conn->pc.link); /* in no endpoint until the pool adds it */
    mf_list_init(&conn->pc.idle_link);
    mf_post_init(&conn->flush_post, mf__rconn_flush_cb, conn);
    mf_post_init(&conn->free_post, mf__rconn_free_cb, conn);
    mf__buf_init(&conn->out);
    mf__redis_arena_init(&conn->scratch, 0);
    conn->sink.arena = &conn->scratch;
    conn->reader = mf__redis_reader_create(loop, &conn->sink);
    client->connects++;
    mf__rconn_put_setup(conn);
    mf__rconn_arm(conn, client->opts.connect_timeout_ms, true);
    conn->resolving = true;
    mf_dns_query_start(loop, &conn->dns, client->host, client->port,
                       mf__rconn_on_resolved, conn);
    return conn;
}

static void mf__rconn_on_resolved(mf_dns_query_t *q, int status)
{
    mf_redis_conn_t *conn = q->data;
    conn->resolving = false;
    if (conn->state == MF_RCONN_CLOSED)
        return; /* canceled by close; the free post waits for this */
    if (status < 0) {
        mf__redis_conn_close(conn,
                             status == MF_ETIMEDOUT ? MF_STATE_TIMEOUT
                                                    : MF_STATE_DNS_ERROR,
                             status);
        return;
    }
    int rc = mf__client_open_start(&conn->opener, &conn->dns);
    if (rc < 0)
        mf__redis_conn_close(conn, MF_STATE_SYS_ERROR, rc);
}

static void mf__rconn_flush(mf_redis_conn_t *conn);

/* AUTH/SELECT answered (or none needed): the queued tasks go out. */
static void mf__rconn_ready(mf_redis_conn_t *conn)
{
    conn->state = MF_RCONN_READY;
    mf__rconn_arm(conn, 0, false); /* the connect timeout is over */
    mf_list_t *node;
    mf_list_foreach(node, &conn->queue)
    {
        mf_redis_task_t *t = mf_container_of(node, mf_redis_task_t, link);
        if (mf__buf_append(conn->loop, &conn->out, t->cmds.data, t->cmds.len) <
            0) {
            mf__redis_conn_close(conn, MF_STATE_SYS_ERROR, MF_ENOMEM);
            return;
        }
        t->phase = MF_RT_SENT;
    }
    if (conn->kind == MF_RCONN_SUB) {
        conn->due_ms = 0; /* silence is normal */
    } else {
        mf__redis_conn_set_busy(conn, !mf_list_empty(&conn->queue));
    }
    mf__rconn_flush(conn);
}

/* Connected (and through TLS): write AUTH/SELECT, or be ready. */
static void mf__rconn_opened(mf_redis_conn_t *conn)
{
    if (conn->setup_replies_left) {
        conn->state = MF_RCONN_SETUP;
        mf__rconn_flush(conn);
        return;
    }
    mf__rconn_ready(conn);
}

static void mf__rconn_opening_event(mf_redis_conn_t *conn, unsigned events)
{
    const mf_redis_client_t *c = conn->client;
    mf_client_tls_t tls = {c->host, c->opts.tls_verify, c->opts.ca_file, false};
    int rc = mf__client_open_event(&conn->opener, events, c->tls ? &tls : NULL);
    if (rc == MF_EAGAIN)
        return;
    if (rc < 0)
        mf__redis_conn_close(
            conn, rc == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR, rc);
    else
        mf__rconn_opened(conn);
}

/* ---- writing -------------------------------------------------------------
 */

static void mf__rconn_flush(mf_redis_conn_t *conn)
{
    if (conn->state == MF_RCONN_OPENING || conn->state == MF_RCONN_CLOSED)
        return;
    if (conn->out_done == 0 && conn->out.len) /* a new batch goes out */
        conn->client->writes++;
    while (conn->out_done < conn->out.len) {
        struct iovec iov = {conn->out.data + conn->out_done,
                            conn->out.len - conn->out_done};
        ssize_t w = mf__sock_writev(conn->io.fd, conn->ssl, &iov, 1);
        if (w == MF_EAGAIN)
            return; /* the WRITE edge calls us again */
        if (w < 0) {
            mf__redis_conn_close(
                conn, w == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR,
                (int)w);
            return;
        }
        conn->out_done += (size_t)w;
    }
    conn->out.len = 0;
    conn->out_done = 0;
    /* A big SET's buffer is not kept for the connection's whole life. */
    if (conn->out.cap > MF_LOOP_ALLOC_MAX)
        mf__buf_release(conn->loop, &conn->out);
}

static void mf__rconn_flush_cb(mf_post_t *post)
{
    mf_redis_conn_t *conn = post->data;
    conn->flush_pending = false;
    mf__rconn_flush(conn);
}

/* Commands of one iteration share one write: the flush runs from the
 * loop's deferred phase, after every handler of this pass has queued. */
static void mf__rconn_schedule(mf_redis_conn_t *conn)
{
    if (conn->flush_pending || conn->state != MF_RCONN_READY)
        return;
    conn->flush_pending = true;
    mf_loop_defer(conn->loop, &conn->flush_post);
}

void mf__redis_conn_send(mf_redis_conn_t *conn, const char *data, size_t len)
{
    if (conn->state == MF_RCONN_CLOSED)
        return;
    if (mf__buf_append(conn->loop, &conn->out, data, len) < 0) {
        mf__redis_conn_close(conn, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    mf__rconn_schedule(conn);
}

void mf__redis_conn_attach(mf_redis_conn_t *conn, mf_redis_task_t *t)
{
    bool was_idle = mf_list_empty(&conn->queue);
    conn->client->commands += t->ncmds;
    t->conn = conn;
    mf_list_push_back(&conn->queue, &t->link);
    if (conn->state != MF_RCONN_READY) {
        t->phase = MF_RT_QUEUED;
        return;
    }
    t->phase = MF_RT_SENT;
    if (was_idle)
        mf__redis_conn_set_busy(conn, true);
    mf__redis_conn_send(conn, t->cmds.data, t->cmds.len);
}

/* ---- reading -------------------------------------------------------------
 */

/* Points the reader at the memory of whoever gets the next reply. */
static mf_redis_task_t *mf__rconn_aim(mf_redis_conn_t *conn)
{
    conn->sink.overflow = false;
    if (conn->state == MF_RCONN_SETUP || conn->kind == MF_RCONN_SUB ||
        mf_list_empty(&conn->queue)) {
        conn->sink.arena = &conn->scratch;
        conn->sink.root = &conn->scratch_root;
        return NULL;
    }
    mf_redis_task_t *t =
        mf_container_of(conn->queue.next, mf_redis_task_t, link);
    conn->sink.arena = &t->arena;
    conn->sink.root = mf__redis_task_slot(t);
    return t;
}

/* A refused AUTH or SELECT fails the tasks waiting for the connection
 * with MF_EACCES; each keeps Redis's own words (mf_task_redis_error_message)
 * so the caller learns why ("WRONGPASS ...", "ERR DB index is out of
 * range"). */
static void mf__rconn_setup_refused(mf_redis_conn_t *conn)
{
    mf_list_t *node;
    mf_list_foreach(node, &conn->queue)
    {
        mf_redis_task_t *t = mf_container_of(node, mf_redis_task_t, link);
        t->hooks->refused(t, &conn->scratch_root);
    }
    if (conn->owner && conn->owner->refused)
        conn->owner->refused(conn, &conn->scratch_root);
    mf__redis_conn_close(conn, MF_STATE_TASK_ERROR, MF_EACCES);
}

static void mf__rconn_setup_reply(mf_redis_conn_t *conn)
{
    if (conn->scratch_root.type == MF_REDIS_ERROR) {
        mf__rconn_setup_refused(conn);
        return;
    }
    if (--conn->setup_replies_left == 0)
        mf__rconn_ready(conn);
}

/* One whole top-level reply is in place. */
static void mf__rconn_deliver(mf_redis_conn_t *conn, mf_redis_task_t *t)
{
    if (conn->state == MF_RCONN_SETUP) {
        mf__rconn_setup_reply(conn);
    } else if (conn->kind == MF_RCONN_SUB) {
        if (conn->owner && conn->owner->message)
            conn->owner->message(conn, &conn->scratch_root);
    } else if (!t) {
        /* A reply nobody asked for: the stream is out of step. */
        mf__redis_conn_close(conn, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
        return;
    } else {
        mf__redis_conn_set_busy(conn, true); /* progress: restart timer */
        t->hooks->reply(t);
    }
    if (conn->state != MF_RCONN_CLOSED)
        mf__redis_arena_reset(conn->loop, &conn->scratch);
}

static void mf__rconn_parse(mf_redis_conn_t *conn)
{
    while (conn->state != MF_RCONN_CLOSED) {
        mf_redis_task_t *t = mf__rconn_aim(conn);
        void *obj = NULL;
        if (redisReaderGetReply(conn->reader, &obj) != REDIS_OK) {
            mf__redis_conn_close(conn, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
            return;
        }
        if (!obj)
            return;
        if (t && conn->sink.overflow)
            t->overflow = true;
        mf__rconn_deliver(conn, t);
    }
}

/* The reader keeps a bulk string whole before handing it over: a reply far
 * over max_reply would sit in its buffer. Past the limit (with slack, so a
 * reply a little over it fails alone, in the arena, whatever the reads'
 * sizes) the task fails with EMSGSIZE and the connection, unable to skip
 * the rest, is closed. */
#define MF__BACKLOG_SLACK (1u << 20)
static void mf__rconn_check_backlog(mf_redis_conn_t *conn)
{
    redisReader *r = conn->reader;
    uint64_t limit = conn->client->opts.max_reply + MF__BACKLOG_SLACK;
    if (conn->state == MF_RCONN_CLOSED || !r || r->len - r->pos <= limit)
        return;
    if (!mf_list_empty(&conn->queue)) {
        mf_redis_task_t *t =
            mf_container_of(conn->queue.next, mf_redis_task_t, link);
        t->hooks->end(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    }
    mf__redis_conn_close(conn, MF_STATE_SYS_ERROR, MF_ECONNABORTED);
}

/* Reads and parses until the socket is drained. A short read drained it
 * (plain TCP, edge-triggered: the next edge says when more comes), so no
 * read is spent to see EAGAIN; over TLS (OpenSSL may hold a decrypted
 * record back) and when the peer's close came with this edge (no edge will
 * follow it), reading goes on to EAGAIN or the end. */
static void mf__rconn_read(mf_redis_conn_t *conn, unsigned events)
{
    char buf[16384];
    bool to_end =
        conn->ssl || (events & (MF_IO_ERROR | MF_IO_HUP | MF_IO_RDHUP));
    while (conn->state != MF_RCONN_CLOSED) {
        ssize_t n = mf__sock_read(conn->io.fd, conn->ssl, buf, sizeof buf);
        if (n == MF_EAGAIN)
            return;
        if (n <= 0) {
            int err = n == 0 ? MF_ECLOSED : (int)n;
            mf__redis_conn_close(
                conn, err == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR,
                err);
            return;
        }
        if (redisReaderFeed(conn->reader, buf, (size_t)n) != REDIS_OK) {
            mf__redis_conn_close(conn, MF_STATE_SYS_ERROR, MF_ENOMEM);
            return;
        }
        mf__rconn_parse(conn);
        mf__rconn_check_backlog(conn);
        if ((size_t)n < sizeof buf && !to_end)
            return;
    }
}

static void mf__rconn_on_io(mf_io_t *io, unsigned events)
{
    mf_redis_conn_t *conn = io->data;
    if (mf_pconn_idle(&conn->pc)) {
        /* An idle dedicated connection: the server closed it or sent what
         * nobody asked for; the pool drops it. */
        if (events & ~(unsigned)MF_IO_WRITE)
            mf_pconn_idle_fired(&conn->pc);
        return;
    }
    if (conn->state == MF_RCONN_OPENING) {
        mf__rconn_opening_event(conn, events);
        if (conn->state == MF_RCONN_OPENING || conn->state == MF_RCONN_CLOSED)
            return;
        events |= MF_IO_READ; /* AUTH's answer may be there already */
    }
    if (events & MF_IO_WRITE)
        mf__rconn_flush(conn);
    if (events & (MF_IO_READ | MF_IO_ERROR | MF_IO_HUP | MF_IO_RDHUP))
        mf__rconn_read(conn, events);
}

/* ---- closing -------------------------------------------------------------
 */

static void mf__rconn_free_cb(mf_post_t *post)
{
    mf_redis_conn_t *conn = post->data;
    if (conn->flush_pending || conn->resolving) {
        mf_loop_defer(conn->loop, post); /* their callbacks still read it */
        return;
    }
    /* Only now: a subscriber may close from inside its callback and still
     * read the message it was given. */
    mf__redis_arena_reset(conn->loop, &conn->scratch);
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

void mf__redis_conn_close(mf_redis_conn_t *conn, int state, int error)
{
    if (conn->state == MF_RCONN_CLOSED)
        return;
    conn->state = MF_RCONN_CLOSED;
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->timer);
    if (conn->resolving)
        mf_dns_query_cancel(&conn->dns);
    mf__tls_close(conn->ssl);
    conn->ssl = NULL;
    if (conn->io.fd >= 0)
        close(conn->io.fd);
    conn->io.fd = -1;
    mf__redis_reader_free(conn->reader);
    conn->reader = NULL;
    mf__buf_release(conn->loop, &conn->out);
    if (conn->owner && conn->owner->closed)
        conn->owner->closed(conn, error);
    /* Closed on purpose or idle: anybody still waiting sees "closed". */
    if (state == MF_STATE_SUCCESS) {
        state = MF_STATE_SYS_ERROR;
        error = MF_ECLOSED;
    }
    mf_list_t *node;
    while ((node = mf_list_pop_front(&conn->queue)) != NULL) {
        mf_redis_task_t *t = mf_container_of(node, mf_redis_task_t, link);
        mf_list_init(&t->link);
        t->conn = NULL;
        t->hooks->end(t, state, error);
    }
    mf_loop_defer(conn->loop, &conn->free_post);
}

void mf__redis_conn_drop(mf_redis_conn_t *conn)
{
    conn->owner = NULL;
    mf_list_init(&conn->queue);
    mf__redis_conn_close(conn, MF_STATE_CANCELED, MF_ECANCELED);
}
