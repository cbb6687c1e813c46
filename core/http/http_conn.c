/*
 * http_conn.c — one server connection: reading, parsing, body framing,
 * timeouts, the output queue and closing. Owns mf_http_conn_t, whose body
 * is private to this file; the server and the exchange reach it through
 * http_conn.h. May call: the server's interface (http_server_int.h), the
 * exchange's (http_exchange_int.h), response heads for error answers
 * (http_head.h), the parser, the net and engine layers.
 *
 * The hot path of a keep-alive request is: one read (a short read proves the
 * socket drained, so no second read to see EAGAIN: edge-triggered epoll
 * reports the next arrival), parse in place, run the handler, one write.
 * No allocation: the exchange and both buffers come from the loop's free
 * lists, and an idle connection gives its buffers back.
 *
 * The connection is registered for READ|WRITE once, edge-triggered, so no
 * epoll_ctl happens per request. Every event runs the same steps: finish a
 * TLS handshake, flush pending output, read and process input.
 *
 * Lifetime: the connection's memory is released when it is closed AND its
 * exchange has released it, so a handler's late send after a disconnect
 * still touches live memory. The free is deferred to a post, never done
 * inside the callback that closed it.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/loop_int.h"
#include "http_exchange_int.h"
#include "http_head.h"
#include "http_server_int.h"

/* Output segments: copies coalesce into conn->out; only big bodies get a
 * segment of their own. A full table pauses pipelined parsing. */
#define MF_CONN_MAX_SEGS 4
#define MF_CONN_IN_INITIAL 4096
#define MF_CONN_LINGER_MS 2000

/* What the connection is waiting for; picks the timeout that applies. */
typedef enum mf_conn_phase {
    MF_CONN_IDLE,      /* keep-alive: waiting for the next request */
    MF_CONN_HEAD,      /* some bytes of a head have arrived */
    MF_CONN_BODY,      /* head parsed, body bytes pending */
    MF_CONN_HANDLING,  /* the exchange holds the connection */
    MF_CONN_LINGERING, /* answered an error; draining before close */
    MF_CONN_CLOSED
} mf_conn_phase_t;

/* A request body being received: kept out of the connection so that an
 * idle keep-alive connection stays small (it fits a 512-byte slot). */
typedef struct mf_conn_body {
    size_t head_len;         /* the parsed head's length */
    size_t body_have;        /* decoded body bytes after the head */
    uint64_t content_length; /* when not chunked */
    uint64_t started;        /* loop ms when the head was parsed */
    uint64_t received;       /* bytes read since (framing included) */
    mf_http_chunked_t chunked;
    bool chunked_body;
    bool sent_continue;
} mf_conn_body_t;

/* A piece of output: bytes in conn->out at [off, off+len), or memory that
 * is referenced (owned or not) until written. */
typedef struct mf_out_seg {
    const char *ptr; /* NULL: lives in conn->out at `off` */
    size_t off;
    size_t len;
    mf_buf_t owned; /* released once written (a moved response body) */
} mf_out_seg_t;

struct mf_http_conn {
    mf_io_t io;
    mf_timer_t timer;
    mf_http_server_t *srv;
    const mf_http_server_config_t *config; /* the server's, for its life */
    mf_loop_t *loop;
    mf_list_t link; /* the server's list of connections */
    SSL *ssl;
    uint64_t deadline; /* loop ms; the timer may fire early (lazy) */
    mf_buf_t in;
    size_t in_off;        /* start of the current (unparsed) request */
    size_t scanned;       /* head bytes already searched for the end */
    size_t req_len;       /* head + body bytes of the request being served */
    mf_conn_body_t *body; /* BODY phase only, from the free lists */
    mf_buf_t out;
    mf_out_seg_t segs[MF_CONN_MAX_SEGS];
    size_t seg_done; /* bytes of segs[0] already written */
    mf_sockaddr_t peer;
    mf_conn_phase_t phase;
    int nsegs;
    unsigned requests; /* served on this connection */
    bool handshaking;
    bool keep_alive;  /* the current request allows reuse */
    bool close_after; /* close once the output is flushed */
    bool peer_closed; /* read returned EOF */
    bool rdhup;       /* the peer half-closed: read to EOF */
    bool drained;     /* the last read found the socket empty (a short
                         read or EAGAIN): no read is due until an edge */
    /* The one re-entrancy guard of the request path: set while the
     * exchange runs the handler (mf__conn_dispatch). A response may be
     * queued and the connection released from inside the handler; then
     * mf__http_conn_release only records it, and the dispatch destroys the
     * exchange after the handler has returned and goes on with the next
     * pipelined request, flushing once at the end: no recursion into the
     * parser, and no exchange freed under its own handler. */
    bool dispatching;
    bool ex_held; /* the exchange has not released the connection */
    bool free_posted;
    mf_http_exchange_t *ex; /* created per request, until destroyed */
    mf_post_t free_post;
};

