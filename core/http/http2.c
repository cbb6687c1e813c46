/*
 * http2.c — HTTP/2 over a transport, server side (the contract: http2.h).
 * Owns mf_http2_t (one connection: its nghttp2 session and streams) and
 * mf_h2_stream_t (one request and its answer), both private to this file.
 *
 * Debian's libnghttp2 reads and writes every frame and the HPACK blocks
 * and keeps the stream states and windows; this file copies a request's
 * fields and body out of its callbacks, turns a whole request into an
 * exchange, and gives nghttp2 the answer: a HEADERS frame from the
 * exchange's head and DATA read from the stream's queued body, then the
 * answer's trailers (a HEADERS frame with END_STREAM) when it has some. A
 * request's trailers (a HEADERS frame after its DATA) are kept as lines,
 * within max_header_list_size, for the exchange to read.
 *
 * May call: the transport's down-calls, nghttp2, the engine (and, for an
 * Upgrade: h2c, the base64 codec and websocket.h's reader of comma lists).
 * Calls up only through the site's exchange ops and counters (http_site.h).
 *
 * Never inside nghttp2: a session call (mem_recv, mem_send) only records
 * what its callbacks saw (a request whole, a stream closed); the step
 * after it runs the handlers and tells the exchanges, so no handler runs
 * inside nghttp2 and nothing calls nghttp2 back from inside itself.
 *
 * Bounded memory: a request's fields are capped by max_header_list_size
 * and its body by max_body (413); the answer's body waits in its stream
 * until the client's windows let nghttp2 take it, and pending() counts it,
 * so a streaming handler that writes faster than the client reads waits
 * for its drain call; nghttp2 is asked for frames only while the socket's
 * queue is under MF_H2_OUT_HIGH.
 */
#include "http2.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <moonflow/codec.h>
#include <moonflow/websocket.h>

#include "http_chars.h"
#include "http_file_reader.h"

/* Output queued on the transport past which nghttp2 is not asked for more
 * frames until the socket drains to half of it. */
#define MF_H2_OUT_HIGH (256 * 1024)
/* Rapid reset (CVE-2023-44487): RST_STREAMs a client may send, a burst of
 * this many then this many a second; past it, GOAWAY ENHANCE_YOUR_CALM.
 * (nghttp2's own limit, 1000 then 33 a second, answers INTERNAL_ERROR.) */
#define MF_H2_RESET_BURST 400
#define MF_H2_RESET_RATE 100
/* Request bodies a connection holds before their handlers run (read
 * whole): past it (and past max_body), the stream that brings more is
 * answered 503, so that 128 streams cannot each hold max_body. */
#define MF_H2_BUFFERED_MIN (8 << 20)
/* A header block decoded past this many times max_header_list_size is an
 * HPACK bomb: the connection ends (the block is refused well before). */
#define MF_H2_BOMB_FACTOR 8

typedef struct mf_http2 mf_http2_t;

typedef struct mf_h2_stream {
    mf_http2_t *h;
    int32_t id;
    mf_list_t link; /* h->streams */
    mf_list_t work; /* h->ready or h->gone: for the next step */
    /* The request: fields as records (uint32 name length, uint32 value
     * length, name, value), then the body. */
    mf_buf_t head;
    mf_buf_t body;
    mf_buf_t text; /* the head as HTTP/1 text, which the request points in */
    size_t header_bytes; /* as RFC 9113 counts them: + 32 per field */
    size_t decoded;      /* every field decoded, stored or not */
    uint16_t nheaders;
    int refused; /* 413, 431, 500: answered without the handler */
    /* The answer's body, not taken by nghttp2 yet: out[out_off..len). */
    mf_buf_t out;
    size_t out_off;
    /* A file as the body (send_file), read off the loop a chunk at a time
     * behind out's bytes; NULL once taken whole. */
    mf_file_reader_t *file;
    uint64_t queued;    /* body bytes given by the exchange */
    uint64_t length;    /* MF_HTTP_FRAME_LENGTH: the whole body */
    size_t drain_below; /* the exchange waits for a drain; 0: not */
    mf_http_exchange_t *ex;
    mf_post_t destroy_post; /* the exchange's destroy, after its release */
    bool head_done;         /* the request's header block ended */
    bool dispatched;        /* its exchange was made (or its error answered) */
    bool head_request;      /* HEAD: the answer has no body */
    bool closed;            /* nghttp2 closed the stream */
    bool released;          /* the exchange let go */
    bool lost_told;         /* the exchange heard of the loss */
    bool deferred;          /* nghttp2 waits for body bytes (resume_data) */
    bool out_ended;         /* the body's last byte is queued */
    bool end_sent;          /* the answer's END_STREAM went out */
    bool rst_after;         /* reset (NO_ERROR) once the answer is out, if the
                               body has not ended: nobody reads the rest */
    /* A body the handler reads as it comes (the config's stream_body):
     * body[taken..len) is unread; its window is given back (consumed) as
     * the handler reads. */
    bool streaming;
    bool body_end; /* the client's END_STREAM came */
    bool watching; /* the exchange waits for a read's answer */
    size_t taken;
    uint64_t received; /* body bytes of a streamed body so far */
    /* Trailer lines, "name: value\r\n" each: the answer's, sent after its
     * DATA, and the request's, kept for the exchange. */
    mf_buf_t trailers;
    mf_buf_t trailers_in;
} mf_h2_stream_t;

struct mf_http2 {
    mf_transport_t *t;
    mf_transport_input_t *in;
    mf_http_site_t *site;
    mf_loop_t *loop;
    const mf_http_server_config_t *config;
    const mf_http_exchange_ops_t *exops;
    const mf_sockaddr_t *peer;
    nghttp2_session *session;
    mf_list_t streams; /* every stream alive */
    mf_list_t ready;   /* requests whole (or refused), to dispatch */
    mf_list_t gone;    /* closed under a live exchange, to tell it */
    mf_post_t step_post;
    unsigned receiving;    /* streams whose request is not whole yet */
    unsigned active;       /* exchanges not destroyed yet */
    size_t buffered;       /* bodies held whole for handlers not run yet */
    uint32_t reset_tokens; /* RST_STREAMs the client may still send */
    uint64_t reset_refill; /* loop ms of the last refill */
    bool in_session;       /* inside a session call: no step, no send */
    bool closed;
    bool stopping;
    bool failed;  /* the session is over: input is dropped until the close */
    bool noticed; /* a drain began: the shutdown notice is sent */
    bool freeing;
};

static const mf_transport_ops_t mf__h2_transport_ops;
static const mf_http_proto_ops_t mf__h2_proto_ops;

static void mf__h2_step(mf_http2_t *h);
static bool mf__h2_streams_body(mf_h2_stream_t *s);

/* ---- streams ----------------------------------------------------------------
 */

static mf_h2_stream_t *mf__h2_stream_of(mf_http2_t *h, int32_t id)
{
    return nghttp2_session_get_stream_user_data(h->session, id);
}

static void mf__h2_destroy_now(mf_post_t *post);

