/*
 * http1.c — HTTP/1.x over a transport: requests in (heads parsed in place,
 * bodies by Content-Length or chunked, pipelining, 100-continue, the
 * header/body/keep-alive timeouts, error answers), responses out (the head
 * with its framing and Connection lines, chunked pieces). Owns mf_http1_t,
 * whose body is private to this file; the contract is http1.h.
 *
 * May call: the transport's down-calls (http_transport.h), the parser,
 * response heads (http_head.h), the engine. Calls up only through
 * function pointers: the exchange ops and the hooks in the site
 * (http_site.h). Must not call the exchange or the server directly.
 *
 * The hot path of a keep-alive request is: one read (by the transport),
 * parse in place, create and run the exchange, whose send queues the head
 * and a small body in one copy, one write. No allocation: the exchange and
 * both buffers come from the loop's free lists.
 *
 * Re-entrancy: a response may be queued and the protocol released from
 * inside the handler; then the release only records it, and the dispatch
 * destroys the exchange after the handler has returned and goes on with
 * the next pipelined request, flushing once at the end: no recursion into
 * the parser, and no exchange freed under its own handler (`dispatching`).
 */
#include "http1.h"

#include <string.h>

#include "http_head.h"

/* What the protocol is waiting for; picks the timeout that applies. */
typedef enum mf_h1_phase {
    MF_H1_IDLE,      /* keep-alive: waiting for the next request */
    MF_H1_HEAD,      /* some bytes of a head have arrived */
    MF_H1_BODY,      /* head parsed, body bytes pending */
    MF_H1_HANDLING,  /* an exchange holds the request */
    MF_H1_LINGERING, /* answered an error; draining before close */
    MF_H1_CLOSED
} mf_h1_phase_t;

/* The window a streamed body (or an upgraded connection) is read
 * through: room behind the head, used again as the handler reads. */
#define MF_H1_STREAM_WINDOW (64 * 1024)

/* A request body being received: kept apart so that an idle keep-alive
 * connection stays small. It also serves a body streamed to the handler
 * and the raw bytes of an upgraded connection (the stream fields): their
 * decoded bytes are [head_len, head_len + body_have) from the input's off,
 * of which the first `taken` were read by the handler. */
typedef struct mf_h1_body {
    size_t head_len;         /* the parsed head's length */
    size_t body_have;        /* decoded body bytes after the head */
    uint64_t content_length; /* when not chunked */
    uint64_t started;        /* loop ms when the head was parsed */
    uint64_t received;       /* bytes read since (framing included) */
    mf_http_chunked_t chunked;
    bool chunked_body;
    bool sent_continue;
    /* the stream */
    bool streaming;       /* the handler reads it (stream_body) */
    bool expect_continue; /* 100 Continue at the first read that waits */
    bool complete;        /* the body's last byte is in body_have */
    bool watching;        /* the exchange waits for a read's answer */
    int refused;          /* 413, 400, 408: the body was refused */
    size_t taken;         /* bytes of body_have the handler has read */
    uint64_t total;       /* decoded body bytes so far */
    mf_post_t kick;       /* reads again and answers a watch */
} mf_h1_body_t;

typedef struct mf_http1 {
    mf_transport_t *t;
    mf_transport_input_t *in; /* the transport's; in->pinned: ex is held */
    mf_http_site_t *site;
    mf_loop_t *loop;
    const mf_http_server_config_t *config; /* the server's, for its life */
    const mf_http_exchange_ops_t *exops;   /* the site's, kept for the free */
    const mf_sockaddr_t *peer;             /* the transport's */
    size_t scanned;         /* head bytes already searched for the end */
    size_t req_len;         /* head + body bytes of the request being served */
    mf_h1_body_t *body;     /* BODY phase only, from the free lists */
    mf_http_exchange_t *ex; /* created per request, until destroyed */
    mf_h1_phase_t phase;
    unsigned requests; /* served on this connection */
    int minor_version; /* of the request being answered */
    bool keep_alive;   /* the current request allows reuse */
    bool closing;      /* the transport ends after its queue: no more input */
    bool peer_closed;  /* the client half-closed */
    bool dispatching;  /* the exchange runs its handler (see above) */
    bool raw;          /* upgraded: the exchange has the connection's bytes */
    /* After an upgrade, the request's bytes (head, and a body read whole)
     * copied out of the input, so that the input can be let go while the
     * connection idles: the exchange points here until destroyed. */
    char *kept;
    uint32_t kept_len;
} mf_http1_t;

_Static_assert(sizeof(mf_http1_t) <= 128,
               "mf_http1_t must fit a 128-byte slab slot");

static const mf_transport_ops_t mf__h1_transport_ops;
static const mf_http_proto_ops_t mf__h1_proto_ops;

static void mf__h1_process(mf_http1_t *h);
static void mf__h1_stream_kick(mf_post_t *post);
static bool mf__h1_dispatch_streamed(mf_http1_t *h, size_t head_len);

static bool mf__h1_held(const mf_http1_t *h)
{
    return h->in->pinned;
}

