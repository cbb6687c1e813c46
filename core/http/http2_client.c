/*
 * http2_client.c — the client's HTTP/2 connections: an nghttp2 client
 * session on a connection of the pool, streams for its users, the
 * endpoint's shared connection and its waiters (http2_client.h).
 *
 * Bytes: a socket event reads until EAGAIN into nghttp2_session_mem_recv,
 * then what the session wants to send is gathered in `out` and written
 * until EAGAIN (the watcher is edge-triggered for both directions). No
 * send, and no close, happens inside the session's callbacks: a callback
 * may end a user's task, whose retry or redirect may submit a stream on
 * this same connection; the flush after the read sends it.
 *
 * A response goes to its user as an HTTP/1.1 head ("HTTP/1.1 200 \r\n",
 * the fields, "\r\n") followed by the body's bytes, so the task reads
 * status, fields, redirects and limits with the code it has for HTTP/1.
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http_client_int.h"
#include "net/net.h"

/* Our receive windows: a stream may bring 1 MiB before the task reads it,
 * the connection 16 MiB (the 64 KiB defaults cap a download at a window
 * per round trip). */
#define MF_H2C_STREAM_WINDOW (1 << 20)
#define MF_H2C_CONN_WINDOW (16 << 20)
/* The longest response head, as HTTP/1's parser takes it. */
#define MF_H2C_MAX_HEAD 65536
/* Bytes gathered from the session before a write. */
#define MF_H2C_OUT_BATCH (64 * 1024)

struct mf_h2c {
    nghttp2_session *session;
    mf_http_client_conn_t *conn;
    mf_endpoint_t *ep;
    mf_h2c_close_fn close;
    mf_list_t streams; /* users with a stream here (h2_link) */
    unsigned nstreams;
    mf_buf_t out; /* from the session, not yet written */
    size_t out_done;
    mf_buf_t scratch; /* a request's header fields while it is submitted */
    mf_timer_t idle_timer;
    mf_post_t bury_post; /* a failed connection's end, from a clean stack */
    bool in_session;     /* inside mem_recv: no send */
    bool goaway; /* no new stream: the server's GOAWAY, or our idle one */
    bool dead;           /* failed: its streams fail, it closes (posted) */
    bool bury_due;       /* the post has not run */
    bool orphan;         /* the pool shut it before the post ran */
    mf_loop_t *loop;
    int fail_state, fail_error;
    const char *fail_why;
};

static mf_http_endpoint_t *mf__h2c_edata(mf_endpoint_t *ep)
{
    return mf_endpoint_data(ep);
}

void mf__h2c_endpoint_init(mf_h2c_endpoint_t *e, int mode)
{
    e->mode = mode;
    e->known = 0;
    e->shared = NULL;
    mf_list_init(&e->waiters);
}

static mf_http_conn_user_t *mf__h2c_user_of(mf_list_t *link)
{
    return mf_container_of(link, mf_http_conn_user_t, h2_link);
}

/* ---- writing and closing -------------------------------------------------
 */

static void mf__h2c_bury(mf_post_t *post);

/* The connection failed: no new stream goes to it, and its streams fail
 * with this reason from a posted callback (never inside a user's call
 * into this file, nor inside the session). */
static void mf__h2c_die(mf_h2c_t *h, int state, int error, const char *why)
{
    if (h->dead)
        return;
    h->dead = true;
    h->fail_state = state;
    h->fail_error = error;
    h->fail_why = why;
    mf_h2c_endpoint_t *e = &mf__h2c_edata(h->ep)->h2;
    if (e->shared == h->conn)
        e->shared = NULL;
    h->bury_due = true;
    mf_post_init(&h->bury_post, mf__h2c_bury, h);
    mf_loop_defer(h->conn->loop, &h->bury_post);
}

/* Writes what is gathered, then what the session has, until the socket
 * is full or nothing is left. */