static mf_h2_stream_t *mf__h2_stream_new(mf_http2_t *h, int32_t id)
{
    mf_h2_stream_t *s = mf_loop_alloc(h->loop, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->h = h;
    s->id = id;
    mf_list_init(&s->work);
    mf_post_init(&s->destroy_post, mf__h2_destroy_now, s);
    mf_list_push_back(&h->streams, &s->link);
    h->receiving++;
    h->site->h2.streams++;
    return s;
}

static void mf__h2_stream_free(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    if (!s->dispatched) {
        h->receiving--;
        h->buffered -= s->body.len;
    }
    mf_list_remove(&s->link);
    if (mf_list_linked(&s->work))
        mf_list_remove(&s->work);
    if (mf_list_linked(&s->destroy_post._link))
        mf_list_remove(&s->destroy_post._link);
    mf__buf_release(h->loop, &s->head);
    mf__buf_release(h->loop, &s->text);
    mf__buf_release(h->loop, &s->body);
    mf__buf_release(h->loop, &s->out);
    mf__buf_release(h->loop, &s->trailers);
    mf__buf_release(h->loop, &s->trailers_in);
    mf__file_reader_close(s->file);
    mf_loop_free(h->loop, s, sizeof(*s));
}

/* A request is whole (or refused): dispatched at the next step. */
static void mf__h2_stream_ready(mf_h2_stream_t *s)
{
    if (s->dispatched || mf_list_linked(&s->work))
        return;
    mf_list_push_back(&s->h->ready, &s->work);
}

/* Appends one field record (see mf_h2_stream_t). 0 or MF_ENOMEM. */
static int mf__h2_stream_keep(mf_h2_stream_t *s, const uint8_t *name,
                              size_t nlen, const uint8_t *value, size_t vlen)
{
    uint32_t lens[2] = {(uint32_t)nlen, (uint32_t)vlen};
    mf_loop_t *loop = s->h->loop;
    if (mf__buf_reserve(loop, &s->head, sizeof lens + nlen + vlen) < 0)
        return MF_ENOMEM;
    mf__buf_append(loop, &s->head, lens, sizeof lens);
    mf__buf_append(loop, &s->head, name, nlen);
    mf__buf_append(loop, &s->head, value, vlen);
    return 0;
}

/* Walks the field records: *at is the next one's offset. */
static bool mf__h2_stream_field(const mf_h2_stream_t *s, size_t *at,
                                const char **name, size_t *nlen,
                                const char **value, size_t *vlen)
{
    uint32_t lens[2];
    if (*at + sizeof lens > s->head.len)
        return false;
    memcpy(lens, s->head.data + *at, sizeof lens);
    *name = s->head.data + *at + sizeof lens;
    *nlen = lens[0];
    *value = *name + lens[0];
    *vlen = lens[1];
    *at += sizeof lens + lens[0] + lens[1];
    return true;
}

/* The field `name` (a pseudo-header or a lowercase name), or NULL. */
static const char *mf__h2_stream_find(const mf_h2_stream_t *s, const char *name,
                                      size_t *len)
{
    size_t at = 0, nlen, vlen, want = strlen(name);
    const char *n, *v;
    while (mf__h2_stream_field(s, &at, &n, &nlen, &v, &vlen))
        if (nlen == want && memcmp(n, name, want) == 0) {
            *len = vlen;
            return v;
        }
    return NULL;
}

/* The content-length field's value (nghttp2 checked its digits), capped
 * past max_body; false when there is none. */
static bool mf__h2_stream_length(const mf_h2_stream_t *s, uint64_t *length)
{
    size_t len;
    const char *v = mf__h2_stream_find(s, "content-length", &len);
    uint64_t max = s->h->config->max_body;
    *length = 0;
    for (size_t i = 0; v && i < len && *length <= max; i++)
        *length = *length * 10 + (uint64_t)(v[i] - '0');
    return v != NULL;
}

/* An HTTP/1 view needs a Host field, which an HTTP/2 client sends as
 * :authority (RFC 9113 §8.3.1). The value is copied first: the record is
 * appended to the buffer it lies in. */
static int mf__h2_stream_add_host(mf_h2_stream_t *s)
{
    size_t alen, hlen;
    char copy[256];
    const char *authority = mf__h2_stream_find(s, ":authority", &alen);
    if (!authority || mf__h2_stream_find(s, "host", &hlen))
        return 0;
    if (alen > sizeof copy)
        return MF_EMSGSIZE;
    memcpy(copy, authority, alen);
    if (mf__h2_stream_keep(s, (const uint8_t *)"host", 4, (const uint8_t *)copy,
                           alen) < 0)
        return MF_ENOMEM;
    s->nheaders++;
    return 0;
}

/* The header block ended: Host, and a Content-Length past max_body is
 * refused before a byte of the body, as HTTP/1 does. */
static void mf__h2_stream_head_done(mf_h2_stream_t *s)
{
    uint64_t length;
    s->head_done = true;
    if (s->refused)
        return;
    if (mf__h2_stream_add_host(s) < 0)
        s->refused = 431;
    else if (mf__h2_stream_length(s, &length) &&
             length > s->h->config->max_body)
        s->refused = 413;
}

/* ---- nghttp2's callbacks: the request in ------------------------------------
 */

static int mf__h2_on_begin_headers(nghttp2_session *session,
                                   const nghttp2_frame *frame, void *user)
{
    mf_http2_t *h = user;
    if (frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    mf_h2_stream_t *s = mf__h2_stream_new(h, frame->hd.stream_id);
    nghttp2_session_set_stream_user_data(session, s->id, s);
    return 0;
}

/* One field of the request's trailers (nghttp2 has checked them: no
 * pseudo-header, lowercase names). Past max_header_list_size the stream
 * is reset: a trailer section that size is no longer metadata. */
static int mf__h2_keep_trailer(mf_http2_t *h, mf_h2_stream_t *s,
                               const uint8_t *name, size_t nlen,
                               const uint8_t *value, size_t vlen)
{
    mf_buf_t *b = &s->trailers_in;
    if (b->len + nlen + vlen + 32 > h->config->http2.max_header_list_size) {
        h->site->h2.headers_refused++;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (mf__buf_reserve(h->loop, b, nlen + vlen + 4) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(b->data + b->len, name, nlen);
    memcpy(b->data + b->len + nlen, ": ", 2);
    memcpy(b->data + b->len + nlen + 2, value, vlen);
    memcpy(b->data + b->len + nlen + 2 + vlen, "\r\n", 2);
    b->len += nlen + vlen + 4;
    return 0;
}

/* One decoded field. Past max_header_list_size the request is refused
 * (431) but the block is still decoded (HPACK's state needs it); far past
 * it, the connection ends: a small block that decodes huge is an attack. */
static int mf__h2_on_header(nghttp2_session *session,
                            const nghttp2_frame *frame, const uint8_t *name,
                            size_t nlen, const uint8_t *value, size_t vlen,
                            uint8_t flags, void *user)
{
    mf_http2_t *h = user;
    mf_h2_stream_t *s = mf__h2_stream_of(h, frame->hd.stream_id);
    size_t limit = h->config->http2.max_header_list_size;
    (void)session;
    (void)flags;
    if (!s)
        return 0;
    if (s->head_done)
        return mf__h2_keep_trailer(h, s, name, nlen, value, vlen);
    s->decoded += nlen + vlen + 32;
    if (s->decoded > (uint64_t)limit * MF_H2_BOMB_FACTOR) {
        h->site->h2.headers_refused++;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (s->refused)
        return 0;
    s->header_bytes += nlen + vlen + 32;
    bool pseudo = nlen && name[0] == ':';
    if (s->header_bytes > limit ||
        (!pseudo && s->nheaders >= MF_HTTP_MAX_HEADERS - 1)) {
        s->refused = 431; /* one place is kept for Host */
        h->site->h2.headers_refused++;
        return 0;
    }
    if (mf__h2_stream_keep(s, name, nlen, value, vlen) < 0)
        s->refused = 500;
    else if (!pseudo)
        s->nheaders++;
    return 0;
}

/* A body refused while it arrives: answered now (or, streamed, when the
 * handler reads), and the rest is not read. */
static void mf__h2_refuse_body(mf_h2_stream_t *s, int status)
{
    s->refused = status;
    s->rst_after = true;
    if (!s->dispatched) {
        s->h->buffered -= s->body.len;
        mf__buf_release(s->h->loop, &s->body);
        mf__h2_stream_ready(s);
    }
}

/* Bytes of a streamed body: kept for the handler's reads, which give the
 * window back; past max_body the read answers MF_EMSGSIZE. */
static void mf__h2_stream_chunk(mf_h2_stream_t *s, const uint8_t *data,
                                size_t len)
{
    mf_http2_t *h = s->h;
    s->received += len;
    if (s->released) { /* nobody reads any more: taken as it comes */
        nghttp2_session_consume(h->session, s->id, len);
        return;
    }
    if (s->received > h->config->max_body)
        s->refused = 413;
    else if (mf__buf_append(h->loop, &s->body, data, len) < 0)
        s->refused = 500;
    if (s->refused) {
        s->rst_after = true;
        nghttp2_session_consume(h->session, s->id, len);
    }
}

/* Bytes of a body: a streamed one waits for its reader; a whole one is
 * kept (its window given back at once) up to max_body, and up to what the
 * connection may hold for handlers not run yet. */
static int mf__h2_on_data_chunk(nghttp2_session *session, uint8_t flags,
                                int32_t id, const uint8_t *data, size_t len,
                                void *user)
{
    mf_http2_t *h = user;
    mf_h2_stream_t *s = mf__h2_stream_of(h, id);
    size_t budget = h->config->max_body > MF_H2_BUFFERED_MIN
                        ? (size_t)h->config->max_body
                        : MF_H2_BUFFERED_MIN;
    (void)flags;
    if (s && s->streaming && !s->refused) {
        mf__h2_stream_chunk(s, data, len);
        return 0;
    }
    nghttp2_session_consume(session, id, len);
    if (!s || s->refused || s->dispatched)
        return 0;
    if (s->body.len + len > h->config->max_body)
        mf__h2_refuse_body(s, 413);
    else if (h->buffered + len > budget)
        mf__h2_refuse_body(s, 503);
    else if (mf__buf_append(h->loop, &s->body, data, len) < 0)
        mf__h2_refuse_body(s, 500);
    else
        h->buffered += len;
    return 0;
}

/* A token bucket over the client's RST_STREAMs (see MF_H2_RESET_BURST). */
static void mf__h2_count_reset(mf_http2_t *h)
{
    uint64_t now = mf_loop_now(h->loop);
    uint64_t add = (now - h->reset_refill) * MF_H2_RESET_RATE / 1000;
    h->site->h2.resets_received++;
    if (add) {
        h->reset_tokens = (uint32_t)(h->reset_tokens + add > MF_H2_RESET_BURST
                                         ? MF_H2_RESET_BURST
                                         : h->reset_tokens + add);
        h->reset_refill = now;
    }
    if (h->reset_tokens == 0) {
        nghttp2_session_terminate_session(h->session,
                                          NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    h->reset_tokens--;
}

static int mf__h2_on_frame_recv(nghttp2_session *session,
                                const nghttp2_frame *frame, void *user)
{
    mf_http2_t *h = user;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        mf__h2_count_reset(h);
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    mf_h2_stream_t *s =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!s)
        return 0;
    if (end)
        s->body_end = true;
    if (frame->hd.type == NGHTTP2_HEADERS && !s->head_done) {
        mf__h2_stream_head_done(s);
        if (s->refused) /* a 431 goes out now; a body is not read */
            s->rst_after = !end;
        else if (!end && mf__h2_streams_body(s))
            s->streaming = true; /* dispatched now, read as it comes */
    }
    if (end || s->refused || s->streaming)
        mf__h2_stream_ready(s);
    return 0;
}

/* nghttp2 is done with the stream: a request not dispatched yet is
 * dropped; a live exchange hears of the loss at the next step; a stream
 * whose exchange is gone is freed. */
static int mf__h2_on_stream_close(nghttp2_session *session, int32_t id,
                                  uint32_t error_code, void *user)
{
    mf_http2_t *h = user;
    mf_h2_stream_t *s = nghttp2_session_get_stream_user_data(session, id);
    (void)error_code;
    if (!s || h->freeing)
        return 0;
    s->closed = true;
    if (mf_list_linked(&s->work))
        mf_list_remove(&s->work);
    if (s->streaming && s->body.len > s->taken) /* never to be read */
        nghttp2_session_consume_connection(session, s->body.len - s->taken);
    if (!s->ex) { /* freed on the next phase: a walk of the streams may
                     be under way below this call */
        if (!mf_list_linked(&s->destroy_post._link))
            mf_loop_defer(h->loop, &s->destroy_post);
        return 0;
    }
    if (!s->released && !s->lost_told)
        mf_list_push_back(&h->gone, &s->work);
    return 0;
}

/* Counts what the server ends connections for; resets a stream whose
 * answer is out while its client still sends a body nobody reads. */
static int mf__h2_on_frame_send(nghttp2_session *session,
                                const nghttp2_frame *frame, void *user)
{
    mf_http2_t *h = user;
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        uint32_t code = frame->goaway.error_code;
        if (code == NGHTTP2_ENHANCE_YOUR_CALM)
            h->site->h2.calm_goaways++;
        else if (code != NGHTTP2_NO_ERROR)
            h->site->h2.protocol_errors++;
        return 0;
    }
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    mf_h2_stream_t *s =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s)
        s->end_sent = true;
    if (s && s->rst_after && !s->body_end)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

/* ---- sending ---------------------------------------------------------------
 */

static void mf__h2_step_later(mf_http2_t *h)
{
    if (!h->closed && !mf_list_linked(&h->step_post._link))
        mf_loop_defer(h->loop, &h->step_post);
}

/* A session that failed (a flood, a callback's refusal, no memory) is
 * over: what nghttp2 queued (its GOAWAY) goes if the socket takes it now,
 * then the connection closes. A flooder does not read: waiting for it to
 * would only keep the connection (and its input) alive. */
static void mf__h2_fail(mf_http2_t *h, int rv)
{
    h->failed = true;
    if (rv == NGHTTP2_ERR_FLOODED)
        h->site->h2.floods++;
    else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
        h->site->h2.protocol_errors++;
    mf__transport_flush(h->t);
    mf__transport_close(h->t);
}

/* Asks nghttp2 for frames while the socket's queue has room, then writes.
 * 0, or a negative code once the connection is closed. */
static int mf__h2_send(mf_http2_t *h)
{
    if (h->closed || h->failed)
        return h->closed ? MF_ECLOSED : 0;
    if (h->in_session) {
        mf__h2_step_later(h);
        return 0;
    }
    while (mf__transport_pending(h->t) < MF_H2_OUT_HIGH) {
        const uint8_t *data;
        h->in_session = true;
        ssize_t n = nghttp2_session_mem_send(h->session, &data);
        h->in_session = false;
        if (n < 0) {
            mf__h2_fail(h, (int)n);
            return MF_ECLOSED;
        }
        if (n == 0)
            break;
        if (mf__transport_queue_copy(h->t, data, (size_t)n) < 0) {
            mf__transport_close(h->t); /* a frame lost: the session is off */
            return MF_ECLOSED;
        }
    }
    if (mf__transport_pending(h->t) >= MF_H2_OUT_HIGH)
        mf__transport_watch_drain(h->t, MF_H2_OUT_HIGH / 2);
    return mf__transport_flush(h->t);
}

/* ---- the answer out: the exchange's calls (mf_http_proto_ops_t) ------------
 */

static bool mf__h2_body_done(const mf_h2_stream_t *s)
{
    return s->out_ended && s->out_off == s->out.len && !s->file;
}

/* DATA from the answer's file, when out is empty: a chunk's bytes, or
 * DEFERRED while the next chunk is read (mf__h2_file_read resumes), or a
 * failed read (the file is shorter than the answer said): the stream is
 * reset, the client sees a cut body. */
static ssize_t mf__h2_read_file(mf_h2_stream_t *s, uint8_t *buf, size_t length)
{
    const char *data;
    ssize_t got = mf__file_reader_peek(s->file, &data);
    if (got == MF_EAGAIN) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (got < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = (size_t)got < length ? (size_t)got : length;
    memcpy(buf, data, n);
    mf__file_reader_take(s->file, n);
    if (mf__file_reader_left(s->file) == 0) {
        mf__file_reader_close(s->file);
        s->file = NULL;
    }
    return (ssize_t)n;
}

static int mf__h2_submit_trailers(mf_h2_stream_t *s);

/* nghttp2 asks for DATA: what the exchange queued, the end once it is all
 * taken, or DEFERRED until more comes (mf__h2_stream_more). */
static ssize_t mf__h2_read_body(nghttp2_session *session, int32_t id,
                                uint8_t *buf, size_t length, uint32_t *flags,
                                nghttp2_data_source *source, void *user)
{
    mf_h2_stream_t *s = source->ptr;
    size_t have = s->out.len - s->out_off;
    size_t n = have < length ? have : length;
    (void)session;
    (void)id;
    (void)user;
    if (n) {
        memcpy(buf, s->out.data + s->out_off, n);
        s->out_off += n;
        if (s->out_off == s->out.len)
            s->out.len = s->out_off = 0; /* the buffer is used again */
    } else if (s->file) {
        ssize_t got = mf__h2_read_file(s, buf, length);
        if (got < 0)
            return got;
        n = (size_t)got;
    }
    if (mf__h2_body_done(s)) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (s->trailers.len && mf__h2_submit_trailers(s) < 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* a cut, said */
        if (s->trailers.len)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM; /* they end it */
        return (ssize_t)n;
    }
    if (n == 0) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* Body bytes (or the end) were queued: a waiting DATA source goes on. */
static void mf__h2_stream_more(mf_h2_stream_t *s)
{
    if (!s->deferred || s->closed)
        return;
    s->deferred = false;
    nghttp2_session_resume_data(s->h->session, s->id);
}

/* Queues body bytes behind what nghttp2 has not taken. 0 or MF_ENOMEM. */
static int mf__h2_stream_queue(mf_h2_stream_t *s, const void *data, size_t len)
{
    if (!len)
        return 0;
    if (mf__buf_append(s->h->loop, &s->out, data, len) < 0)
        return MF_ENOMEM;
    s->queued += len;
    if (s->length && s->queued >= s->length)
        s->out_ended = true;
    return 0;
}

/* Fields that describe an HTTP/1 connection and must not appear in
 * HTTP/2 (RFC 9113 §8.2.2). */
static bool mf__h2_connection_field(const char *name, size_t len)
{
    static const char *const names[] = {"connection", "keep-alive",
                                        "proxy-connection", "transfer-encoding",
                                        "upgrade"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++)
        if (strlen(names[i]) == len && strncasecmp(names[i], name, len) == 0)
            return true;
    return false;
}

#define MF_H2_NV(n, nl, v, vl)                                           \
    (nghttp2_nv)                                                         \
    {                                                                    \
        (uint8_t *)(n), (uint8_t *)(v), (nl), (vl), NGHTTP2_NV_FLAG_NONE \
    }

/* Adds "Name: value\r\n" lines as fields, the names lowercased into
 * lower (room for every line's bytes); returns where lower ends. */
static char *mf__h2_add_lines(nghttp2_nv *nv, size_t *n, const char *lines,
                              size_t len, char *lower)
{
    if (!len)
        return lower; /* lines may be NULL then */
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *colon = memchr(p, ':', (size_t)((eol ? eol : end) - p));
        if (!eol || !colon)
            break;
        size_t nlen = (size_t)(colon - p);
        const char *v = colon + 1, *vend = eol;
        while (v < vend && (*v == ' ' || *v == '\t'))
            v++;
        while (vend > v && (vend[-1] == '\r' || vend[-1] == ' '))
            vend--;
        if (!mf__h2_connection_field(p, nlen)) {
            for (size_t i = 0; i < nlen; i++)
                lower[i] = mf__lower(p[i]);
            nv[(*n)++] = MF_H2_NV(lower, nlen, v, (size_t)(vend - v));
            lower += nlen;
        }
        p = eol + 1;
    }
    return lower;
}

/* Server and Date, as every answer of the server carries them. */
static size_t mf__h2_common_fields(mf_http2_t *h, nghttp2_nv *nv)
{
    size_t n = 0, date_len;
    mf_http_site_t *site = h->site;
    const char *date = mf__http_date_line(&site->date, h->loop, &date_len);
    if (site->server_line_len) /* "Server: name\r\n" */
        nv[n++] = MF_H2_NV("server", 6, site->server_line + 8,
                           site->server_line_len - 10);
    nv[n++] = MF_H2_NV("date", 4, date + 6, date_len - 8);
    return n;
}

/* Room for the fields of an answer: one per line, four of our own, and
 * the lowercased names (the fields' array first, then the names). */
static int mf__h2_fields_room(mf_loop_t *loop,
                              const mf_http_response_head_t *rh, mf_buf_t *room,
                              size_t *nmax)
{
    size_t bytes = rh->lines_len, lines = 4;
    for (size_t i = 0; i < rh->lines_len; i++)
        lines += rh->lines[i] == '\n';
    for (unsigned i = 0; i < rh->nstatic; i++)
        bytes += rh->static_lens[i], lines++;
    *nmax = lines;
    return mf__buf_reserve(loop, room, lines * sizeof(nghttp2_nv) + bytes + 1);
}

/* Submits the HEADERS of an answer; a body goes through a DATA source
 * unless body is false. 0, or MF_ENOMEM (nothing submitted). The fields
 * are copied by nghttp2 during the call. */
static int mf__h2_submit(mf_h2_stream_t *s, const mf_http_response_head_t *rh,
                         bool body)
{
    mf_http2_t *h = s->h;
    char status[8], length[24];
    mf_buf_t room;
    size_t nmax, n = 0;
    mf__buf_init(&room);
    if (mf__h2_fields_room(h->loop, rh, &room, &nmax) < 0)
        return MF_ENOMEM;
    nghttp2_nv *nv = (nghttp2_nv *)(void *)room.data;
    char *lower = room.data + nmax * sizeof(nghttp2_nv);
    snprintf(status, sizeof status, "%03d", rh->status % 1000);
    nv[n++] = MF_H2_NV(":status", 7, status, 3);
    n += mf__h2_common_fields(h, nv + n);
    if (rh->framing == MF_HTTP_FRAME_LENGTH) {
        int len = snprintf(length, sizeof length, "%llu",
                           (unsigned long long)rh->length);
        nv[n++] = MF_H2_NV("content-length", 14, length, (size_t)len);
    }
    lower = mf__h2_add_lines(nv, &n, rh->lines, rh->lines_len, lower);
    for (unsigned i = 0; i < rh->nstatic; i++)
        lower = mf__h2_add_lines(nv, &n, rh->static_lines[i],
                                 rh->static_lens[i], lower);
    nghttp2_data_provider provider = {.source.ptr = s,
                                      .read_callback = mf__h2_read_body};
    int rv = nghttp2_submit_response(h->session, s->id, nv, n,
                                     body ? &provider : NULL);
    mf__buf_release(h->loop, &room);
    if (rv == NGHTTP2_ERR_NOMEM)
        return MF_ENOMEM;
    return 0; /* a stream reset meanwhile: nothing to send, nothing lost */
}

static int mf__h2_send_head(void *proto, const mf_http_response_head_t *rh,
                            const char *body, size_t body_len)
{
    mf_h2_stream_t *s = proto;
    bool has_body = rh->framing == MF_HTTP_FRAME_STREAM ||
                    (rh->framing == MF_HTTP_FRAME_LENGTH && rh->length > 0 &&
                     !s->head_request);
    if (s->closed)
        return 0;
    s->length = rh->framing == MF_HTTP_FRAME_LENGTH ? rh->length : 0;
    if (has_body && mf__h2_stream_queue(s, body, body_len) < 0)
        return MF_ENOMEM;
    int rc = mf__h2_submit(s, rh, has_body);
    if (rc < 0) {
        s->out.len = s->out_off = 0;
        s->queued = 0;
        s->out_ended = false;
    }
    return rc;
}

/* The exchange's body buffer is taken whole when nothing waits before it
 * (no copy); else copied behind. */
static int mf__h2_send_body(void *proto, const char *data, size_t len,
                            mf_buf_t *owned)
{
    mf_h2_stream_t *s = proto;
    if (s->closed)
        return 0;
    if (owned && s->out.len == 0 && owned->data == data) {
        mf__buf_release(s->h->loop, &s->out);
        s->out = *owned;
        mf__buf_init(owned);
        s->out.len = len;
        s->out_off = 0;
        s->queued += len;
        s->out_ended = s->length && s->queued >= s->length;
    } else if (mf__h2_stream_queue(s, data, len) < 0) {
        return MF_ENOMEM;
    }
    mf__h2_stream_more(s);
    return 0;
}

static int mf__h2_send_piece(void *proto, const void *data, size_t len)
{
    mf_h2_stream_t *s = proto;
    if (s->closed)
        return 0;
    if (mf__h2_stream_queue(s, data, len) < 0)
        return MF_ENOMEM;
    mf__h2_stream_more(s);
    return 0;
}

/* A chunk of the answer's file was read: nghttp2 takes it on. */
static void mf__h2_file_read(void *arg)
{
    mf_h2_stream_t *s = arg;
    mf__h2_stream_more(s);
    mf__h2_send(s->h);
}

static int mf__h2_send_file(void *proto, int fd, uint64_t offset, uint64_t len)
{
    mf_h2_stream_t *s = proto;
    if (s->closed || s->file) { /* gone, or a second file: not ours */
        close(fd);
        return 0;
    }
    s->file = mf__file_reader_new(s->h->loop, fd, offset, len,
                                  mf__h2_file_read, s);
    s->queued += len;
    if (s->length && s->queued >= s->length)
        s->out_ended = true;
    mf__h2_stream_more(s);
    return 0;
}

static int mf__h2_end_stream(void *proto)
{
    mf_h2_stream_t *s = proto;
    s->out_ended = true;
    mf__h2_stream_more(s);
    return 0;
}

/* The trailer fields, as a HEADERS frame with END_STREAM after the last
 * DATA: nghttp2 takes them from inside the DATA source (which then says
 * NO_END_STREAM). 0, or MF_ENOMEM (the stream is reset: a cut answer). */
static int mf__h2_submit_trailers(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    mf_http_response_head_t rh = {.lines = s->trailers.data,
                                  .lines_len = s->trailers.len};
    mf_buf_t room;
    size_t nmax, n = 0;
    mf__buf_init(&room);
    if (mf__h2_fields_room(h->loop, &rh, &room, &nmax) < 0)
        return MF_ENOMEM;
    nghttp2_nv *nv = (nghttp2_nv *)(void *)room.data;
    mf__h2_add_lines(nv, &n, rh.lines, rh.lines_len,
                     room.data + nmax * sizeof(nghttp2_nv));
    int rv = nghttp2_submit_trailer(h->session, s->id, nv, n);
    mf__buf_release(h->loop, &room);
    return rv == 0 ? 0 : MF_ENOMEM;
}

/* The end of the body with trailers: kept until nghttp2 takes the last
 * DATA. */
static int mf__h2_end_stream_trailers(void *proto, const char *lines,
                                      size_t len)
{
    mf_h2_stream_t *s = proto;
    if (s->closed)
        return 0;
    if (mf__buf_append(s->h->loop, &s->trailers, lines, len) < 0)
        return MF_ENOMEM;
    return mf__h2_end_stream(proto);
}

static const char *mf__h2_request_trailers(const void *proto, size_t *len)
{
    const mf_h2_stream_t *s = proto;
    *len = s->trailers_in.len;
    return s->trailers_in.len ? s->trailers_in.data : NULL;
}

/* An answer the server makes itself: "413 Payload Too Large\n". */
static int mf__h2_send_error(void *proto, int status)
{
    mf_h2_stream_t *s = proto;
    char text[64];
    int len =
        snprintf(text, sizeof text, "%d %s\n", status, mf_http_reason(status));
    static const char type[] = "Content-Type: text/plain\r\n";
    mf_http_response_head_t rh = {.status = status,
                                  .framing = MF_HTTP_FRAME_LENGTH,
                                  .length = (uint64_t)len,
                                  .lines = type,
                                  .lines_len = sizeof type - 1};
    if (s->closed)
        return 0;
    s->out.len = s->out_off = 0;
    s->queued = 0;
    s->head_request = false;
    return mf__h2_send_head(s, &rh, text, (size_t)len);
}

static int mf__h2_flush(void *proto)
{
    mf_h2_stream_t *s = proto;
    return mf__h2_send(s->h);
}

/* The stream's bytes nghttp2 has not taken (a window may hold them) and
 * the socket's queue, which every stream shares. */
static size_t mf__h2_pending(const void *proto)
{
    const mf_h2_stream_t *s = proto;
    return s->out.len - s->out_off + mf__transport_pending(s->h->t);
}

static void mf__h2_watch_drain(void *proto, size_t below)
{
    mf_h2_stream_t *s = proto;
    s->drain_below = below;
    mf__transport_watch_drain(s->h->t, below);
}

/* The exchange is destroyed on the next phase, never under its caller;
 * a stream nghttp2 has closed goes with it. */
/* A streamed body the handler left unread: what is kept is taken (its
 * window given back, or the connection's would shrink for good), and the
 * stream is reset once the answer is out, so the client stops sending. */
static void mf__h2_drop_unread(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    if (!s->streaming || s->closed || h->closed)
        return;
    if (s->body.len > s->taken)
        nghttp2_session_consume(h->session, s->id, s->body.len - s->taken);
    s->body.len = s->taken = 0;
    if (s->body_end)
        return;
    if (s->end_sent)
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id,
                                  NGHTTP2_NO_ERROR);
    else
        s->rst_after = true;
}

static void mf__h2_release(void *proto)
{
    mf_h2_stream_t *s = proto;
    mf__h2_drop_unread(s);
    s->released = true;
    s->drain_below = 0;
    if (mf_list_linked(&s->work))
        mf_list_remove(&s->work); /* no loss to tell any more */
    if (!mf_list_linked(&s->destroy_post._link))
        mf_loop_defer(s->h->loop, &s->destroy_post);
}

/* The deferred end of a stream's exchange (after its release) and of the
 * stream itself (once nghttp2 closed it). The last exchange gone lets the
 * transport go too, if it closed meanwhile (see mf__h2_exchange_made). */
static void mf__h2_destroy_now(mf_post_t *post)
{
    mf_h2_stream_t *s = post->data;
    mf_http2_t *h = s->h;
    if (s->ex) {
        h->exops->destroy(s->ex);
        s->ex = NULL;
        if (--h->active == 0) {
            h->in->pinned = false;
            if (h->closed)
                mf__transport_unpinned(h->t);
        }
    }
    if (s->closed || h->closed)
        mf__h2_stream_free(s);
    mf__h2_step_later(h); /* the connection may be done now */
}

/* An exchange points at its stream, the stream at the connection and its
 * transport: while any lives, the transport is pinned, so that after a
 * close it is not freed under a handler still running (a series, a held
 * exchange), as HTTP/1 pins it for its request. The input is consumed
 * whole at each read, so a pinned one still has its room to read into. */
static void mf__h2_exchange_made(mf_http2_t *h)
{
    if (h->active++ == 0)
        h->in->pinned = true;
}

/* The answer cannot be completed: the stream is reset (the connection
 * goes on), and the exchange hears it first. */
static void mf__h2_abort(void *proto)
{
    mf_h2_stream_t *s = proto;
    mf_http2_t *h = s->h;
    if (!s->closed && !h->closed)
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id,
                                  NGHTTP2_INTERNAL_ERROR);
    if (!s->lost_told) {
        s->lost_told = true;
        h->exops->lost(s->ex); /* may release */
    }
    mf__h2_step_later(h);
}

/* A streamed body's bytes; each read gives their window back, so the
 * client sends more only as fast as the handler reads. */
static ssize_t mf__h2_read(void *proto, void *buf, size_t len)
{
    mf_h2_stream_t *s = proto;
    mf_http2_t *h = s->h;
    if (!s->streaming || h->closed)
        return MF_ECLOSED;
    if (s->taken < s->body.len) {
        size_t n = s->body.len - s->taken;
        n = n < len ? n : len;
        memcpy(buf, s->body.data + s->taken, n);
        s->taken += n;
        if (s->taken == s->body.len)
            s->taken = s->body.len = 0;
        if (!s->closed) {
            nghttp2_session_consume(h->session, s->id, n);
            mf__h2_step_later(h); /* its WINDOW_UPDATE */
        }
        return (ssize_t)n;
    }
    if (s->refused)
        return s->refused == 413 ? MF_EMSGSIZE : MF_EPROTO;
    if (s->body_end)
        return 0;
    return s->closed ? MF_ECLOSED : MF_EAGAIN;
}

static int mf__h2_body_status(const void *proto)
{
    const mf_h2_stream_t *s = proto;
    return s->refused == 413 ? 413 : 400;
}

/* Answered from the next step, never inside this call. */
static void mf__h2_watch_read(void *proto)
{
    mf_h2_stream_t *s = proto;
    s->watching = true;
    mf__h2_step_later(s->h);
}

/* A stream cannot become a raw connection (that would be RFC 8441's
 * extended CONNECT, not offered). */
static int mf__h2_upgrade(void *proto)
{
    (void)proto;
    return MF_ENOSYS;
}

static const mf_http_proto_ops_t mf__h2_proto_ops = {
    .send_head = mf__h2_send_head,
    .send_body = mf__h2_send_body,
    .send_file = mf__h2_send_file,
    .send_piece = mf__h2_send_piece,
    .end_stream = mf__h2_end_stream,
    .end_stream_trailers = mf__h2_end_stream_trailers,
    .request_trailers = mf__h2_request_trailers,
    .send_error = mf__h2_send_error,
    .flush = mf__h2_flush,
    .pending = mf__h2_pending,
    .watch_drain = mf__h2_watch_drain,
    .release = mf__h2_release,
    .abort = mf__h2_abort,
    .read = mf__h2_read,
    .body_status = mf__h2_body_status,
    .watch_read = mf__h2_watch_read,
    .upgrade = mf__h2_upgrade,
};

/* ---- requests to exchanges
 * ---------------------------------------------------
 */

/* Appends to a buffer reserved beforehand (it must not move: the
 * request points into it). */
static char *mf__h2_put(mf_buf_t *b, const char *p, size_t len)
{
    char *at = b->data + b->len;
    memcpy(at, p, len);
    b->len += len;
    return at;
}

/* The request as HTTP/1's parser would have given it, over a head written
 * out as HTTP/1 would carry it ("GET /p HTTP/2.0\r\nname: value\r\n...
 * \r\n": what req.raw_header shows, as nginx shows an HTTP/2 head): the
 * pseudo-fields as method and target, the other fields as headers.
 * 0, or MF_ENOMEM. */
static int mf__h2_request(mf_h2_stream_t *s, mf_http_request_t *req,
                          mf_http_header_t *headers)
{
    size_t at = 0, nlen, vlen, mlen = 0, plen = 0, n = 0;
    const char *name, *value, *method = "", *path = "";
    mf_buf_t *text = &s->text;
    text->len = 0; /* built again at the dispatch: the same bytes */
    if (mf__buf_reserve(s->h->loop, text, s->head.len + 64) < 0)
        return MF_ENOMEM;
    memset(req, 0, sizeof(*req));
    while (mf__h2_stream_field(s, &at, &name, &nlen, &value, &vlen)) {
        if (nlen == 7 && memcmp(name, ":method", 7) == 0)
            method = value, mlen = vlen;
        else if (nlen == 5 && memcmp(name, ":path", 5) == 0)
            path = value, plen = vlen;
    }
    req->method = mf__h2_put(text, method, mlen);
    mf__h2_put(text, " ", 1);
    req->target = req->path = mf__h2_put(text, path, plen);
    req->target_len = req->path_len = plen;
    req->method_len = mlen;
    mf__h2_put(text, " HTTP/2.0\r\n", 11);
    for (at = 0; mf__h2_stream_field(s, &at, &name, &nlen, &value, &vlen);) {
        if (!nlen || name[0] == ':' || n == MF_HTTP_MAX_HEADERS)
            continue;
        mf_http_header_t *f = &headers[n++];
        f->name = mf__h2_put(text, name, nlen);
        mf__h2_put(text, ": ", 2);
        f->value = mf__h2_put(text, value, vlen);
        mf__h2_put(text, "\r\n", 2);
        f->name_len = nlen;
        f->value_len = vlen;
        if (nlen == 4 && memcmp(name, "host", 4) == 0 && !req->host) {
            req->host = f->value;
            req->host_len = vlen;
        }
    }
    mf__h2_put(text, "\r\n", 2);
    const char *q = memchr(req->target, '?', req->target_len);
    if (q) {
        req->path_len = (size_t)(q - req->target);
        req->query = q + 1;
        req->query_len = req->target_len - req->path_len - 1;
    }
    req->minor_version = 1;
    req->http2 = true;
    req->keep_alive = true;
    req->headers = headers;
    req->num_headers = n;
    req->body = s->body.len ? MF_HTTP_BODY_LENGTH : MF_HTTP_BODY_NONE;
    req->content_length = s->body.len;
    if (!s->body_end) /* still coming: its length, if the client gave it */
        req->body = mf__h2_stream_length(s, &req->content_length)
                        ? MF_HTTP_BODY_LENGTH
                        : MF_HTTP_BODY_CHUNKED;
    return 0;
}

/* Whether the handler reads this request's body as it comes (asked once
 * its head is whole, for a request with a body, as HTTP/1 asks). */
static bool mf__h2_streams_body(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    mf_http_request_t req;
    if (!h->config->stream_body || mf__h2_request(s, &req, headers) < 0)
        return false;
    return h->config->stream_body(&req, h->site->user);
}

/* A request refused before its handler: its answer, and the report the
 * access log reads (with no head: an HTTP/2 request has no bytes of
 * HTTP/1 to show). */
static void mf__h2_refuse(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    mf_buf_t none;
    mf__buf_init(&none);
    if (mf__h2_send_error(s, s->refused) < 0)
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id,
                                  NGHTTP2_INTERNAL_ERROR);
    h->site->hooks->rejected(h->site, s->refused,
                             mf_http_error_body_len(s->refused), &none, 0,
                             h->peer);
}

static void mf__h2_dispatch(mf_h2_stream_t *s)
{
    mf_http2_t *h = s->h;
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS];
    mf_http_request_t req;
    s->dispatched = true;
    h->receiving--;
    h->buffered -= s->body.len; /* the exchange's now */
    if (s->refused) {
        mf__h2_refuse(s);
        return;
    }
    if (mf__h2_request(s, &req, headers) < 0) {
        s->refused = 500;
        mf__h2_refuse(s);
        return;
    }
    s->head_request = req.method_len == 4 && memcmp(req.method, "HEAD", 4) == 0;
    s->ex = h->exops->create(h->site, &mf__h2_proto_ops, s, h->peer, &req,
                             s->body.len ? s->body.data : NULL,
                             s->streaming ? SIZE_MAX : s->body.len);
    mf__h2_exchange_made(h);
    h->exops->run(s->ex);
}

/* ---- the connection's step -------------------------------------------------
 */

/* Tells each waiting reader whose read has an answer now. */
static void mf__h2_wake_readers(mf_http2_t *h)
{
    mf_list_t *node = h->streams.next;
    while (node != &h->streams) {
        mf_h2_stream_t *s = mf_container_of(node, mf_h2_stream_t, link);
        node = node->next;
        if (!s->watching || !s->ex || s->released)
            continue;
        if (s->taken == s->body.len && !s->refused && !s->body_end &&
            !s->closed)
            continue;
        s->watching = false;
        h->exops->readable(s->ex);
    }
}

/* Tells each waiting writer whose stream has room again. */
static void mf__h2_wake_writers(mf_http2_t *h)
{
    mf_list_t *node = h->streams.next;
    while (node != &h->streams) {
        mf_h2_stream_t *s = mf_container_of(node, mf_h2_stream_t, link);
        node = node->next;
        if (!s->drain_below || s->released ||
            mf__h2_pending(s) >= s->drain_below)
            continue;
        s->drain_below = 0;
        h->exops->drained(s->ex);
    }
}

/* The deadline that applies: a request still arriving has the header
 * timeout, a connection with no stream the keep-alive one; answers at
 * work have none (the transport bounds a stalled write by itself). */
static void mf__h2_arm(mf_http2_t *h)
{
    if (h->closed || mf__transport_writing(h->t))
        return;
    if (h->receiving)
        mf__transport_arm(h->t, h->config->header_timeout_ms);
    else if (h->active)
        mf__transport_disarm(h->t);
    else
        mf__transport_arm(h->t, h->config->keepalive_timeout_ms);
}

/* After a session call: run the requests that came whole, tell the
 * exchanges whose streams were closed, send, wake writers, and end the
 * connection once nghttp2 wants nothing more (after a GOAWAY). */
static void mf__h2_step(mf_http2_t *h)
{
    while (!h->closed && !mf_list_empty(&h->ready)) {
        mf_h2_stream_t *s =
            mf_container_of(h->ready.next, mf_h2_stream_t, work);
        mf_list_remove(&s->work);
        mf__h2_dispatch(s);
    }
    while (!h->closed && !mf_list_empty(&h->gone)) {
        mf_h2_stream_t *s = mf_container_of(h->gone.next, mf_h2_stream_t, work);
        mf_list_remove(&s->work);
        s->lost_told = true;
        h->exops->lost(s->ex); /* may release */
    }
    mf__h2_wake_readers(h);
    if (mf__h2_send(h) < 0)
        return;
    mf__h2_wake_writers(h);
    if (!nghttp2_session_want_read(h->session) &&
        !nghttp2_session_want_write(h->session) && !h->active) {
        mf__transport_end(h->t, false);
        mf__transport_flush(h->t);
        if (!h->closed && !mf__transport_writing(h->t))
            mf__transport_close(h->t);
        return;
    }
    mf__h2_arm(h);
}

static void mf__h2_step_now(mf_post_t *post)
{
    mf__h2_step(post->data);
}

/* ---- the transport's calls (mf_transport_ops_t) ----------------------------
 */

static void mf__h2_on_data(void *proto, size_t n)
{
    mf_http2_t *h = proto;
    mf_transport_input_t *in = h->in;
    (void)n;
    if (h->failed) { /* what a failed session still gets is not read */
        in->off = in->buf.len = 0;
        return;
    }
    h->in_session = true;
    ssize_t used = nghttp2_session_mem_recv(
        h->session, (const uint8_t *)in->buf.data + in->off,
        in->buf.len - in->off);
    h->in_session = false;
    if (used < 0) {
        mf__h2_send(h); /* a GOAWAY nghttp2 queued, if any */
        mf__h2_fail(h, (int)used);
        return;
    }
    in->off += (size_t)used;
    if (in->off == in->buf.len)
        in->off = in->buf.len = 0;
    mf__h2_step(h);
}

static void mf__h2_on_eof(void *proto)
{
    mf_http2_t *h = proto;
    mf__transport_close(h->t); /* streams at work hear of it */
}

static void mf__h2_on_no_room(void *proto)
{
    mf_http2_t *h = proto;
    mf__transport_close(h->t);
}

static void mf__h2_on_flushed(void *proto)
{
    mf__h2_arm(proto);
}

static void mf__h2_on_drain(void *proto)
{
    mf__h2_step_later(proto); /* not inside the transport's write */
}

/* No request came (or came whole) in time: the connection ends with a
 * GOAWAY; answers at work are not timed here. */
static void mf__h2_on_timeout(void *proto)
{
    mf_http2_t *h = proto;
    nghttp2_session_terminate_session(h->session, NGHTTP2_NO_ERROR);
    mf__h2_send(h);
    mf__transport_end(h->t, false);
    mf__transport_flush(h->t);
    if (!h->closed && !mf__transport_writing(h->t))
        mf__transport_close(h->t);
}

static void mf__h2_on_close(void *proto)
{
    mf_http2_t *h = proto;
    h->closed = true;
    if (mf_list_linked(&h->step_post._link))
        mf_list_remove(&h->step_post._link);
    mf_list_t *node = h->streams.next;
    while (node != &h->streams) {
        mf_h2_stream_t *s = mf_container_of(node, mf_h2_stream_t, link);
        node = node->next;
        if (mf_list_linked(&s->work))
            mf_list_remove(&s->work);
        if (s->ex && !s->released && !s->lost_told) {
            s->lost_told = true;
            h->exops->lost(s->ex); /* may release: a destroy is posted */
        }
    }
}

static void mf__h2_on_free(void *proto)
{
    mf_http2_t *h = proto;
    h->freeing = true;
    nghttp2_session_del(h->session);
    while (!mf_list_empty(&h->streams)) {
        mf_h2_stream_t *s =
            mf_container_of(h->streams.next, mf_h2_stream_t, link);
        if (s->ex)
            h->exops->destroy(s->ex);
        mf__h2_stream_free(s);
    }
    mf_loop_free(h->loop, h, sizeof(*h));
}

static bool mf__h2_idle(const void *proto)
{
    const mf_http2_t *h = proto;
    return mf_list_empty(&h->streams);
}

/* A graceful stop: GOAWAY names the last stream taken; those finish, no
 * new one starts, and the step closes the connection when none is left. */
static void mf__h2_stop(void *proto)
{
    mf_http2_t *h = proto;
    if (h->stopping || h->closed)
        return;
    h->stopping = true;
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h->session),
                          NGHTTP2_NO_ERROR, NULL, 0);
    mf__h2_step(h);
}