/* Destroys the request's exchange, then the request bytes it pointed to. */
static void mf__h1_destroy_exchange(mf_http1_t *h, mf_http_exchange_t *ex)
{
    h->exops->destroy(ex);
    if (h->kept) {
        mf_loop_free(h->loop, h->kept, h->kept_len);
        h->kept = NULL;
        h->kept_len = 0;
    }
}

/* ---- timers ----------------------------------------------------------------
 */

/* When the body being received must be whole, by the total body timeout
 * and the minimum rate (http_server.h): the earlier of started + total and
 * started + grace + received / rate; UINT64_MAX when neither is set. */
static uint64_t mf__h1_body_due(const mf_http1_t *h)
{
    const mf_http_server_config_t *c = h->config;
    const mf_h1_body_t *b = h->body;
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
static uint32_t mf__h1_body_wait(const mf_http1_t *h)
{
    uint64_t now = mf_loop_now(h->loop), due = mf__h1_body_due(h);
    uint32_t idle = h->config->body_timeout_ms;
    if (due <= now)
        return 1;
    return due - now < idle ? (uint32_t)(due - now) : idle;
}

static uint32_t mf__h1_phase_timeout(const mf_http1_t *h)
{
    const mf_http_server_config_t *c = h->config;
    switch (h->phase) {
    case MF_H1_IDLE:
        return c->keepalive_timeout_ms;
    case MF_H1_HEAD:
        return c->header_timeout_ms;
    case MF_H1_BODY:
        return mf__h1_body_wait(h);
    default:
        return 0; /* lingering: the transport's own deadline */
    }
}

/* ---- error answers ----------------------------------------------------------
 */

/* Bad input (or no memory to take it): answer with the status, then close
 * after lingering; when even the answer cannot be queued, close now. */
static void mf__h1_fail(mf_http1_t *h, int status)
{
    mf_http_head_t hd;
    size_t body_len = mf__http_head_error(&hd, h->site, status);
    h->closing = true;
    mf__transport_end(h->t, true);
    h->phase = MF_H1_LINGERING;
    bool queued = mf__transport_queue_copy(h->t, hd.fixed, hd.len) == 0;
    /* For the access log: what the client gets, before a close can free
     * what it had sent. */
    h->site->hooks->rejected(h->site, status, queued ? body_len : 0,
                             &h->in->buf, h->in->off, h->peer);
    if (!queued)
        mf__transport_close(h->t);
}

/* Body bytes arrived: a body past its deadline is answered 408 (the caller
 * flushes), else the wait starts again. */
static void mf__h1_body_arrived(mf_http1_t *h, size_t n)
{
    h->body->received += n;
    if (mf_loop_now(h->loop) >= mf__h1_body_due(h))
        mf__h1_fail(h, 408);
    else
        mf__transport_arm(h->t, mf__h1_body_wait(h));
}

/* ---- requests in ------------------------------------------------------------
 */

static void mf__h1_drop_body(mf_http1_t *h)
{
    if (h->body) {
        if (mf_list_linked(&h->body->kick._link))
            mf_list_remove(&h->body->kick._link);
        mf_loop_free(h->loop, h->body, sizeof(*h->body));
    }
    h->body = NULL;
}

static int mf__h1_parse_head(mf_http1_t *h, mf_http_request_t *req,
                             mf_http_header_t *headers, size_t nheaders,
                             size_t *scanned)
{
    req->headers = headers;
    req->num_headers = nheaders;
    return mf_http_parse_request(h->in->buf.data + h->in->off,
                                 h->in->buf.len - h->in->off, req,
                                 &h->config->limits, scanned);
}

/* 100 Continue, once, when the client waits for it before its body.
 * Returns false after failing the request (no memory to queue it). */
static bool mf__h1_send_continue(mf_http1_t *h)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (h->body->sent_continue || mf__transport_queue_room(h->t) == 0)
        return true;
    h->body->sent_continue = true;
    if (mf__transport_queue_copy(h->t, cont, sizeof cont - 1) == 0)
        return true;
    mf__h1_fail(h, 500);
    return false;
}

/* The whole request is in the input: create its exchange and run the
 * handler. The exchange points into the input (pinned) until destroyed. */
static void mf__h1_dispatch(mf_http1_t *h, const mf_http_request_t *req,
                            size_t body_len, size_t raw_len)
{
    size_t head_len = raw_len - body_len;
    const char *body =
        body_len ? h->in->buf.data + h->in->off + head_len : NULL;
    if (h->body && h->body->streaming)
        body_len = SIZE_MAX; /* read through the stream (http_proto.h) */
    else
        mf__h1_drop_body(h); /* the body stays in the input */
    h->req_len = raw_len;
    h->requests++;
    unsigned max = h->config->max_keepalive_requests;
    h->keep_alive = req->keep_alive && !h->site->stopping &&
                    (max == 0 || h->requests < max);
    h->minor_version = req->minor_version;
    h->phase = MF_H1_HANDLING;
    mf__transport_disarm(h->t);
    h->in->pinned = true;
    h->in->movable = false;
    h->in->max = h->config->limits.max_head_bytes;
    mf_http_exchange_t *ex = h->exops->create(h->site, &mf__h1_proto_ops, h,
                                              h->peer, req, body, body_len);
    h->ex = ex;
    h->dispatching = true;
    h->exops->run(ex);
    h->dispatching = false;
    /* Released inside the handler: the exchange is no longer on the
     * stack. A closed connection destroys it with itself. */
    if (!mf__h1_held(h) && h->phase != MF_H1_CLOSED) {
        mf__h1_destroy_exchange(h, ex);
        h->ex = NULL;
    }
}