/* An idle keep-alive connection costs one slab slot: keep it at 512 bytes
 * (nginx's idle connection costs about as much). */
_Static_assert(sizeof(mf_http_conn_t) <= 512,
               "mf_http_conn_t must fit a 512-byte slab slot");

static void mf__conn_on_io(mf_io_t *io, unsigned events);
static void mf__conn_on_timer(mf_timer_t *timer);
static void mf__conn_fail(mf_http_conn_t *conn, int status);
static void mf__conn_read(mf_http_conn_t *conn);
static void mf__conn_process(mf_http_conn_t *conn);
static void mf__conn_close(mf_http_conn_t *conn);
static void mf__conn_freed(mf_post_t *post);

/* ---- timers: one per connection, lazily pushed later -------------------- */

/* Sets the connection's deadline. Moving a deadline later costs a store:
 * the timer fires at the old time and re-arms for the rest, so a busy
 * keep-alive connection does not touch the timer heap per request. */
static void mf__conn_arm(mf_http_conn_t *conn, uint32_t ms)
{
    uint64_t now = mf_loop_now(conn->loop);
    conn->deadline = now + ms;
    if (!mf_timer_active(&conn->timer) ||
        conn->timer._deadline > conn->deadline)
        mf_timer_start(conn->loop, &conn->timer, ms);
}

static void mf__conn_disarm(mf_http_conn_t *conn)
{
    conn->deadline = 0;
}

/* When the body being received must be whole, by the total body timeout
 * and the minimum rate (http_server.h): the earlier of started + total and
 * started + grace + received / rate; UINT64_MAX when neither is set. */
static uint64_t mf__conn_body_due(const mf_http_conn_t *conn)
{
    const mf_http_server_config_t *c = conn->config;
    const mf_conn_body_t *b = conn->body;
    uint64_t due = UINT64_MAX, rate = c->min_body_rate;
    if (c->body_total_timeout_ms)
        due = b->started + c->body_total_timeout_ms;
    if (rate) {
        uint64_t ms =
            b->received / rate * 1000 + b->received % rate * 1000 / rate;
        if (b->started + c->body_rate_grace_ms + ms < due)
            due = b->started + c->body_rate_grace_ms + ms;
    }
    return due;
}

/* How long the body may now wait for more bytes: the body timeout, or less
 * when its deadline comes first (1 ms once it has passed: the timer answers).
 */
static uint32_t mf__conn_body_wait(const mf_http_conn_t *conn)
{
    uint64_t now = mf_loop_now(conn->loop), due = mf__conn_body_due(conn);
    uint32_t idle = conn->config->body_timeout_ms;
    if (due <= now)
        return 1;
    return due - now < idle ? (uint32_t)(due - now) : idle;
}

/* Body bytes arrived: a body past its deadline is answered 408 (the caller
 * flushes), else the wait starts again. */
static void mf__conn_body_arrived(mf_http_conn_t *conn, size_t n)
{
    conn->body->received += n;
    if (mf_loop_now(conn->loop) >= mf__conn_body_due(conn))
        mf__conn_fail(conn, 408);
    else
        mf__conn_arm(conn, mf__conn_body_wait(conn));
}

static uint32_t mf__conn_phase_timeout(const mf_http_conn_t *conn)
{
    const mf_http_server_config_t *c = conn->config;
    if (conn->nsegs)
        return c->write_timeout_ms;
    switch (conn->phase) {
    case MF_CONN_IDLE:
        return c->keepalive_timeout_ms;
    case MF_CONN_HEAD:
        return c->header_timeout_ms;
    case MF_CONN_BODY:
        return mf__conn_body_wait(conn);
    case MF_CONN_LINGERING:
        return MF_CONN_LINGER_MS;
    default:
        return 0;
    }
}