/* A drain (a graceful restart) began: a GOAWAY that names no stream yet
 * (RFC 9113 §6.8), so the client opens its next streams on a new
 * connection, to the server taking over; the last GOAWAY comes with the
 * stop, at the drain's end. */
static void mf__h2_draining(void *proto)
{
    mf_http2_t *h = proto;
    if (h->noticed || h->stopping || h->closed)
        return;
    h->noticed = true;
    nghttp2_submit_shutdown_notice(h->session);
    mf__h2_step_later(h);
}

static const mf_transport_ops_t mf__h2_transport_ops = {
    .on_data = mf__h2_on_data,
    .on_eof = mf__h2_on_eof,
    .on_no_room = mf__h2_on_no_room,
    .on_flushed = mf__h2_on_flushed,
    .on_drain = mf__h2_on_drain,
    .on_timeout = mf__h2_on_timeout,
    .on_close = mf__h2_on_close,
    .on_free = mf__h2_on_free,
    .idle = mf__h2_idle,
    .stop = mf__h2_stop,
    .draining = mf__h2_draining,
};

/* ---- the session
 * -------------------------------------------------------------
 */

static nghttp2_session_callbacks *mf__h2_callbacks(void)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(
        cbs, mf__h2_on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, mf__h2_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cbs, mf__h2_on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs,
                                                         mf__h2_on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cbs, mf__h2_on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs,
                                                         mf__h2_on_frame_send);
    return cbs;
}