static void mf__h2c_flush(mf_h2c_t *h)
{
    mf_http_client_conn_t *conn = h->conn;
    while (!h->dead) {
        while (h->out_done < h->out.len) {
            struct iovec iov = {h->out.data + h->out_done,
                                h->out.len - h->out_done};
            ssize_t w = mf__sock_writev(conn->io.fd, conn->ssl, &iov, 1);
            if (w == MF_EAGAIN)
                return;
            if (w < 0) {
                mf__h2c_die(h, MF_STATE_SYS_ERROR, (int)w,
                            "the HTTP/2 connection failed");
                return;
            }
            h->out_done += (size_t)w;
        }
        h->out.len = h->out_done = 0;
        while (h->out.len < MF_H2C_OUT_BATCH) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(h->session, &data);
            if (n < 0) {
                mf__h2c_die(h, MF_STATE_PROTOCOL_ERROR, MF_EPROTO,
                            nghttp2_strerror((int)n));
                return;
            }
            if (n == 0)
                break;
            if (mf__buf_append(conn->loop, &h->out, data, (size_t)n) < 0) {
                mf__h2c_die(h, MF_STATE_SYS_ERROR, MF_ENOMEM, "out of memory");
                return;
            }
        }
        if (h->out.len == 0)
            return;
    }
}

static void mf__h2c_destroy(mf_h2c_t *h, mf_loop_t *loop);
static void mf__h2c_reopen(mf_endpoint_t *ep);

/* The streams of a failed connection fail with its reason; then the pool
 * closes it (mf__h2c_free follows) and waiters look for another. */
static void mf__h2c_bury(mf_post_t *post)
{
    mf_h2c_t *h = post->data;
    h->bury_due = false;
    if (h->orphan) {
        mf__h2c_destroy(h, h->loop);
        return;
    }
    mf_endpoint_t *ep = h->ep;
    while (!mf_list_empty(&h->streams)) {
        mf_http_conn_user_t *u = mf__h2c_user_of(h->streams.next);
        u->h2_closed = true;
        u->h2_goaway = h->goaway;
        u->ops->h2_input(u, false, h->fail_state, h->fail_error, h->fail_why);
        if (h->streams.next == &u->h2_link) {
            mf_list_remove(&u->h2_link); /* it kept its stream: drop it */
            u->h2 = false;
            u->conn = NULL;
        }
    }
    h->close(h->conn); /* frees h */
    mf__h2c_reopen(ep);
}

/* After the session ran (read, submit, reset): send, and close a
 * connection that failed or that neither side needs any more. */
static void mf__h2c_after(mf_h2c_t *h)
{
    if (h->in_session || h->dead)
        return;
    mf__h2c_flush(h);
    if (h->dead || nghttp2_session_want_read(h->session) ||
        nghttp2_session_want_write(h->session) || h->out.len != h->out_done)
        return;
    if (h->goaway) /* the server's, and its last streams are done */
        mf__h2c_die(h, MF_STATE_SYS_ERROR, MF_ECLOSED,
                    "the HTTP/2 connection ended (GOAWAY)");
    else /* ours: nghttp2 found the server's frames broken */
        mf__h2c_die(h, MF_STATE_PROTOCOL_ERROR, MF_EPROTO,
                    "the server broke HTTP/2 (GOAWAY sent)");
}

/* ---- streams ----------------------------------------------------------- */

/* Idle (no stream): the socket stops keeping the loop alive and the
 * endpoint's idle timeout runs; busy again: both undone. */
static void mf__h2c_set_busy(mf_h2c_t *h, bool busy)
{
    mf_loop_t *loop = h->conn->loop;
    mf_io_set_ref(loop, &h->conn->io, busy);
    if (busy) {
        mf_timer_stop(loop, &h->idle_timer);
        return;
    }
    uint32_t ms = mf_endpoint_limits(h->ep)->idle_timeout_ms;
    if (ms)
        mf_timer_start(loop, &h->idle_timer, ms);
    else
        mf__h2c_die(h, MF_STATE_SYS_ERROR, MF_ECLOSED, "idle");
}

static void mf__h2c_idle_timeout(mf_timer_t *timer)
{
    mf_h2c_t *h = timer->data;
    nghttp2_session_terminate_session(h->session, NGHTTP2_NO_ERROR);
    h->goaway = true; /* ours, at rest: not a broken peer */
    mf__h2c_after(h); /* sends the GOAWAY; nothing is left to read */
    mf__h2c_die(h, MF_STATE_SYS_ERROR, MF_ECLOSED, "idle");
}