static void mf__conn_on_timer(mf_timer_t *timer)
{
    mf_http_conn_t *conn = timer->data;
    uint64_t now = mf_loop_now(conn->loop);
    if (!conn->deadline)
        return; /* disarmed: the handler owns the time */
    if (now < conn->deadline) {
        mf_timer_start(conn->loop, timer, conn->deadline - now);
        return;
    }
    /* A body that comes too slowly (not one that stopped) hears why. */
    if (conn->phase == MF_CONN_BODY && now >= mf__conn_body_due(conn)) {
        mf__conn_fail(conn, 408);
        mf__http_conn_flush(conn);
        return;
    }
    /* Slowloris, idle keep-alive, stalled body or write: just close. A
     * request that never completed gets no answer (nginx does the same),
     * but is reported as a 408, as nginx logs it. */
    if (conn->phase == MF_CONN_HEAD || conn->phase == MF_CONN_BODY)
        mf__http_server_rejected(conn->srv, 408, &conn->in, conn->in_off,
                                 &conn->peer);
    mf__conn_close(conn);
}

/* ---- lifecycle ----------------------------------------------------------- */

void mf__http_conn_accept(mf_http_server_t *srv, int fd,
                          const mf_sockaddr_t *peer)
{
    mf_loop_t *loop = mf_http_server_loop(srv);
    mf_http_conn_t *conn = mf_loop_alloc(loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->srv = srv;
    conn->config = mf__http_server_config(srv);
    conn->loop = loop;
    conn->peer = *peer;
    conn->phase = MF_CONN_IDLE;
    mf_io_init(&conn->io, fd, mf__conn_on_io, conn);
    mf_timer_init(&conn->timer, mf__conn_on_timer, conn);
    mf_post_init(&conn->free_post, mf__conn_freed, conn);
    mf__buf_init(&conn->in);
    mf__buf_init(&conn->out);
    mf__http_server_conn_opened(srv, &conn->link);
    mf_tls_server_t *tls = mf__http_server_tls(srv);
    if (tls) {
        conn->ssl = mf__tls_server_ssl(tls, fd);
        conn->handshaking = true;
    }
    if ((tls && !conn->ssl) ||
        mf_io_start(loop, &conn->io, MF_IO_READ | MF_IO_WRITE) < 0) {
        mf__conn_close(conn);
        return;
    }
    /* The first request must arrive within the header timeout. */
    mf__conn_arm(conn, conn->config->header_timeout_ms);
}

mf_http_conn_t *mf__http_conn_from_link(mf_list_t *link)
{
    return mf_container_of(link, mf_http_conn_t, link);
}

static void mf__conn_drop_body(mf_http_conn_t *conn)
{
    if (conn->body)
        mf_loop_free(conn->loop, conn->body, sizeof(*conn->body));
    conn->body = NULL;
}

/* The input stays until the free: a held exchange's request points in. */
static void mf__conn_release_output(mf_http_conn_t *conn)
{
    mf__conn_drop_body(conn);
    for (int i = 0; i < conn->nsegs; i++)
        mf__buf_release(conn->loop, &conn->segs[i].owned);
    conn->nsegs = 0;
    mf__buf_release(conn->loop, &conn->out);
}

/* Frees the connection once closed and released by its exchange. The free
 * itself is deferred: callers up the stack may still look at conn. */
static void mf__conn_maybe_free(mf_http_conn_t *conn)
{
    if (conn->phase != MF_CONN_CLOSED || conn->ex_held || conn->free_posted)
        return;
    conn->free_posted = true;
    mf_loop_defer(conn->loop, &conn->free_post);
}

static void mf__conn_freed(mf_post_t *post)
{
    mf_http_conn_t *conn = post->data;
    if (conn->ex)
        mf__http_exchange_destroy(conn->ex);
    mf__buf_release(conn->loop, &conn->in);
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

static void mf__conn_close(mf_http_conn_t *conn)
{
    if (conn->phase == MF_CONN_CLOSED)
        return;
    conn->phase = MF_CONN_CLOSED;
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->timer);
    mf__tls_close(conn->ssl);
    conn->ssl = NULL;
    close(conn->io.fd);
    mf__conn_release_output(conn);
    if (conn->ex_held)
        mf__http_exchange_lost(conn->ex); /* may release the connection */
    mf__http_server_conn_closed(conn->srv, &conn->link);
    mf__conn_maybe_free(conn);
}

void mf__http_conn_abort(mf_http_conn_t *conn)
{
    mf__conn_close(conn);
}

bool mf__http_conn_idle(const mf_http_conn_t *conn)
{
    return conn->phase == MF_CONN_IDLE && !conn->in.len && !conn->nsegs;
}

void mf__http_conn_stop(mf_http_conn_t *conn)
{
    conn->keep_alive = false;
    if (conn->phase != MF_CONN_IDLE || conn->in.len)
        return; /* busy: its answer says Connection: close */
    if (conn->nsegs)
        conn->close_after = true; /* after its last answer is out */
    else
        mf__conn_close(conn);
}

static void mf__conn_drain_lingering(mf_http_conn_t *conn);

/* The error answer is out: half-close, then read and discard what the
 * client still sends until it closes (or the linger timer), so that closing
 * with unread input does not reset the connection under the answer. */
static void mf__conn_linger(mf_http_conn_t *conn)
{
    shutdown(conn->io.fd, SHUT_WR);
    mf__conn_arm(conn, MF_CONN_LINGER_MS);
    mf__conn_drain_lingering(conn);
}

/* ---- queries for the exchange ------------------------------------------- */

mf_http_server_t *mf__http_conn_server(const mf_http_conn_t *conn)
{
    return conn->srv;
}

mf_loop_t *mf__http_conn_loop(const mf_http_conn_t *conn)
{
    return conn->loop;
}

const mf_sockaddr_t *mf__http_conn_peer(const mf_http_conn_t *conn)
{
    return &conn->peer;
}

size_t mf__http_conn_pending(const mf_http_conn_t *conn)
{
    size_t total = 0;
    for (int i = 0; i < conn->nsegs; i++)
        total += conn->segs[i].len;
    return total - conn->seg_done;
}

bool mf__http_conn_keep_alive(mf_http_conn_t *conn)
{
    if (conn->peer_closed || mf__http_server_stopping(conn->srv))
        conn->keep_alive = false;
    return conn->keep_alive;
}

void mf__http_conn_close_when_done(mf_http_conn_t *conn)
{
    conn->keep_alive = false;
}

/* ---- output ------------------------------------------------------------- */

static mf_out_seg_t *mf__conn_last_seg(mf_http_conn_t *conn)
{
    return conn->nsegs ? &conn->segs[conn->nsegs - 1] : NULL;
}

int mf__http_conn_queue_pieces(mf_http_conn_t *conn, const mf_piece_t *pieces,
                               size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += pieces[i].len;
    mf_out_seg_t *last = mf__conn_last_seg(conn);
    size_t off = conn->out.len;
    bool extend = last && !last->ptr && last->off + last->len == off;
    if (!extend && conn->nsegs == MF_CONN_MAX_SEGS)
        return MF_ENOMEM; /* no room: parsing pauses before this happens */
    if (conn->out.cap - off < total &&
        mf__buf_reserve(conn->loop, &conn->out, total) < 0)
        return MF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].len)
            memcpy(conn->out.data + conn->out.len, pieces[i].data,
                   pieces[i].len);
        conn->out.len += pieces[i].len;
    }
    if (extend) {
        last->len += total;
        return 0;
    }
    mf_out_seg_t *seg = &conn->segs[conn->nsegs++];
    seg->ptr = NULL;
    seg->off = off;
    seg->len = total;
    mf__buf_init(&seg->owned);
    return 0;
}