/* A request with a body is complete. Its head is parsed again: the buffer
 * may have grown and moved while the body arrived (heads are small and the
 * parser is fast; a request without a body is parsed once). */
static void mf__h1_dispatch_with_body(mf_http1_t *h, size_t body_len,
                                      size_t raw_len)
{
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    mf_http_request_t req;
    size_t nh = h->config->limits.max_headers;
    if (nh == 0 || nh > MF_HTTP_MAX_HEADERS)
        nh = MF_HTTP_MAX_HEADERS;
    mf__h1_parse_head(h, &req, headers, nh, NULL);
    mf__h1_dispatch(h, &req, body_len, raw_len);
}

/* Content-Length body: complete when all bytes are in the buffer. */
static bool mf__h1_length_body(mf_http1_t *h, uint64_t length)
{
    size_t need = h->body->head_len + (size_t)length;
    size_t have = h->in->buf.len - h->in->off;
    if (have >= need) {
        mf__h1_dispatch_with_body(h, (size_t)length, need);
        return true;
    }
    if (mf__transport_input_reserve(h->t, need - have) < 0) {
        mf__h1_fail(h, 413);
        return false;
    }
    return false;
}

/* Chunked body: decode in place what has arrived so far. */
static bool mf__h1_chunked_body(mf_http1_t *h)
{
    mf_h1_body_t *b = h->body;
    mf_transport_input_t *in = h->in;
    size_t start = in->off + b->head_len + b->body_have;
    size_t len = in->buf.len - start;
    ssize_t rest =
        mf_http_chunked_decode(&b->chunked, in->buf.data + start, &len);
    b->body_have += len;
    if (rest == MF_HTTP_ERROR) {
        mf__h1_fail(h, b->chunked.error_status);
        return false;
    }
    size_t body_end = in->off + b->head_len + b->body_have;
    if (rest == MF_HTTP_INCOMPLETE) {
        in->buf.len = body_end;
        return false;
    }
    in->buf.len = body_end + (size_t)rest; /* the next request follows */
    mf__h1_dispatch_with_body(h, b->body_have, b->head_len + b->body_have);
    return true;
}

static bool mf__h1_body(mf_http1_t *h)
{
    if (h->body->chunked_body)
        return mf__h1_chunked_body(h);
    return mf__h1_length_body(h, h->body->content_length);
}

/* ---- a body streamed to the handler, an upgraded connection ----------------
 */

static size_t mf__h1_stream_start(const mf_http1_t *h)
{
    return h->in->off + h->body->head_len;
}

/* Takes the bytes that arrived behind the decoded ones: a Content-Length
 * body up to its end (what follows is the next request), a chunked one
 * decoded in place, and after an upgrade everything. */
static void mf__h1_stream_take(mf_http1_t *h)
{
    mf_h1_body_t *b = h->body;
    mf_transport_input_t *in = h->in;
    if (b->complete || b->refused)
        return;
    size_t from = mf__h1_stream_start(h) + b->body_have;
    size_t len = in->buf.len - from;
    if (h->raw) {
        b->body_have += len;
        return;
    }
    if (!b->chunked_body) {
        uint64_t left = b->content_length - b->total;
        size_t n = len < left ? len : (size_t)left;
        b->body_have += n;
        b->total += n;
        b->complete = b->total == b->content_length;
        return;
    }
    ssize_t rest =
        mf_http_chunked_decode(&b->chunked, in->buf.data + from, &len);
    b->body_have += len;
    b->total += len;
    if (rest == MF_HTTP_ERROR) {
        b->refused = b->chunked.error_status;
    } else if (rest == MF_HTTP_INCOMPLETE) {
        in->buf.len = from + len;
    } else {
        in->buf.len = from + len + (size_t)rest; /* the next request */
        b->complete = true;
    }
}

/* Whether a read would answer now (bytes, the end, an error). */
static bool mf__h1_stream_ready(const mf_http1_t *h)
{
    const mf_h1_body_t *b = h->body;
    return b->taken < b->body_have || b->complete || b->refused ||
           h->peer_closed;
}

/* Tells a waiting exchange that its read has an answer. */
static void mf__h1_stream_wake(mf_http1_t *h)
{
    mf_h1_body_t *b = h->body;
    if (!b || !b->watching || !mf__h1_stream_ready(h))
        return;
    b->watching = false;
    h->exops->readable(h->ex);
}

/* The same from inside the transport's calls: on the next phase, so that
 * the handler, which may read, answer or end the request, never runs
 * inside the transport's read loop. */