/* The flood limits (the CVEs of 2019 and 2023-2024): nghttp2 counts and
 * ends the session; the numbers here are its defaults, said aloud. */
static nghttp2_option *mf__h2_options(void)
{
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0)
        return NULL;
    nghttp2_option_set_no_closed_streams(opt, 1);
    /* Windows are given back as bodies are taken (mf__h2_on_data_chunk,
     * mf__h2_read), not as nghttp2 receives them. */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 1000); /* SETTINGS, PING */
    nghttp2_option_set_max_settings(opt, 32);       /* per frame */
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33); /* rapid reset */
    nghttp2_option_set_max_continuations(opt, 8); /* CONTINUATION */
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    return opt;
}

static int mf__h2_session(mf_http2_t *h)
{
    const mf_http2_config_t *c = &h->config->http2;
    nghttp2_session_callbacks *cbs = mf__h2_callbacks();
    nghttp2_option *opt = mf__h2_options();
    int rv = cbs && opt ? nghttp2_session_server_new2(&h->session, cbs, h, opt)
                        : NGHTTP2_ERR_NOMEM;
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    if (rv != 0)
        return MF_ENOMEM;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, c->initial_window_size},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, c->max_frame_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, c->max_header_list_size},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, settings,
                                MF_ARRAY_SIZE(settings)) != 0)
        return MF_ENOMEM;
    return 0;
}