int mf__http_conn_queue_ref(mf_http_conn_t *conn, const char *ptr, size_t len,
                            mf_buf_t *owned)
{
    if (conn->nsegs == MF_CONN_MAX_SEGS)
        return MF_ENOMEM;
    mf_out_seg_t *seg = &conn->segs[conn->nsegs++];
    seg->ptr = ptr;
    seg->off = 0;
    seg->len = len;
    if (owned) {
        seg->owned = *owned; /* the segment takes the buffer */
        mf__buf_init(owned);
    } else {
        mf__buf_init(&seg->owned);
    }
    return 0;
}

static int mf__conn_gather(mf_http_conn_t *conn, struct iovec *iov)
{
    for (int i = 0; i < conn->nsegs; i++) {
        mf_out_seg_t *seg = &conn->segs[i];
        const char *base = seg->ptr ? seg->ptr : conn->out.data + seg->off;
        size_t skip = i == 0 ? conn->seg_done : 0;
        iov[i].iov_base = (void *)(base + skip);
        iov[i].iov_len = seg->len - skip;
    }
    return conn->nsegs;
}

/* Drops fully written segments from the front. */
static void mf__conn_advance(mf_http_conn_t *conn, size_t written)
{
    int done = 0;
    written += conn->seg_done;
    while (done < conn->nsegs && written >= conn->segs[done].len) {
        written -= conn->segs[done].len;
        mf__buf_release(conn->loop, &conn->segs[done].owned);
        done++;
    }
    conn->seg_done = written;
    if (done) {
        memmove(conn->segs, conn->segs + done,
                (size_t)(conn->nsegs - done) * sizeof(conn->segs[0]));
        conn->nsegs -= done;
    }
    if (!conn->nsegs) {
        conn->out.len = 0;
        conn->seg_done = 0;
    }
}