static bool mf__h2c_has_room(const mf_h2c_t *h)
{
    uint32_t max = nghttp2_session_get_remote_settings(
        h->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return !h->goaway && !h->dead && h->nstreams < max;
}

/* u gets a stream on h (the request is submitted when u sends); times:
 * how h opened, for the user that opened it. */
static void mf__h2c_attach(mf_h2c_t *h, mf_http_conn_user_t *u,
                           const mf_dial_times_t *times)
{
    if (h->nstreams++ == 0)
        mf__h2c_set_busy(h, true);
    mf_list_push_back(&h->streams, &u->h2_link);
    u->conn = h->conn;
    u->h2 = true;
    u->h2_waiting = false;
    u->h2_head_done = u->h2_remote_end = u->h2_local_end = false;
    u->h2_closed = u->h2_moved = u->h2_goaway = false;
    u->stream_id = 0;
    u->h2_error = 0;
    u->ops->ready(u, times);
}

/* Waiters get streams while there is room on the shared connection. */
static void mf__h2c_serve_waiters(mf_endpoint_t *ep)
{
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    while (e->shared && e->shared->h2 && !mf_list_empty(&e->waiters) &&
           mf__h2c_has_room(e->shared->h2)) {
        mf_http_conn_user_t *u =
            mf__h2c_user_of(mf_list_pop_front(&e->waiters));
        mf__h2c_attach(e->shared->h2, u, NULL);
    }
}

static void mf__h2c_wait(mf_endpoint_t *ep, mf_http_conn_user_t *u)
{
    mf_list_push_back(&mf__h2c_edata(ep)->h2.waiters, &u->h2_link);
    u->h2_waiting = true;
}

/* The shared connection is gone or will take nothing more: the first
 * waiter goes to the pool (a new connection, itself shared when it speaks
 * h2), the others wait for that one. */
static void mf__h2c_reopen(mf_endpoint_t *ep)
{
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    while (!e->shared && !mf_list_empty(&e->waiters)) {
        mf_http_conn_user_t *u =
            mf__h2c_user_of(mf_list_pop_front(&e->waiters));
        u->h2_waiting = false;
        mf_endpoint_acquire(ep, &u->waiter);
        mf__h2c_opening(ep, u);
    }
}

bool mf__h2c_acquire(mf_endpoint_t *ep, mf_http_conn_user_t *u)
{
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    if (e->mode == MF_HTTP2_OFF || e->known < 0 || !e->shared)
        return false;
    mf_h2c_t *h = e->shared->h2;
    if (h && mf__h2c_has_room(h) && mf_list_empty(&e->waiters))
        mf__h2c_attach(h, u, NULL);
    else
        mf__h2c_wait(ep, u);
    return true;
}

void mf__h2c_opening(mf_endpoint_t *ep, mf_http_conn_user_t *u)
{
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    if (e->mode == MF_HTTP2_OFF || e->known < 0 || e->shared || !u->conn ||
        !mf__dial_active(&u->conn->dial))
        return;
    e->shared = u->conn;
}

/* ---- the session's callbacks ---------------------------------------------
 */

static mf_http_conn_user_t *mf__h2c_stream_user(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

/* Appends to the user's response; a move of its buffer is noted (the
 * parsed head points into it). */
static int mf__h2c_put(mf_h2c_t *h, mf_http_conn_user_t *u, const void *p,
                       size_t n)
{
    const char *before = u->h2_in->data;
    if (mf__buf_append(h->conn->loop, u->h2_in, p, n) < 0) {
        u->h2_error = MF_ENOMEM;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
    }
    if (u->h2_in->data != before)
        u->h2_moved = true;
    return 0;
}

static int mf__h2c_on_header(nghttp2_session *s, const nghttp2_frame *frame,
                             const uint8_t *name, size_t namelen,
                             const uint8_t *value, size_t valuelen,
                             uint8_t flags, void *ud)
{
    (void)flags;
    mf_h2c_t *h = ud;
    mf_http_conn_user_t *u = mf__h2c_stream_user(s, frame->hd.stream_id);
    if (!u || frame->hd.type != NGHTTP2_HEADERS || u->h2_head_done)
        return 0; /* a trailer: not kept */
    if (u->h2_in->len + namelen + valuelen > MF_H2C_MAX_HEAD) {
        u->h2_error = MF_EPROTO; /* as HTTP/1's parser refuses it */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        u->h2_interim = valuelen == 3 && value[0] == '1';
        if (mf__h2c_put(h, u, "HTTP/1.1 ", 9) < 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return mf__h2c_put(h, u, value, valuelen) < 0 ||
                       mf__h2c_put(h, u, " \r\n", 3) < 0
                   ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
                   : 0;
    }
    /* nghttp2 checked the field: no CR, LF or NUL in it. */
    if (mf__h2c_put(h, u, name, namelen) < 0 ||
        mf__h2c_put(h, u, ": ", 2) < 0 ||
        mf__h2c_put(h, u, value, valuelen) < 0 ||
        mf__h2c_put(h, u, "\r\n", 2) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int mf__h2c_on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                           const uint8_t *data, size_t len, void *ud)
{
    (void)flags;
    mf_h2c_t *h = ud;
    mf_http_conn_user_t *u = mf__h2c_stream_user(s, id);
    if (!u || !u->h2_head_done)
        return 0;
    if (mf__h2c_put(h, u, data, len) < 0) { /* here a reset is ours */
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id,
                                  NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
    u->ops->h2_input(u, false, MF_STATE_SUCCESS, 0, NULL);
    return 0;
}

/* The end of a head: an interim one (1xx) is passed on and the next one
 * awaited; a final one may come with the stream's end. */
static void mf__h2c_head_end(mf_h2c_t *h, mf_http_conn_user_t *u, bool end)
{
    if (mf__h2c_put(h, u, "\r\n", 2) < 0) {
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, u->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
        return;
    }
    u->h2_head_done = !u->h2_interim; /* the task drops an interim head */
    u->h2_remote_end = end;
    u->ops->h2_input(u, end, MF_STATE_SUCCESS, 0, NULL);
}

static int mf__h2c_on_frame(nghttp2_session *s, const nghttp2_frame *frame,
                            void *ud)
{
    mf_h2c_t *h = ud;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_GOAWAY ||
        frame->hd.type == NGHTTP2_SETTINGS) {
        if (frame->hd.type == NGHTTP2_GOAWAY)
            h->goaway = true; /* streams above its last one close refused */
        mf_h2c_endpoint_t *e = &mf__h2c_edata(h->ep)->h2;
        if (h->goaway && e->shared == h->conn)
            e->shared = NULL;
        return 0;
    }
    mf_http_conn_user_t *u = mf__h2c_stream_user(s, frame->hd.stream_id);
    if (!u)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && !u->h2_head_done) {
        mf__h2c_head_end(h, u, end);
        return 0;
    }
    if (end &&
        (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS)) {
        u->h2_remote_end = true;
        u->ops->h2_input(u, true, MF_STATE_SUCCESS, 0, NULL);
    }
    return 0;
}

/* Words for a reset: the server's code, or ours. */
static void mf__h2c_reset_why(char *buf, size_t size, uint32_t code)
{
    if (code == NGHTTP2_REFUSED_STREAM)
        snprintf(buf, size,
                 "HTTP/2 stream refused (REFUSED_STREAM or "
                 "GOAWAY): not processed");
    else
        snprintf(buf, size, "HTTP/2 stream reset: %s",
                 nghttp2_http2_strerror(code));
}

static int mf__h2c_on_close(nghttp2_session *s, int32_t id, uint32_t code,
                            void *ud)
{
    mf_h2c_t *h = ud;
    mf_http_conn_user_t *u = mf__h2c_stream_user(s, id);
    if (!u)
        return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    u->h2_closed = true;
    if (u->h2_remote_end && code == NGHTTP2_NO_ERROR)
        return 0; /* ended well: the user has its answer */
    char why[128];
    mf__h2c_reset_why(why, sizeof why, code);
    if (u->h2_error == MF_EPROTO) /* ours: a head over the limit */
        u->ops->h2_input(u, false, MF_STATE_PROTOCOL_ERROR, MF_EPROTO,
                         "the response head is over 64 KiB");
    else if (u->h2_error) /* ours: the body's source failed, or memory */
        u->ops->h2_input(u, false, MF_STATE_SYS_ERROR, u->h2_error, NULL);
    else if (code == NGHTTP2_REFUSED_STREAM) { /* safe to send again */
        u->h2_goaway = h->goaway;
        u->ops->h2_input(u, false, MF_STATE_SYS_ERROR, MF_ECONNRESET, why);
    } else
        u->ops->h2_input(u, false, MF_STATE_PROTOCOL_ERROR, MF_ECONNRESET, why);
    return 0;
}

/* The request body's next bytes, from the user. */
static ssize_t mf__h2c_read_body(nghttp2_session *s, int32_t id, uint8_t *buf,
                                 size_t len, uint32_t *flags,
                                 nghttp2_data_source *src, void *ud)
{
    (void)src;
    (void)ud;
    mf_http_conn_user_t *u = mf__h2c_stream_user(s, id);
    if (!u)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    ssize_t n = u->ops->h2_body(u, buf, len);
    if (n == MF_EAGAIN)
        return NGHTTP2_ERR_DEFERRED;
    if (n < 0) {
        u->h2_error = (int)n;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (n == 0) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        u->h2_local_end = true;
    }
    return n;
}

/* The session copies them: made and freed around its creation. */
static nghttp2_session_callbacks *mf__h2c_callbacks(void)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_header_callback(cbs, mf__h2c_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs,
                                                              mf__h2c_on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, mf__h2c_on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs,
                                                           mf__h2c_on_close);
    return cbs;
}

/* ---- the connection ----------------------------------------------------- */

/* nghttp2's memory from the loop's free lists: its streams, frames and
 * header copies come and go with each request, and a malloc each would
 * be the hot path's. The loop's allocator wants the size back: it is
 * kept in front of each block. */
#define MF_H2C_MEM_HEAD 16

static void *mf__h2c_mem_alloc(size_t size, void *loop)
{
    if (size > SIZE_MAX - MF_H2C_MEM_HEAD)
        return NULL; /* nghttp2 fails its call with NGHTTP2_ERR_NOMEM */
    size_t *block = mf_loop_alloc(loop, size + MF_H2C_MEM_HEAD);
    *block = size + MF_H2C_MEM_HEAD;
    return (char *)block + MF_H2C_MEM_HEAD;
}

static void mf__h2c_mem_free(void *p, void *loop)
{
    if (!p)
        return;
    size_t *block = (size_t *)(void *)((char *)p - MF_H2C_MEM_HEAD);
    mf_loop_free(loop, block, *block);
}

static void *mf__h2c_mem_calloc(size_t n, size_t size, void *loop)
{
    if (size && n > (SIZE_MAX - MF_H2C_MEM_HEAD) / size)
        return NULL;
    void *p = mf__h2c_mem_alloc(n * size, loop);
    if (p)
        memset(p, 0, n * size);
    return p;
}

static void *mf__h2c_mem_realloc(void *p, size_t size, void *loop)
{
    if (!p)
        return mf__h2c_mem_alloc(size, loop);
    size_t old =
        *(size_t *)(void *)((char *)p - MF_H2C_MEM_HEAD) - MF_H2C_MEM_HEAD;
    void *q = mf__h2c_mem_alloc(size, loop);
    if (!q)
        return NULL; /* p stays as it was */
    memcpy(q, p, old < size ? old : size);
    mf__h2c_mem_free(p, loop);
    return q;
}

static int mf__h2c_start(mf_http_client_conn_t *conn, mf_h2c_close_fn close)
{
    nghttp2_session_callbacks *cbs = mf__h2c_callbacks();
    mf_h2c_t *h = mf_loop_alloc(conn->loop, sizeof(*h));
    memset(h, 0, sizeof(*h));
    nghttp2_mem mem = {conn->loop, mf__h2c_mem_alloc, mf__h2c_mem_free,
                       mf__h2c_mem_calloc, mf__h2c_mem_realloc};
    int rc = cbs ? nghttp2_session_client_new3(&h->session, cbs, h, NULL, &mem)
                 : -1; /* the session keeps a copy of mem */
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        mf_loop_free(conn->loop, h, sizeof(*h));
        return MF_ENOMEM;
    }
    h->conn = conn;
    h->loop = conn->loop;
    h->ep = conn->pc.ep;
    h->close = close;
    mf_list_init(&h->streams);
    mf_timer_init(&h->idle_timer, mf__h2c_idle_timeout, h);
    mf_timer_set_ref(conn->loop, &h->idle_timer, false); /* as the pool's */
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, MF_H2C_STREAM_WINDOW}};
    nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, settings,
                            MF_ARRAY_SIZE(settings));
    nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0,
                                          MF_H2C_CONN_WINDOW);
    conn->h2 = h;
    return 0;
}