int mf__http2_config_check(const mf_http2_config_t *c)
{
    if (c->max_concurrent_streams < 1 || c->max_frame_size < 16384 ||
        c->max_frame_size > 16777215 || c->initial_window_size > 2147483647u ||
        c->max_header_list_size < 1)
        return MF_EINVAL;
    return 0;
}

/* A connection's state, not attached to the transport yet. */
static mf_http2_t *mf__h2_new(mf_http_site_t *site, mf_transport_t *t)
{
    mf_http2_t *h = mf_loop_alloc(site->loop, sizeof(*h));
    memset(h, 0, sizeof(*h));
    h->t = t;
    h->in = mf__transport_input(t);
    h->site = site;
    h->loop = site->loop;
    h->config = site->config;
    h->exops = site->exchange;
    h->peer = mf__transport_peer(t);
    mf_list_init(&h->streams);
    mf_list_init(&h->ready);
    mf_list_init(&h->gone);
    mf_post_init(&h->step_post, mf__h2_step_now, h);
    h->reset_tokens = MF_H2_RESET_BURST;
    h->reset_refill = mf_loop_now(h->loop);
    return h;
}

/* The transport's calls are HTTP/2's from now on. */
static void mf__h2_take_over(mf_http2_t *h)
{
    h->in->max = SIZE_MAX; /* nghttp2 takes every byte it is given */
    h->site->h2.connections++;
    mf__transport_attach(h->t, &mf__h2_transport_ops, h);
}