static void mf__h1_stream_wake_later(mf_http1_t *h)
{
    mf_h1_body_t *b = h->body;
    if (b && b->watching && mf__h1_stream_ready(h) &&
        !mf_list_linked(&b->kick._link))
        mf_loop_defer(h->loop, &b->kick);
}

/* Bytes arrived for the stream. A body that comes too slowly while the
 * handler waits for it is refused 408 (a handler that reads slowly is not
 * the client's fault: its bytes wait in the socket meanwhile). */
static void mf__h1_stream_arrived(mf_http1_t *h, size_t n)
{
    mf_h1_body_t *b = h->body;
    b->received += n;
    if (!h->raw && b->watching && !b->complete && !b->refused &&
        mf_loop_now(h->loop) >= mf__h1_body_due(h))
        b->refused = 408;
    mf__h1_stream_take(h);
    mf__h1_stream_wake_later(h);
}

/* Reads on after the handler made room (the input is pinned: reading
 * stops when the window is full), sends a 100 Continue queued by the
 * watch, and answers the watch if it can: on the next phase, never inside
 * the exchange's call. */
static void mf__h1_stream_kick(mf_post_t *post)
{
    mf_http1_t *h = post->data;
    if (h->phase == MF_H1_CLOSED)
        return;
    mf__transport_resume(h->t); /* may end the request: h->body changes */
    if (h->phase != MF_H1_CLOSED)
        mf__h1_stream_wake(h);
}

/* Dispatches a request whose body the handler reads as a stream. The
 * input gets a window behind the head first (it is pinned from the
 * dispatch on and cannot grow then), so the head is parsed again when the
 * buffer moved. */
static bool mf__h1_dispatch_streamed(mf_http1_t *h, size_t head_len)
{
    mf_transport_input_t *in = h->in;
    if (in->buf.cap - in->buf.len < MF_H1_STREAM_WINDOW &&
        mf__transport_input_reserve(h->t, MF_H1_STREAM_WINDOW) < 0) {
        mf__h1_fail(h, 500);
        return false;
    }
    h->body->streaming = true;
    mf__h1_stream_take(h); /* what came with the head */
    mf__h1_dispatch_with_body(h, 0, head_len);
    return true;
}

/* A request without a body that asks for "Upgrade: h2c" on a plain
 * connection of a server that speaks HTTP/2 (RFC 7540 §3.2): HTTP/2 takes
 * the connection (and serves the request as its stream 1) if it accepts
 * the request's HTTP2-Settings, and h is freed; else the request is
 * HTTP/1's, the Upgrade ignored. Only a connection's first request is
 * upgraded (as clients ask): nothing of HTTP/1 is queued or held then, and
 * its caller is the transport's read (mf__h1_on_data), which touches h no
 * more. A request with a body is not upgraded. */
static bool mf__h1_upgrades_to_h2(mf_http1_t *h, const mf_http_request_t *req,
                                  size_t head_len)
{
    if (!req->upgrade || h->requests || req->body != MF_HTTP_BODY_NONE ||
        req->minor_version != 1 || !h->site->upgrade_h2 ||
        !h->site->upgrade_h2(h->site, h->t, req, head_len))
        return false;
    mf__h1_drop_body(h);
    mf_loop_free(h->loop, h, sizeof(*h));
    return true;
}

/* A head has been parsed: decide how its body arrives. */
static bool mf__h1_head_done(mf_http1_t *h, mf_http_request_t *req,
                             int head_len)
{
    if (mf__h1_upgrades_to_h2(h, req, (size_t)head_len))
        return false; /* h is gone */
    if (req->body == MF_HTTP_BODY_NONE) {
        /* Also a request that may be upgraded: until the handler upgrades
         * it, bytes behind the head wait in the input's spare room (or
         * the socket); the upgrade copies the head out and lets the input
         * grow (mf__h1_keep_request). */
        mf__h1_dispatch(h, req, 0, (size_t)head_len);
        return true;
    }
    if (!h->body)
        h->body = mf_loop_alloc(h->loop, sizeof(*h->body));
    mf_h1_body_t *b = h->body;
    memset(b, 0, sizeof(*b));
    mf_post_init(&b->kick, mf__h1_stream_kick, h);
    b->head_len = (size_t)head_len;
    b->body_have = 0;
    b->started = mf_loop_now(h->loop);
    b->received = h->in->buf.len - h->in->off - (size_t)head_len;
    b->sent_continue = false;
    b->chunked_body = req->body == MF_HTTP_BODY_CHUNKED;
    b->content_length = req->content_length;
    uint64_t max = h->config->max_body;
    if (req->body == MF_HTTP_BODY_LENGTH && max && req->content_length > max) {
        mf__h1_fail(h, 413);
        return false;
    }
    if (req->body == MF_HTTP_BODY_CHUNKED)
        mf_http_chunked_init(&b->chunked, max);
    if (h->config->stream_body && h->config->stream_body(req, h->site->user)) {
        h->keep_alive = req->keep_alive;
        b->expect_continue = req->expect_continue;
        return mf__h1_dispatch_streamed(h, (size_t)head_len);
    }
    h->phase = MF_H1_BODY;
    h->in->max = SIZE_MAX; /* the body may fill the input */
    h->keep_alive = req->keep_alive;
    if (req->expect_continue &&
        h->in->buf.len - h->in->off == (size_t)head_len &&
        !mf__h1_send_continue(h))
        return false;
    mf__transport_arm(h->t, mf__h1_body_wait(h));
    return mf__h1_body(h);
}