static void mf__h2c_hoped_in_vain(mf_endpoint_t *ep)
{
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    while (!mf_list_empty(&e->waiters)) {
        mf_http_conn_user_t *u =
            mf__h2c_user_of(mf_list_pop_front(&e->waiters));
        u->h2_waiting = false;
        mf_endpoint_acquire(ep, &u->waiter);
    }
}

int mf__h2c_dialed(mf_http_client_conn_t *conn, mf_http_conn_user_t *u,
                   const mf_dial_times_t *times, mf_h2c_close_fn close)
{
    mf_endpoint_t *ep = conn->pc.ep;
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    if (e->mode == MF_HTTP2_OFF)
        return 0;
    bool h2 = conn->ssl ? mf__tls_alpn_is_h2(conn->ssl)
                        : e->mode == MF_HTTP2_PRIOR_KNOWLEDGE;
    if (!h2) {
        if (e->shared == conn)
            e->shared = NULL;
        e->known = -1;
        mf__h2c_hoped_in_vain(ep);
        return 0;
    }
    int rc = mf__h2c_start(conn, close);
    if (rc < 0)
        return rc; /* the pool fails it, and its waiters with it */
    e->known = 1;
    if (!e->shared || !e->shared->h2)
        e->shared = conn;
    conn->user = NULL; /* many users from now on */
    mf__h2c_attach(conn->h2, u, times);
    mf__h2c_serve_waiters(ep);
    mf__h2c_reopen(ep); /* the shared one was full: waiters open another */
    mf__h2c_after(conn->h2);
    return 1;
}