/* Reads the client's first bytes. Handed over while the server stops (its
 * preface was on its way): the streams of its first bytes are served, no
 * more, as HTTP/1 answers the request that was there. */
static void mf__h2_start(mf_http2_t *h)
{
    mf_transport_input_t *in = h->in;
    if (in->buf.len > in->off || !mf_list_empty(&h->ready))
        mf__h2_on_data(h, in->buf.len - in->off);
    if (h->site->stopping && !h->closed)
        mf__h2_stop(h);
}

void mf__http2_attach(mf_http_site_t *site, mf_transport_t *t)
{
    mf_http2_t *h = mf__h2_new(site, t);
    mf__h2_take_over(h);
    if (mf__h2_session(h) < 0) {
        mf__transport_close(t);
        return;
    }
    mf__h2_start(h);
}

/* ---- Upgrade: h2c (RFC 7540 §3.2) -------------------------------------------
 */

/* HTTP2-Settings of at most this many settings (nghttp2's own cap on a
 * SETTINGS frame, mf__h2_options); a longer header is not honoured. */
#define MF_H2_UPGRADE_SETTINGS 32

/* Fields of HTTP/1 that mean nothing in HTTP/2 (RFC 9113 §8.2.2), left
 * out of the upgraded request, with the upgrade's own. */