/* Parses and serves as many complete requests as the input holds, in
 * order. Returns when it needs more bytes, an exchange holds the request,
 * the output table is nearly full, or the connection is closing. */
static void mf__h1_process(mf_http1_t *h)
{
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    /* The cheap tests first: after a request, the input is usually used
     * up. */
    while (h->phase <= MF_H1_BODY && !h->closing &&
           h->in->buf.len > h->in->off && mf__transport_queue_room(h->t) > 1) {
        if (h->phase == MF_H1_BODY) { /* its head is parsed already */
            if (!mf__h1_body(h))
                break;
            continue;
        }
        mf_http_request_t req;
        int rc = mf__h1_parse_head(h, &req, headers, MF_HTTP_MAX_HEADERS,
                                   &h->scanned);
        if (rc == MF_HTTP_INCOMPLETE) {
            if (h->phase == MF_H1_IDLE) {
                h->phase = MF_H1_HEAD; /* slowloris clock starts */
                mf__transport_arm(h->t, h->config->header_timeout_ms);
            }
            break;
        }
        if (rc == MF_HTTP_ERROR) {
            mf__h1_fail(h, req.error_status);
            break;
        }
        if (!mf__h1_head_done(h, &req, rc))
            break;
    }
}

/* The exchange is done: drop the request's bytes. A streamed body not
 * read to its end, or an upgrade, ends the connection (lingering, so
 * that unread bytes do not reset it under the answer). */
static void mf__h1_request_finished(mf_http1_t *h)
{
    mf_transport_input_t *in = h->in;
    bool linger = false;
    if (h->body) { /* streamed (a body still arriving is dropped here) */
        mf_h1_body_t *b = h->body;
        if (h->raw || !b->complete) {
            h->keep_alive = false;
            linger = !h->raw;
        }
        h->req_len = b->head_len + b->body_have;
        mf__h1_drop_body(h);
    }
    in->off += h->req_len;
    h->req_len = 0;
    h->scanned = 0;
    if (in->off == in->buf.len) {
        in->off = 0;
        in->buf.len = 0;
    }
    if (!h->keep_alive) {
        h->closing = true;
        mf__transport_end(h->t, linger);
    }
    h->phase = MF_H1_IDLE;
}

/* ---- the transport's calls (mf_transport_ops_t) ----------------------------
 */

/* A client that speaks HTTP/2: ALPN chose it, or its first bytes are the
 * connection preface (RFC 9113 §3.3, §3.4). Returns true when the bytes
 * are not HTTP/1's: the connection is handed to HTTP/2 (and h freed), or
 * a preface is still arriving. */
static bool mf__h1_speaks_h2(mf_http1_t *h)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    const size_t preface_len = sizeof preface - 1;
    if (!h->site->attach_h2 || h->requests || h->phase != MF_H1_IDLE ||
        h->in->off)
        return false;
    size_t have = h->in->buf.len;
    if (!mf__transport_alpn_h2(h->t)) {
        if (memcmp(h->in->buf.data, preface,
                   have < preface_len ? have : preface_len) != 0)
            return false;
        if (have < preface_len)
            return true; /* the rest comes under the header timeout */
    }
    h->site->attach_h2(h->site, h->t);
    mf_loop_free(h->loop, h, sizeof(*h));
    return true;
}

static void mf__h1_on_data(void *proto, size_t n)
{
    mf_http1_t *h = proto;
    if (mf__h1_speaks_h2(h))
        return;
    if (h->phase == MF_H1_HANDLING && h->body) {
        mf__h1_stream_arrived(h, n);
        return;
    }
    if (h->phase == MF_H1_BODY)
        mf__h1_body_arrived(h, n); /* may answer 408 */
    mf__h1_process(h);
}

/* EOF from the client. Answers already queued still go out (a client may
 * send pipelined requests and half-close), even when the FIN came in the
 * same read as a request still at work behind them; that exchange is
 * aborted once the queue is written, by the close (the client is gone: its
 * on_close callback runs). */
static void mf__h1_on_eof(void *proto)
{
    mf_http1_t *h = proto;
    h->peer_closed = true;
    if (h->raw) { /* the handler reads the end; the connection stays */
        mf__h1_stream_wake_later(h);
        return;
    }
    h->closing = true;
    mf__transport_end(h->t, false);
    if (h->phase == MF_H1_HANDLING && !mf__transport_writing(h->t)) {
        mf__transport_close(h->t);
        return;
    }
    mf__transport_flush(h->t); /* closes when the queue is written */
}

static void mf__h1_on_no_room(void *proto)
{
    mf__h1_fail(proto, 413);
}