void mf__h2c_dial_failed(mf_http_client_conn_t *conn, int state, int error)
{
    mf_endpoint_t *ep = conn->pc.ep;
    if (!ep)
        return;
    mf_h2c_endpoint_t *e = &mf__h2c_edata(ep)->h2;
    if (e->shared != conn)
        return;
    e->shared = NULL;
    /* They hoped for this one: each fails as its opener did (its task
     * decides about a retry, which opens a connection again, and those
     * that retry after it wait for that one: not in this list). */
    mf_list_t hoped;
    mf_list_init(&hoped);
    mf_list_splice_back(&hoped, &e->waiters);
    while (!mf_list_empty(&hoped)) {
        mf_http_conn_user_t *u = mf__h2c_user_of(mf_list_pop_front(&hoped));
        u->h2_waiting = false;
        u->verify_result = X509_V_OK;
        u->ops->failed(u, NULL, state, error);
    }
}

void mf__h2c_event(mf_http_client_conn_t *conn, unsigned events)
{
    (void)events; /* read and write are tried on either edge */
    mf_h2c_t *h = conn->h2;
    uint8_t buf[16384];
    while (!h->dead) {
        ssize_t n = mf__sock_read(conn->io.fd, conn->ssl, buf, sizeof buf);
        if (n == MF_EAGAIN)
            break;
        if (n <= 0) {
            mf__h2c_die(h,
                        n == 0         ? MF_STATE_SYS_ERROR
                        : n == MF_ETLS ? MF_STATE_TLS_ERROR
                                       : MF_STATE_SYS_ERROR,
                        n == 0 ? MF_ECLOSED : (int)n,
                        "the server closed the HTTP/2 connection");
            break;
        }
        h->in_session = true;
        ssize_t used = nghttp2_session_mem_recv(h->session, buf, (size_t)n);
        h->in_session = false;
        if (used < 0)
            mf__h2c_die(h, MF_STATE_PROTOCOL_ERROR, MF_EPROTO,
                        nghttp2_strerror((int)used));
    }
    mf_endpoint_t *ep = h->ep;
    mf__h2c_serve_waiters(ep); /* streams ended, or SETTINGS gave room */
    mf__h2c_after(h);          /* may free h */
    mf__h2c_reopen(ep);        /* after a GOAWAY or the end */
}