/* A streaming writer waits for room: tell its exchange once the queue is
 * low. */
static void mf__conn_maybe_drained(mf_http_conn_t *conn)
{
    if (!conn->ex_held || conn->phase == MF_CONN_CLOSED ||
        mf__http_conn_pending(conn) >= MF_HTTP_WRITE_LOW_WATER)
        return;
    mf__http_exchange_drained(conn->ex);
}

static void mf__conn_output_done(mf_http_conn_t *conn)
{
    if (conn->close_after) {
        if (conn->phase == MF_CONN_LINGERING)
            mf__conn_linger(conn);
        else
            mf__conn_close(conn);
        return;
    }
    if (conn->phase == MF_CONN_IDLE && conn->in.len == 0)
        mf__buf_release(conn->loop, &conn->out);
    uint32_t ms = mf__conn_phase_timeout(conn);
    if (ms)
        mf__conn_arm(conn, ms);
}

int mf__http_conn_flush(mf_http_conn_t *conn)
{
    struct iovec iov[MF_CONN_MAX_SEGS];
    /* Only a flush that empties the queue (or a pending close) moves the
     * connection on: an event with nothing to write must not push the
     * header deadline (slowloris) further out. */
    if (!conn->nsegs && !conn->close_after)
        return 0;
    while (conn->nsegs && conn->phase != MF_CONN_CLOSED && !conn->handshaking) {
        int n = mf__conn_gather(conn, iov);
        ssize_t w = mf__sock_writev(conn->io.fd, conn->ssl, iov, n);
        if (w == MF_EAGAIN) {
            mf__conn_arm(conn, conn->config->write_timeout_ms);
            mf__conn_maybe_drained(conn);
            return 0;
        }
        if (w < 0) {
            mf__conn_close(conn);
            return (int)w;
        }
        mf__conn_advance(conn, (size_t)w);
    }
    mf__conn_maybe_drained(conn);
    if (conn->phase == MF_CONN_CLOSED)
        return MF_ECLOSED;
    if (!conn->nsegs)
        mf__conn_output_done(conn);
    return 0;
}

/* ---- error answers ------------------------------------------------------- */

/* Bad input (or no memory to take it): answer with the status, then close
 * after lingering; when even the answer cannot be queued, close now. */
static void mf__conn_fail(mf_http_conn_t *conn, int status)
{
    mf_http_head_t h;
    mf__http_server_rejected(conn->srv, status, &conn->in, conn->in_off,
                             &conn->peer); /* for the access log */
    mf__http_head_error(&h, conn->srv, status);
    conn->close_after = true;
    conn->phase = MF_CONN_LINGERING;
    if (mf__http_conn_queue_copy(conn, h.fixed, h.len) < 0)
        mf__conn_close(conn);
}

/* ---- input ----------------------------------------------------------------
 */

static int mf__conn_parse_head(mf_http_conn_t *conn, mf_http_request_t *req,
                               mf_http_header_t *headers, size_t nheaders,
                               size_t *scanned)
{
    req->headers = headers;
    req->num_headers = nheaders;
    return mf_http_parse_request(conn->in.data + conn->in_off,
                                 conn->in.len - conn->in_off, req,
                                 &conn->config->limits, scanned);
}

/* 100 Continue, once, when the client waits for it before its body.
 * Returns false after failing the request (no memory to queue it). */