static void mf__h1_on_flushed(void *proto)
{
    mf_http1_t *h = proto;
    uint32_t ms = mf__h1_phase_timeout(h);
    if (ms)
        mf__transport_arm(h->t, ms);
    else if (h->phase == MF_H1_HANDLING)
        mf__transport_disarm(h->t); /* no stall left: a held exchange (a
                                       stream, an upgrade) keeps its time */
}

static void mf__h1_on_drain(void *proto)
{
    mf_http1_t *h = proto;
    if (mf__h1_held(h))
        h->exops->drained(h->ex);
}

static void mf__h1_on_timeout(void *proto)
{
    mf_http1_t *h = proto;
    /* A body that comes too slowly (not one that stopped) hears why. */
    if (h->phase == MF_H1_BODY && mf_loop_now(h->loop) >= mf__h1_body_due(h)) {
        mf__h1_fail(h, 408);
        mf__transport_flush(h->t);
        return;
    }
    /* Slowloris, idle keep-alive, stalled body or write: just close. A
     * request that never completed gets no answer (nginx does the same),
     * but is reported as a 408, as nginx logs it. */
    if (h->phase == MF_H1_HEAD || h->phase == MF_H1_BODY)
        h->site->hooks->rejected(h->site, 408, 0, &h->in->buf, h->in->off,
                                 h->peer);
    mf__transport_close(h->t);
}

static void mf__h1_on_close(void *proto)
{
    mf_http1_t *h = proto;
    h->phase = MF_H1_CLOSED;
    mf__h1_drop_body(h);
    if (mf__h1_held(h))
        h->exops->lost(h->ex); /* may release */
}

static void mf__h1_on_free(void *proto)
{
    mf_http1_t *h = proto;
    if (h->ex)
        mf__h1_destroy_exchange(h, h->ex);
    mf_loop_free(h->loop, h, sizeof(*h));
}

static bool mf__h1_idle(const void *proto)
{
    const mf_http1_t *h = proto;
    return h->phase == MF_H1_IDLE;
}

/* The server is stopping: an idle connection closes now (after its
 * pending output); a busy one answers with Connection: close. So does one
 * whose request has arrived but not been read yet: closing it would reset
 * a request the client sent before the stop, unanswered. An upgraded
 * connection has no end of its own: its reader hears the end now (reads
 * answer 0), so that its handler can finish. */
static void mf__h1_stop(void *proto)
{
    mf_http1_t *h = proto;
    h->keep_alive = false;
    if (h->raw) {
        h->peer_closed = true;
        mf__h1_stream_wake_later(h);
        return;
    }
    if (h->phase != MF_H1_IDLE || h->in->buf.len ||
        mf__transport_input_waiting(h->t))
        return; /* busy: its answer says Connection: close */
    if (mf__transport_writing(h->t)) {
        h->closing = true; /* after its last answer is out */
        mf__transport_end(h->t, false);
    } else {
        mf__transport_close(h->t);
    }
}

static const mf_transport_ops_t mf__h1_transport_ops = {
    .on_data = mf__h1_on_data,
    .on_eof = mf__h1_on_eof,
    .on_no_room = mf__h1_on_no_room,
    .on_flushed = mf__h1_on_flushed,
    .on_drain = mf__h1_on_drain,
    .on_timeout = mf__h1_on_timeout,
    .on_close = mf__h1_on_close,
    .on_free = mf__h1_on_free,
    .idle = mf__h1_idle,
    .stop = mf__h1_stop,
};

void mf__http1_attach(mf_http_site_t *site, mf_transport_t *t)
{
    mf_http1_t *h = mf_loop_alloc(site->loop, sizeof(*h));
    memset(h, 0, sizeof(*h));
    h->t = t;
    h->in = mf__transport_input(t);
    h->site = site;
    h->loop = site->loop;
    h->config = site->config;
    h->exops = site->exchange;
    h->peer = mf__transport_peer(t);
    h->phase = MF_H1_IDLE;
    h->in->max = h->config->limits.max_head_bytes;
    mf__transport_attach(t, &mf__h1_transport_ops, h);
    /* The first request must arrive within the header timeout. */
    mf__transport_arm(t, h->config->header_timeout_ms);
}

/* ---- responses out: the exchange's calls (mf_http_proto_ops_t) -------------
 */

/* Whether this response leaves the connection open (the request allows
 * it, the client has not half-closed, the server is not stopping), and
 * its Connection line. Decides for good: asked once, when the head is
 * built. */
static void mf__h1_connection_line(mf_http1_t *h, mf_http_head_t *hd,
                                   int status)
{
    if (h->raw && status == 101) {
        mf__http_head_put(hd, "Connection: upgrade\r\n", 21);
        return;
    }
    if (h->peer_closed || h->site->stopping)
        h->keep_alive = false;
    if (!h->keep_alive)
        mf__http_head_put(hd, "Connection: close\r\n", 19);
    else if (h->minor_version == 0)
        mf__http_head_put(hd, "Connection: keep-alive\r\n", 24);
}

/* Status line, common and framing lines, the handler's lines, and a body
 * small enough to copy: queued as one copy. A stream is chunked, or for
 * HTTP/1.0 delimited by the close. */