static bool mf__h2_hop_field(const char *name, size_t len)
{
    return MF__IS(name, len, "connection") || MF__IS(name, len, "upgrade") ||
           MF__IS(name, len, "http2-settings") ||
           MF__IS(name, len, "keep-alive") ||
           MF__IS(name, len, "proxy-connection") ||
           MF__IS(name, len, "transfer-encoding") || MF__IS(name, len, "te");
}

/* Whether a SETTINGS payload's values are within RFC 9113's ranges
 * (§6.5.2): nghttp2's upgrade takes the payload's form only, and a value
 * out of range would be a connection error after the 101 was promised;
 * nghttp2 judges the values when it packs them again. */
static bool mf__h2_settings_valid(const uint8_t *p, size_t len)
{
    nghttp2_settings_entry iv[MF_H2_UPGRADE_SETTINGS];
    uint8_t again[MF_H2_UPGRADE_SETTINGS * 6];
    size_t n = len / 6;
    for (size_t i = 0; i < n; i++, p += 6) {
        iv[i].settings_id = (int32_t)(p[0] << 8 | p[1]);
        iv[i].value = (uint32_t)p[2] << 24 | (uint32_t)p[3] << 16 |
                      (uint32_t)p[4] << 8 | p[5];
    }
    return nghttp2_pack_settings_payload(again, sizeof again, iv, n) >= 0;
}