static bool mf__conn_send_continue(mf_http_conn_t *conn)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (conn->body->sent_continue || conn->nsegs == MF_CONN_MAX_SEGS)
        return true;
    conn->body->sent_continue = true;
    if (mf__http_conn_queue_copy(conn, cont, sizeof cont - 1) == 0)
        return true;
    mf__conn_fail(conn, 500);
    return false;
}

/* The whole request is in conn->in: create its exchange and run the
 * handler. The exchange points into conn->in until it is destroyed. */
static void mf__conn_dispatch(mf_http_conn_t *conn,
                              const mf_http_request_t *req, size_t body_len,
                              size_t raw_len)
{
    size_t head_len = raw_len - body_len;
    const char *body =
        body_len ? conn->in.data + conn->in_off + head_len : NULL;
    mf__conn_drop_body(conn); /* the body stays in conn->in */
    conn->req_len = raw_len;
    conn->requests++;
    unsigned max = conn->config->max_keepalive_requests;
    conn->keep_alive = req->keep_alive &&
                       !mf__http_server_stopping(conn->srv) &&
                       (max == 0 || conn->requests < max);
    conn->phase = MF_CONN_HANDLING;
    mf__conn_disarm(conn);
    mf_http_exchange_t *ex =
        mf__http_exchange_create(conn, req, body, body_len);
    conn->ex = ex;
    conn->ex_held = true;
    conn->dispatching = true;
    mf__http_exchange_run(ex);
    conn->dispatching = false;
    /* Released inside the handler: the exchange is no longer on the
     * stack. A closed connection destroys it with itself. */
    if (!conn->ex_held && conn->phase != MF_CONN_CLOSED) {
        mf__http_exchange_destroy(ex);
        conn->ex = NULL;
    }
}

/* A request with a body is complete. Its head is parsed again: the buffer
 * may have grown and moved while the body arrived (heads are small and the
 * parser is fast; a request without a body is parsed once). */
static void mf__conn_dispatch_with_body(mf_http_conn_t *conn, size_t body_len,
                                        size_t raw_len)
{
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    mf_http_request_t req;
    size_t nh = conn->config->limits.max_headers;
    if (nh == 0 || nh > MF_HTTP_MAX_HEADERS)
        nh = MF_HTTP_MAX_HEADERS;
    mf__conn_parse_head(conn, &req, headers, nh, NULL);
    mf__conn_dispatch(conn, &req, body_len, raw_len);
}

/* Content-Length body: complete when all bytes are in the buffer. */
static bool mf__conn_length_body(mf_http_conn_t *conn, uint64_t length)
{
    size_t need = conn->body->head_len + (size_t)length;
    size_t have = conn->in.len - conn->in_off;
    if (have >= need) {
        mf__conn_dispatch_with_body(conn, (size_t)length, need);
        return true;
    }
    if (mf__buf_reserve(conn->loop, &conn->in, need - have) < 0) {
        mf__conn_fail(conn, 413);
        return false;
    }
    return false;
}

/* Chunked body: decode in place what has arrived so far. */
static bool mf__conn_chunked_body(mf_http_conn_t *conn)
{
    mf_conn_body_t *b = conn->body;
    size_t start = conn->in_off + b->head_len + b->body_have;
    size_t len = conn->in.len - start;
    ssize_t rest =
        mf_http_chunked_decode(&b->chunked, conn->in.data + start, &len);
    b->body_have += len;
    if (rest == MF_HTTP_ERROR) {
        mf__conn_fail(conn, b->chunked.error_status);
        return false;
    }
    size_t body_end = conn->in_off + b->head_len + b->body_have;
    if (rest == MF_HTTP_INCOMPLETE) {
        conn->in.len = body_end;
        return false;
    }
    conn->in.len = body_end + (size_t)rest; /* the next request follows */
    mf__conn_dispatch_with_body(conn, b->body_have, b->head_len + b->body_have);
    return true;
}

static bool mf__conn_body(mf_http_conn_t *conn)
{
    if (conn->body->chunked_body)
        return mf__conn_chunked_body(conn);
    return mf__conn_length_body(conn, conn->body->content_length);
}