static int mf__h1_send_head(void *proto, const mf_http_response_head_t *rh,
                            const char *body, size_t body_len)
{
    mf_http1_t *h = proto;
    mf_http_head_t hd;
    mf__http_head_common(&hd, h->site, rh->status);
    if (rh->framing == MF_HTTP_FRAME_STREAM) {
        if (h->minor_version >= 1)
            mf__http_head_put(&hd, "Transfer-Encoding: chunked\r\n", 28);
        else
            h->keep_alive = false; /* HTTP/1.0: the close ends the body */
    } else if (rh->framing == MF_HTTP_FRAME_LENGTH) {
        mf__http_head_put(&hd, "Content-Length: ", 16);
        hd.len += mf__http_fmt_u64(hd.fixed + hd.len, rh->length);
        mf__http_head_put(&hd, "\r\n", 2);
    }
    mf__h1_connection_line(h, &hd, rh->status);
    mf_piece_t pieces[4 + MF_HTTP_STATIC_LINES];
    size_t n = 0;
    pieces[n++] = (mf_piece_t){hd.fixed, hd.len};
    pieces[n++] = (mf_piece_t){rh->lines, rh->lines_len};
    for (unsigned i = 0; i < rh->nstatic; i++)
        pieces[n++] = (mf_piece_t){rh->static_lines[i], rh->static_lens[i]};
    pieces[n++] = (mf_piece_t){"\r\n", 2};
    pieces[n++] = (mf_piece_t){body, body_len};
    return mf__transport_queue_pieces(h->t, pieces, n);
}

static int mf__h1_send_body(void *proto, const char *data, size_t len,
                            mf_buf_t *owned)
{
    mf_http1_t *h = proto;
    return mf__transport_queue_ref(h->t, data, len, owned);
}

/* A body from a file: the transport writes it (sendfile when plain). */
static int mf__h1_send_file(void *proto, int fd, uint64_t offset, uint64_t len)
{
    mf_http1_t *h = proto;
    return mf__transport_queue_file(h->t, fd, offset, len);
}

/* One piece of a streamed body, framed as a chunk, queued as one copy. */
static int mf__h1_send_piece(void *proto, const void *data, size_t len)
{
    mf_http1_t *h = proto;
    if (h->minor_version < 1 || h->raw)
        return mf__transport_queue_copy(h->t, data, len);
    char size[20];
    size_t n = mf__http_fmt_hex(size, len);
    memcpy(size + n, "\r\n", 2);
    mf_piece_t pieces[3] = {{size, n + 2}, {data, len}, {"\r\n", 2}};
    return mf__transport_queue_pieces(h->t, pieces, 3);
}

/* The last chunk of a streamed body (HTTP/1.0: the close ends it). */
static int mf__h1_end_stream(void *proto)
{
    mf_http1_t *h = proto;
    if (h->minor_version < 1 || h->raw)
        return 0;
    return mf__transport_queue_copy(h->t, "0\r\n\r\n", 5);
}

/* The last chunk, then the trailer section (RFC 9112 §7.1.2): one write
 * of "0\r\n", the fields, and the final CRLF. HTTP/1.0 and raw bytes have
 * no chunks to end, so no place for them. */
static int mf__h1_end_stream_trailers(void *proto, const char *lines,
                                      size_t len)
{
    mf_http1_t *h = proto;
    if (h->minor_version < 1 || h->raw)
        return MF_ENOSYS;
    mf_piece_t pieces[3] = {{"0\r\n", 3}, {lines, len}, {"\r\n", 2}};
    return mf__transport_queue_pieces(h->t, pieces, 3);
}

static int mf__h1_send_error(void *proto, int status)
{
    mf_http1_t *h = proto;
    mf_http_head_t hd;
    mf__http_head_error(&hd, h->site, status);
    h->keep_alive = false;
    return mf__transport_queue_copy(h->t, hd.fixed, hd.len);
}

static int mf__h1_flush(void *proto)
{
    mf_http1_t *h = proto;
    return mf__transport_flush(h->t);
}

static size_t mf__h1_pending(const void *proto)
{
    const mf_http1_t *h = proto;
    return mf__transport_pending(h->t);
}

static void mf__h1_watch_drain(void *proto, size_t below)
{
    mf_http1_t *h = proto;
    mf__transport_watch_drain(h->t, below);
}

static void mf__h1_release(void *proto)
{
    mf_http1_t *h = proto;
    h->in->pinned = false;
    h->in->movable = false;
    if (h->phase == MF_H1_CLOSED) {
        mf__transport_unpinned(h->t);
        return;
    }
    mf__h1_request_finished(h);
    if (h->dispatching)
        return; /* see `dispatching`: the dispatch goes on from here */
    /* A held exchange finished later: serve what was pipelined behind it
     * and what arrived meanwhile, then flush everything at once. */
    mf__h1_destroy_exchange(h, h->ex);
    h->ex = NULL;
    mf__h1_process(h);
    mf__transport_resume(h->t);
}

static void mf__h1_abort(void *proto)
{
    mf_http1_t *h = proto;
    mf__transport_close(h->t);
}