/* ---- a user's stream ----------------------------------------------------- */

/* The request's fields as nghttp2 wants them: names lowercased (HTTP/2
 * refuses capitals), the connection-specific ones dropped (RFC 9113
 * 8.2.2), Host turned into :authority. Strings in h->scratch. */
static int mf__h2c_fields(mf_h2c_t *h, const mf_h2c_request_t *req,
                          nghttp2_nv *nv, size_t cap, size_t *count)
{
    static const char *const dropped[] = {
        "connection", "keep-alive", "proxy-connection", "transfer-encoding",
        "upgrade",    "host",       "content-length",   "te"};
    const char *p = req->headers, *end = p + req->headers_len;
    size_t n = *count;
    h->scratch.len = 0;
    if (mf__buf_reserve(h->conn->loop, &h->scratch, req->headers_len) < 0)
        return MF_ENOMEM;
    while (p < end) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = lf ? lf : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        const char *next = lf ? lf + 1 : end;
        if (!colon) {
            p = next;
            continue;
        }
        size_t nlen = (size_t)(colon - p);
        const char *v = colon + 1;
        const char *vend =
            line_end > v && line_end[-1] == '\r' ? line_end - 1 : line_end;
        while (v < vend && (*v == ' ' || *v == '\t'))
            v++;
        char *lower = h->scratch.data + h->scratch.len;
        for (size_t i = 0; i < nlen; i++)
            lower[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
        bool drop = false;
        for (size_t i = 0; i < MF_ARRAY_SIZE(dropped) && !drop; i++)
            drop = strlen(dropped[i]) == nlen &&
                   memcmp(lower, dropped[i], nlen) == 0;
        if (!drop) {
            if (n == cap)
                return MF_EMSGSIZE;
            h->scratch.len += nlen;
            nv[n++] = (nghttp2_nv){(uint8_t *)lower, (uint8_t *)v, nlen,
                                   (size_t)(vend - v), NGHTTP2_NV_FLAG_NONE};
        }
        p = next;
    }
    *count = n;
    return 0;
}