/* A head has been parsed: decide how its body arrives. */
static bool mf__conn_head_done(mf_http_conn_t *conn, mf_http_request_t *req,
                               int head_len)
{
    if (req->body == MF_HTTP_BODY_NONE) {
        mf__conn_dispatch(conn, req, 0, (size_t)head_len);
        return true;
    }
    if (!conn->body)
        conn->body = mf_loop_alloc(conn->loop, sizeof(*conn->body));
    conn->body->head_len = (size_t)head_len;
    conn->body->body_have = 0;
    conn->body->started = mf_loop_now(conn->loop);
    conn->body->received = conn->in.len - conn->in_off - (size_t)head_len;
    conn->body->sent_continue = false;
    conn->body->chunked_body = req->body == MF_HTTP_BODY_CHUNKED;
    conn->body->content_length = req->content_length;
    uint64_t max = conn->config->max_body;
    if (req->body == MF_HTTP_BODY_LENGTH && max && req->content_length > max) {
        mf__conn_fail(conn, 413);
        return false;
    }
    if (req->body == MF_HTTP_BODY_CHUNKED)
        mf_http_chunked_init(&conn->body->chunked, max);
    conn->phase = MF_CONN_BODY;
    conn->keep_alive = req->keep_alive;
    if (req->expect_continue &&
        conn->in.len - conn->in_off == (size_t)head_len &&
        !mf__conn_send_continue(conn))
        return false;
    mf__conn_arm(conn, mf__conn_body_wait(conn));
    return mf__conn_body(conn);
}

/* Parses and serves as many complete requests as the buffer holds, in
 * order. Returns when it needs more bytes, an exchange holds the
 * connection, the output table is full, or the connection is closing. */
static void mf__conn_process(mf_http_conn_t *conn)
{
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    while (conn->phase <= MF_CONN_BODY && !conn->close_after &&
           conn->nsegs < MF_CONN_MAX_SEGS - 1 && conn->in.len > conn->in_off) {
        if (conn->phase == MF_CONN_BODY) { /* its head is parsed already */
            if (!mf__conn_body(conn))
                break;
            continue;
        }
        mf_http_request_t req;
        int rc = mf__conn_parse_head(conn, &req, headers, MF_HTTP_MAX_HEADERS,
                                     &conn->scanned);
        if (rc == MF_HTTP_INCOMPLETE) {
            if (conn->phase == MF_CONN_IDLE) {
                conn->phase = MF_CONN_HEAD; /* slowloris clock starts */
                mf__conn_arm(conn, conn->config->header_timeout_ms);
            }
            break;
        }
        if (rc == MF_HTTP_ERROR) {
            mf__conn_fail(conn, req.error_status);
            break;
        }
        if (!mf__conn_head_done(conn, &req, rc))
            break;
    }
}

/* The exchange is done: drop the request's bytes, and keep the
 * connection's memory small while it waits. */
static void mf__conn_request_finished(mf_http_conn_t *conn)
{
    conn->in_off += conn->req_len;
    conn->req_len = 0;
    conn->scanned = 0;
    if (conn->in_off == conn->in.len) {
        conn->in_off = 0;
        conn->in.len = 0;
    }
    if (!conn->keep_alive)
        conn->close_after = true;
    conn->phase = MF_CONN_IDLE;
}

void mf__http_conn_release(mf_http_conn_t *conn)
{
    conn->ex_held = false;
    if (conn->phase == MF_CONN_CLOSED) {
        mf__conn_maybe_free(conn);
        return;
    }
    mf__conn_request_finished(conn);
    if (conn->dispatching)
        return; /* see `dispatching`: the dispatch goes on from here */
    /* A held exchange finished later: serve what was pipelined behind it
     * and read what arrived meanwhile, then flush everything at once.
     * What arrived while it was held was read then (into spare room) at
     * its edge; a read is due only if one stopped for lack of room, or
     * TLS may hold bytes, or the peer half-closed (no edge follows). */
    mf__http_exchange_destroy(conn->ex);
    conn->ex = NULL;
    mf__conn_process(conn);
    if (!conn->drained || conn->ssl || conn->rdhup)
        mf__conn_read(conn);
    mf__http_conn_flush(conn);
}

static void mf__conn_drain_lingering(mf_http_conn_t *conn)
{
    char scratch[4096];
    for (;;) {
        ssize_t n =
            mf__sock_read(conn->io.fd, conn->ssl, scratch, sizeof scratch);
        if (n == MF_EAGAIN)
            return;
        if (n <= 0) {
            mf__conn_close(conn);
            return;
        }
    }
}