/* A streamed body's bytes, or after an upgrade the connection's. Reading
 * all that was taken lets the window be used again: the bytes behind (a
 * chunk's head not decoded yet, the next request) move to its start. */
static ssize_t mf__h1_read(void *proto, void *buf, size_t len)
{
    mf_http1_t *h = proto;
    mf_h1_body_t *b = h->body;
    if (h->phase == MF_H1_CLOSED || !b)
        return MF_ECLOSED;
    if (b->taken < b->body_have) {
        size_t n = b->body_have - b->taken;
        n = n < len ? n : len;
        char *at = h->in->buf.data + mf__h1_stream_start(h);
        memcpy(buf, at + b->taken, n);
        b->taken += n;
        if (b->taken == b->body_have) {
            mf_transport_input_t *in = h->in;
            size_t behind = in->buf.len - mf__h1_stream_start(h) - b->body_have;
            memmove(at, at + b->body_have, behind);
            in->buf.len -= b->body_have;
            b->body_have = b->taken = 0;
            if (in->movable && in->off == in->buf.len)
                mf__transport_input_emptied(h->t); /* an idle socket: small */
        }
        return (ssize_t)n;
    }
    if (b->refused)
        return b->refused == 413   ? MF_EMSGSIZE
               : b->refused == 408 ? MF_ETIMEDOUT
                                   : MF_EPROTO;
    if (b->complete)
        return 0;
    if (h->peer_closed)
        return h->raw ? 0 : MF_ECLOSED;
    return MF_EAGAIN;
}

static int mf__h1_body_status(const void *proto)
{
    const mf_http1_t *h = proto;
    return h->body && h->body->refused ? h->body->refused : 400;
}

/* The exchange waits for a read: the client may be waiting for a 100
 * Continue, and the window may have filled (reading stopped): the kick
 * sends the one and reads again. */
static void mf__h1_watch_read(void *proto)
{
    mf_http1_t *h = proto;
    mf_h1_body_t *b = h->body;
    if (!b)
        return;
    b->watching = true;
    if (b->expect_continue && !b->sent_continue && !b->complete && !h->raw &&
        mf__transport_queue_room(h->t) > 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        b->sent_continue = true; /* no memory: the client sends anyway */
        mf__transport_queue_copy(h->t, cont, sizeof cont - 1);
    }
    if (!mf_list_linked(&b->kick._link))
        mf_loop_defer(h->loop, &b->kick);
}

/* An upgraded connection may idle for hours: its request's bytes move out
 * of the input (to an allocation of their size; the exchange follows), so
 * the input may move, grow and go while the connection idles, bounded by
 * the window through `max` instead of the pin. Without the memory for the
 * copy, the input stays pinned as it was: the same, only bigger. */
static void mf__h1_keep_request(mf_http1_t *h)
{
    mf_transport_input_t *in = h->in;
    size_t len = h->body->head_len;
    if (len == 0 || len > UINT32_MAX)
        return;
    char *kept = len <= MF_LOOP_ALLOC_MAX ? mf_loop_alloc(h->loop, len)
                                          : mf_try_malloc(len);
    if (!kept)
        return;
    const char *from = in->buf.data + in->off;
    memcpy(kept, from, len);
    h->exops->moved(h->ex, from, len, kept);
    h->kept = kept;
    h->kept_len = (uint32_t)len;
    in->off += len;
    h->body->head_len = 0;
    in->movable = true;
    in->max = MF_H1_STREAM_WINDOW;
}

/* Hands the connection to the exchange: the bytes behind the request (and
 * its body, read whole) are the first raw bytes. */
static int mf__h1_upgrade(void *proto)
{
    mf_http1_t *h = proto;
    mf_h1_body_t *b = h->body;
    if (b && (!b->complete || b->taken < b->body_have))
        return MF_EBUSY;
    if (!b) {
        b = h->body = mf_loop_alloc(h->loop, sizeof(*b));
        memset(b, 0, sizeof(*b));
        mf_post_init(&b->kick, mf__h1_stream_kick, h);
        b->head_len = h->req_len;
    } else {
        b->head_len += b->body_have;
        b->body_have = b->taken = 0;
    }
    b->complete = false;
    h->raw = true;
    h->keep_alive = false;
    mf__h1_keep_request(h);
    mf__h1_stream_take(h);
    return 0;
}

static const mf_http_proto_ops_t mf__h1_proto_ops = {
    .send_head = mf__h1_send_head,
    .send_body = mf__h1_send_body,
    .send_file = mf__h1_send_file,
    .send_piece = mf__h1_send_piece,
    .end_stream = mf__h1_end_stream,
    .end_stream_trailers = mf__h1_end_stream_trailers,
    .send_error = mf__h1_send_error,
    .flush = mf__h1_flush,
    .pending = mf__h1_pending,
    .watch_drain = mf__h1_watch_drain,
    .release = mf__h1_release,
    .abort = mf__h1_abort,
    .read = mf__h1_read,
    .body_status = mf__h1_body_status,
    .watch_read = mf__h1_watch_read,
    .upgrade = mf__h1_upgrade,
};