/* The Host line the task has, else the origin's authority. */
static void mf__h2c_authority(const mf_h2c_request_t *req, const char **a,
                              size_t *alen)
{
    *a = req->authority;
    *alen = req->authority_len;
    const char *p = req->headers, *end = p + req->headers_len;
    while (p < end) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = lf ? lf : end;
        if (line_end - p > 5 && strncasecmp(p, "host:", 5) == 0) {
            const char *v = p + 5;
            const char *vend = line_end[-1] == '\r' ? line_end - 1 : line_end;
            while (v < vend && (*v == ' ' || *v == '\t'))
                v++;
            *a = v;
            *alen = (size_t)(vend - v);
            return;
        }
        p = lf ? lf + 1 : end;
    }
}

#define MF_H2C_MAX_FIELDS 128

int mf__h2c_submit(mf_http_conn_user_t *u, const mf_h2c_request_t *req)
{
    mf_h2c_t *h = u->conn->h2;
    nghttp2_nv nv[MF_H2C_MAX_FIELDS];
    const char *auth;
    size_t alen, n = 0;
    mf__h2c_authority(req, &auth, &alen);
#define MF_H2C_NV(name, value, len)                               \
    nv[n++] = (nghttp2_nv){(uint8_t *)(name), (uint8_t *)(value), \
                           sizeof(name) - 1, (len), NGHTTP2_NV_FLAG_NONE}
    MF_H2C_NV(":method", req->method, req->method_len);
    MF_H2C_NV(":scheme", req->scheme, strlen(req->scheme));
    MF_H2C_NV(":authority", auth, alen);
    MF_H2C_NV(":path", req->path, req->path_len);
    char num[24];
    if (req->body_len >= 0) {
        int len = snprintf(num, sizeof num, "%lld", (long long)req->body_len);
        MF_H2C_NV("content-length", num, (size_t)len);
    }
#undef MF_H2C_NV
    int rc = mf__h2c_fields(h, req, nv, MF_H2C_MAX_FIELDS, &n);
    if (rc < 0)
        return rc;
    nghttp2_data_provider body = {.read_callback = mf__h2c_read_body};
    int32_t id = nghttp2_submit_request(h->session, NULL, nv, n,
                                        req->has_body ? &body : NULL, u);
    if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) { /* 2^30 streams on it */
        mf_h2c_endpoint_t *e = &mf__h2c_edata(h->ep)->h2;
        h->goaway = true;
        if (e->shared == h->conn)
            e->shared = NULL;
        u->h2_goaway = true; /* nothing sent: again, on another */
        return MF_ECONNRESET;
    }
    if (id < 0)
        return id == NGHTTP2_ERR_NOMEM ? MF_ENOMEM : MF_EPROTO;
    u->stream_id = id;
    u->h2_local_end = !req->has_body;
    mf__h2c_after(h);
    return 0;
}