/* Gets room to read into. While an exchange holds the connection the
 * buffer must not move (the request points into it): read only into spare
 * room. */
static int mf__conn_input_room(mf_http_conn_t *conn)
{
    if (conn->in.cap - conn->in.len > 0)
        return 0;
    if (conn->phase == MF_CONN_HANDLING)
        return MF_EAGAIN;
    size_t limit = conn->config->limits.max_head_bytes;
    if (conn->phase != MF_CONN_BODY && conn->in.len - conn->in_off > limit)
        return MF_EAGAIN; /* the parser answers 431 */
    if (conn->in_off) {   /* slide the unparsed tail to the front */
        memmove(conn->in.data, conn->in.data + conn->in_off,
                conn->in.len - conn->in_off);
        conn->in.len -= conn->in_off;
        conn->in_off = 0;
        if (conn->in.cap > conn->in.len)
            return 0;
    }
    return mf__buf_reserve(conn->loop, &conn->in,
                           conn->in.cap ? conn->in.cap : MF_CONN_IN_INITIAL);
}

/* EOF from the client. Answers already queued still go out (a client may
 * send pipelined requests and half-close), even when the FIN came in the
 * same read as a request still at work behind them; that exchange is
 * aborted once the queue is written, by the close (the client is gone: its
 * on_close callback runs). */
static void mf__conn_peer_closed(mf_http_conn_t *conn)
{
    conn->peer_closed = true;
    conn->close_after = true;
    if (conn->phase == MF_CONN_HANDLING && !conn->nsegs) {
        mf__conn_close(conn);
        return;
    }
    mf__http_conn_flush(conn); /* closes when the queue is written */
}

static void mf__conn_read(mf_http_conn_t *conn)
{
    while (conn->phase != MF_CONN_CLOSED && !conn->peer_closed) {
        if (conn->phase == MF_CONN_LINGERING) {
            if (!conn->nsegs) /* else: the flush ends in mf__conn_linger */
                mf__conn_drain_lingering(conn);
            return;
        }
        int rc = mf__conn_input_room(conn);
        if (rc == MF_EAGAIN) {
            conn->drained = false; /* bytes may wait in the socket */
            return;
        }
        if (rc < 0) {
            mf__conn_fail(conn, 413);
            return;
        }
        size_t room = conn->in.cap - conn->in.len;
        ssize_t n = mf__sock_read(conn->io.fd, conn->ssl,
                                  conn->in.data + conn->in.len, room);
        conn->drained = n == MF_EAGAIN || (n > 0 && (size_t)n < room);
        if (n == MF_EAGAIN)
            break;
        if (n <= 0) {
            if (n == 0)
                mf__conn_peer_closed(conn);
            else
                mf__conn_close(conn);
            return;
        }
        conn->in.len += (size_t)n;
        if (conn->phase == MF_CONN_BODY)
            mf__conn_body_arrived(conn, (size_t)n); /* may answer 408 */
        mf__conn_process(conn);
        /* A short plain read emptied the socket (the next arrival raises a
         * new edge), unless the peer also closed: then read on to the EOF,
         * which raises no further edge. TLS may hold decrypted bytes. */
        if ((size_t)n < room && !conn->ssl && !conn->rdhup)
            break;
    }
    if (conn->phase == MF_CONN_IDLE && conn->in.len == 0)
        mf__buf_release(conn->loop, &conn->in);
}

static void mf__conn_on_io(mf_io_t *io, unsigned events)
{
    mf_http_conn_t *conn = io->data;
    if (events & MF_IO_RDHUP)
        conn->rdhup = true;
    if (conn->handshaking) {
        int rc = mf__tls_handshake(conn->ssl);
        if (rc == MF_EAGAIN)
            return;
        if (rc < 0) {
            mf__conn_close(conn);
            return;
        }
        conn->handshaking = false;
    }
    if ((events & MF_IO_WRITE) && conn->nsegs)
        mf__http_conn_flush(conn);
    if (conn->phase == MF_CONN_CLOSED)
        return;
    if (events & (MF_IO_READ | MF_IO_HUP | MF_IO_ERROR))
        mf__conn_read(conn);
    if (conn->phase != MF_CONN_CLOSED)
        mf__http_conn_flush(conn);
}