/* The decoded HTTP2-Settings of a request that asks for h2c (Upgrade
 * names h2c, Connection names HTTP2-Settings, exactly one HTTP2-Settings)
 * for a path (origin-form: its target is stream 1's :path as it is): its
 * length, or -1 when the request does not ask for it properly. */
static ssize_t mf__h2_upgrade_settings(const mf_http_request_t *req,
                                       uint8_t *out)
{
    const char *value = NULL;
    size_t value_len = 0, bad;
    bool h2c = false, named = false;
    if (!req->target_len || req->target[0] != '/')
        return -1;
    for (size_t i = 0; i < req->num_headers; i++) {
        const mf_http_header_t *f = &req->headers[i];
        if (MF__IS(f->name, f->name_len, "upgrade"))
            h2c |= mf_ws_list_has(f->value, f->value_len, "h2c");
        else if (MF__IS(f->name, f->name_len, "connection"))
            named |= mf_ws_list_has(f->value, f->value_len, "http2-settings");
        else if (MF__IS(f->name, f->name_len, "http2-settings")) {
            if (value)
                return -1; /* more than one */
            value = f->value;
            value_len = f->value_len;
        }
    }
    if (!h2c || !named || !value ||
        value_len > mf_base64_encoded_size(MF_H2_UPGRADE_SETTINGS * 6))
        return -1;
    ssize_t n = mf_base64_decode(out, value, value_len, MF_BASE64_URL, &bad);
    if (n < 0 || n % 6 || n / 6 > MF_H2_UPGRADE_SETTINGS ||
        !mf__h2_settings_valid(out, (size_t)n))
        return -1;
    return n;
}

/* Appends a field to the upgraded request's records, its name in lower
 * case as HTTP/2 carries it; past max_header_list_size the request is
 * refused (431), as a HEADERS frame would be. */
static void mf__h2_upgrade_field(mf_h2_stream_t *s, const char *name,
                                 size_t nlen, const char *value, size_t vlen)
{
    s->header_bytes += nlen + vlen + 32;
    if (s->refused)
        return;
    if (s->header_bytes > s->h->config->http2.max_header_list_size ||
        s->nheaders >= MF_HTTP_MAX_HEADERS - 1) {
        s->refused = 431;
        s->h->site->h2.headers_refused++;
        return;
    }
    size_t at = s->head.len + 2 * sizeof(uint32_t);
    if (mf__h2_stream_keep(s, (const uint8_t *)name, nlen,
                           (const uint8_t *)value, vlen) < 0) {
        s->refused = 500;
        return;
    }
    for (size_t i = 0; i < nlen; i++)
        s->head.data[at + i] = mf__lower(s->head.data[at + i]);
    if (name[0] != ':')
        s->nheaders++;
}

/* Stream 1: the HTTP/1 request that asked for the upgrade, whole (it has
 * no body), to be dispatched at the first step. */
static void mf__h2_upgrade_stream(mf_http2_t *h, const mf_http_request_t *req)
{
    mf_h2_stream_t *s = mf__h2_stream_new(h, 1);
    nghttp2_session_set_stream_user_data(h->session, 1, s);
    mf__h2_upgrade_field(s, ":method", 7, req->method, req->method_len);
    mf__h2_upgrade_field(s, ":path", 5, req->target, req->target_len);
    mf__h2_upgrade_field(s, ":scheme", 7, "http", 4);
    for (size_t i = 0; i < req->num_headers; i++) {
        const mf_http_header_t *f = &req->headers[i];
        if (!mf__h2_hop_field(f->name, f->name_len))
            mf__h2_upgrade_field(s, f->name, f->name_len, f->value,
                                 f->value_len);
    }
    mf__h2_stream_head_done(s);
    s->body_end = true;
    mf__h2_stream_ready(s);
}

bool mf__http2_attach_upgraded(mf_http_site_t *site, mf_transport_t *t,
                               const mf_http_request_t *req, size_t head_len)
{
    static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                    "Connection: Upgrade\r\n"
                                    "Upgrade: h2c\r\n\r\n";
    uint8_t settings[MF_H2_UPGRADE_SETTINGS * 6 + 2];
    ssize_t n = mf__h2_upgrade_settings(req, settings);
    if (n < 0)
        return false;
    bool head = MF__IS(req->method, req->method_len, "HEAD");
    mf_http2_t *h = mf__h2_new(site, t);
    /* nghttp2 judges the settings before the 101 is promised: a refusal
     * leaves the request to HTTP/1, the Upgrade ignored. */
    if (mf__h2_session(h) < 0 ||
        nghttp2_session_upgrade2(h->session, settings, (size_t)n, head, NULL) ||
        mf__transport_queue_copy(t, switching, sizeof switching - 1) < 0) {
        nghttp2_session_del(h->session);
        mf_loop_free(h->loop, h, sizeof(*h));
        return false;
    }
    mf__h2_take_over(h);
    mf__h2_upgrade_stream(h, req); /* before the input moves under req */
    h->in->off += head_len;        /* what follows is the client's preface */
    mf__h2_start(h);
    return true;
}