void mf__h2c_body_ready(mf_http_conn_user_t *u)
{
    if (!u->h2 || u->h2_closed || !u->stream_id)
        return;
    mf_h2c_t *h = u->conn->h2;
    nghttp2_session_resume_data(h->session, u->stream_id);
    mf__h2c_after(h);
}

bool mf__h2c_detach(mf_http_conn_user_t *u)
{
    if (u->h2_waiting) {
        mf_list_remove(&u->h2_link);
        u->h2_waiting = false;
        return true;
    }
    if (!u->h2)
        return false;
    mf_h2c_t *h = u->conn->h2;
    mf_list_remove(&u->h2_link);
    u->h2 = false;
    u->conn = NULL;
    h->conn->requests++;
    if (u->stream_id && !u->h2_closed) {
        nghttp2_session_set_stream_user_data(h->session, u->stream_id, NULL);
        if (!u->h2_remote_end || !u->h2_local_end)
            nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE,
                                      u->stream_id, NGHTTP2_CANCEL);
    }
    if (--h->nstreams == 0 && !h->dead)
        mf__h2c_set_busy(h, false);
    if (!h->in_session && !h->dead) {
        mf_endpoint_t *ep = h->ep;
        mf__h2c_serve_waiters(ep);
        mf__h2c_after(h); /* may free h */
        mf__h2c_reopen(ep);
    }
    return true;
}

static void mf__h2c_destroy(mf_h2c_t *h, mf_loop_t *loop)
{
    mf_timer_stop(loop, &h->idle_timer);
    nghttp2_session_del(h->session);
    mf__buf_release(loop, &h->out);
    mf__buf_release(loop, &h->scratch);
    mf_loop_free(loop, h, sizeof(*h));
}

void mf__h2c_free(mf_http_client_conn_t *conn)
{
    mf_h2c_t *h = conn->h2;
    mf_endpoint_t *ep = h ? h->ep : conn->pc.ep;
    mf_h2c_endpoint_t *e = ep ? &mf__h2c_edata(ep)->h2 : NULL;
    bool was_shared = e && e->shared == conn;
    if (was_shared)
        e->shared = NULL;
    if (!h) { /* an HTTP/1 one, or one that was opening */
        if (was_shared)
            mf__h2c_reopen(ep);
        return;
    }
    conn->h2 = NULL;
    while (!mf_list_empty(&h->streams)) { /* the loop's end */
        mf_http_conn_user_t *u =
            mf__h2c_user_of(mf_list_pop_front(&h->streams));
        u->h2 = false;
        u->conn = NULL;
    }
    mf_timer_stop(conn->loop, &h->idle_timer);
    if (h->bury_due)
        h->orphan = true; /* its post frees it */
    else
        mf__h2c_destroy(h, conn->loop);
}
