/*
 * http_exchange.c — one request as the handler sees it (mf_http_exchange_*):
 * running the handler, its series or hold, and serialising the response
 * into the connection's output. Owns mf_http_exchange_t, whose body is
 * private to this file; the connection reaches it through
 * http_exchange_int.h. May call: the connection's interface (http_conn.h:
 * queue, flush, release, abort and a few queries), the server's
 * (http_server_int.h: the handler, the failure count), response heads
 * (http_head.h), the engine.
 *
 * Response heads are written straight into the connection's output,
 * coalescing with what is already queued, so pipelined answers leave in one
 * write. Bodies up to MF_HTTP_COPY_BODY_MAX are copied behind their head;
 * bigger ones are written from their own memory (zero copy for _ref
 * bodies).
 *
 * Never a silently short answer: when memory runs out while the response
 * is built (an added header, an appended body, the queued head), the answer
 * becomes a 500 with Connection: close; once the head is out, the
 * connection is closed instead, so the client sees a cut body (no last
 * chunk, or fewer bytes than Content-Length said). Either way the server
 * counts it (mf_http_server_failed_responses). A header the handler should
 * not have given (mf__header_fault) turns the answer into the same 500, and
 * an abort ends it the same way: a 500 before the head, a cut after.
 */
#include <string.h>
#include <strings.h>

#include "http_exchange_int.h"
#include "http_head.h"
#include "http_server_int.h"

/* Bodies up to this size are copied into the output (one write for head
 * and body); bigger ones are written from their own memory. */
#define MF_HTTP_COPY_BODY_MAX (16 * 1024)
/* Constant header lines kept by reference (add_header_static). */
#define MF_EX_STATIC_LINES 2

typedef enum mf_ex_state {
    MF_EX_ACTIVE, /* the handler, its series or holder builds the answer */
    MF_EX_STREAM, /* streamed response: head queued, chunks flowing */
    MF_EX_FAILED, /* a 500 was queued or the connection cut (out of memory,
                     an invalid header, an abort); further output is
                     dropped until the send */
    MF_EX_DONE    /* sent: the connection is released */
} mf_ex_state_t;

struct mf_http_exchange {
    mf_http_conn_t *conn;
    mf_http_server_t *srv;
    mf_loop_t *loop;
    const mf_sockaddr_t *peer;
    mf_http_request_t req;
    const char *body;
    size_t body_len;
    mf_ex_state_t state;
    bool held;
    bool closed_early;  /* the connection went away before the response */
    bool out_of_memory; /* an append failed: the answer becomes a 500 */
    bool bad_header;    /* a header was refused: the answer becomes a 500 */
    int status;
    mf_buf_t resp_headers; /* "Name: value\r\n" lines as added */
    mf_buf_t resp_body;    /* appended body */
    const char *body_ref;  /* zero-copy body */
    size_t body_ref_len;
    const char *static_lines[MF_EX_STATIC_LINES];
    uint16_t static_lens[MF_EX_STATIC_LINES];
    unsigned nstatic;
    mf_series_t *series; /* from its creation until its callback */
    mf_http_exchange_close_cb on_close;
    void *on_close_arg;
    mf_http_exchange_drain_cb on_drain;
    void *on_drain_arg;
    mf_post_t drain_post;
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS]; /* last: not zeroed */
};

/* ---- answers that cannot be completed ------------------------------------
 */

/* Appends to one of the exchange's buffers; a refused allocation marks the
 * answer as failed (it becomes a 500 at the send) and drops the rest.
 * 0 or MF_ENOMEM. */
static int mf__exchange_keep(mf_http_exchange_t *ex, mf_buf_t *buf,
                             const void *data, size_t len)
{
    if (ex->out_of_memory)
        return MF_ENOMEM;
    if (mf__buf_append(ex->loop, buf, data, len) == 0)
        return 0;
    ex->out_of_memory = true;
    return MF_ENOMEM;
}

/* Nothing of the response is queued yet: answer 500 with Connection:
 * close instead; if even that cannot be queued, close the connection.
 * Returns whether the 500 was queued. */
static bool mf__exchange_answer_500(mf_http_exchange_t *ex)
{
    ex->state = MF_EX_FAILED;
    if (ex->closed_early)
        return false;
    mf_http_head_t h;
    mf__http_head_error(&h, ex->srv, 500);
    mf__http_conn_close_when_done(ex->conn);
    if (mf__http_conn_queue_copy(ex->conn, h.fixed, h.len) == 0)
        return true;
    mf__http_conn_abort(ex->conn); /* runs mf__http_exchange_lost */
    return false;
}

/* The head is queued: the rest cannot follow, so close the connection
 * without the end of the body (no last chunk). */
static void mf__exchange_close(mf_http_exchange_t *ex)
{
    ex->state = MF_EX_FAILED;
    if (!ex->closed_early)
        mf__http_conn_abort(ex->conn); /* runs mf__http_exchange_lost */
}

/* Out of memory before the head: a 500 instead, counted and reported. */
static void mf__exchange_fail(mf_http_exchange_t *ex)
{
    mf__http_server_response_failed(ex->srv, mf__exchange_answer_500(ex));
}

/* Out of memory after the head: cut, counted and reported. */
static void mf__exchange_cut(mf_http_exchange_t *ex)
{
    mf__http_server_response_failed(ex->srv, false);
    mf__exchange_close(ex);
}

/* The answer as built cannot go out: a 500 (counted as out of memory when
 * that is why; a refused header was counted and reported when it came). */
static void mf__exchange_refuse_answer(mf_http_exchange_t *ex)
{
    if (ex->out_of_memory)
        mf__exchange_fail(ex);
    else
        mf__exchange_answer_500(ex);
}

/* ---- response heads ---------------------------------------------------- */

static bool mf__status_has_body(int status)
{
    return status >= 200 && status != 204 && status != 304;
}

/* Whether this response closes the connection, and its Connection line. */
static void mf__head_connection(mf_http_head_t *h, mf_http_exchange_t *ex)
{
    if (!mf__http_conn_keep_alive(ex->conn))
        mf__http_head_put(h, "Connection: close\r\n", 19);
    else if (ex->req.minor_version == 0)
        mf__http_head_put(h, "Connection: keep-alive\r\n", 24);
}

/* Status line, common and managed headers, the handler's headers, and a
 * body small enough to copy: queued as one copy. 0 or MF_ENOMEM (nothing
 * queued). */
static int mf__exchange_queue_head(mf_http_exchange_t *ex, bool chunked,
                                   uint64_t length, bool has_length,
                                   const char *body, size_t body_len)
{
    mf_http_head_t h;
    mf__http_head_common(&h, ex->srv, ex->status);
    if (chunked) {
        mf__http_head_put(&h, "Transfer-Encoding: chunked\r\n", 28);
    } else if (has_length) {
        mf__http_head_put(&h, "Content-Length: ", 16);
        h.len += mf__http_fmt_u64(h.fixed + h.len, length);
        mf__http_head_put(&h, "\r\n", 2);
    }
    mf__head_connection(&h, ex);
    mf_piece_t pieces[4 + MF_EX_STATIC_LINES];
    size_t n = 0;
    pieces[n++] = (mf_piece_t){h.fixed, h.len};
    pieces[n++] = (mf_piece_t){ex->resp_headers.data, ex->resp_headers.len};
    for (unsigned i = 0; i < ex->nstatic; i++)
        pieces[n++] = (mf_piece_t){ex->static_lines[i], ex->static_lens[i]};
    pieces[n++] = (mf_piece_t){"\r\n", 2};
    pieces[n++] = (mf_piece_t){body, body_len};
    return mf__http_conn_queue_pieces(ex->conn, pieces, n);
}

/* The whole response of a send: head, then the body copied behind it or
 * referenced from its own memory. */
static void mf__exchange_queue_full(mf_http_exchange_t *ex)
{
    if (ex->out_of_memory || ex->bad_header) {
        mf__exchange_refuse_answer(ex);
        return;
    }
    const char *body = ex->body_ref ? ex->body_ref : ex->resp_body.data;
    size_t len = ex->body_ref ? ex->body_ref_len : ex->resp_body.len;
    bool has_body = mf__status_has_body(ex->status);
    bool head_only =
        ex->req.method_len == 4 && memcmp(ex->req.method, "HEAD", 4) == 0;
    bool copy = has_body && !head_only && len <= MF_HTTP_COPY_BODY_MAX;
    if (mf__exchange_queue_head(ex, false, len, has_body, copy ? body : NULL,
                                copy ? len : 0) < 0) {
        mf__exchange_fail(ex);
        return;
    }
    if (!has_body || head_only || !len || copy)
        return;
    mf_buf_t *owned = ex->body_ref ? NULL : &ex->resp_body;
    if (mf__http_conn_queue_ref(ex->conn, body, len, owned) < 0)
        mf__exchange_cut(ex);
}

/* The last chunk of a streamed body (HTTP/1.0: the close ends it). */
static void mf__exchange_end_stream(mf_http_exchange_t *ex)
{
    if (ex->req.minor_version >= 1 &&
        mf__http_conn_queue_copy(ex->conn, "0\r\n\r\n", 5) < 0)
        mf__exchange_cut(ex);
}

/* ---- the exchange's lifecycle, for the connection ------------------------ */

mf_http_exchange_t *mf__http_exchange_create(mf_http_conn_t *conn,
                                             const mf_http_request_t *req,
                                             const char *body, size_t body_len)
{
    mf_loop_t *loop = mf__http_conn_loop(conn);
    mf_http_exchange_t *ex = mf_loop_alloc(loop, sizeof(*ex));
    /* Everything but the header array, which is copied below. Zero is
     * also an empty buffer and no callback. */
    memset(ex, 0, offsetof(mf_http_exchange_t, headers));
    mf_list_init(&ex->drain_post._link); /* no drain call pending */
    ex->conn = conn;
    ex->srv = mf__http_conn_server(conn);
    ex->loop = loop;
    ex->peer = mf__http_conn_peer(conn);
    ex->req = *req;
    memcpy(ex->headers, req->headers,
           req->num_headers * sizeof(ex->headers[0]));
    ex->req.headers = ex->headers;
    ex->body = body;
    ex->body_len = body_len;
    ex->state = MF_EX_ACTIVE;
    ex->status = 200;
    return ex;
}

void mf__http_exchange_run(mf_http_exchange_t *ex)
{
    mf__http_server_handle(ex->srv, ex);
    /* A send inside the handler only queued the response: the connection
     * keeps the exchange alive until this call returns (`dispatching`). */
    if (ex->series) {
        mf_series_start(ex->series);
        return;
    }
    if (ex->state != MF_EX_ACTIVE || ex->held)
        return; /* sent, streaming, failed (the writer sends), or held */
    mf_http_exchange_send(ex);
}

void mf__http_exchange_lost(mf_http_exchange_t *ex)
{
    ex->closed_early = true;
    if (ex->on_drain) { /* wake a paused writer: its next write fails */
        mf_http_exchange_drain_cb cb = ex->on_drain;
        ex->on_drain = NULL;
        cb(ex, ex->on_drain_arg);
    }
    if (ex->on_close) {
        mf_http_exchange_close_cb cb = ex->on_close;
        ex->on_close = NULL;
        cb(ex, ex->on_close_arg);
        /* After on_close the handler holds no reference (nor a hold); a
         * series still running releases the connection when it ends. */
        ex->held = false;
        if (!ex->series && ex->state != MF_EX_DONE) {
            ex->state = MF_EX_DONE;
            mf__http_conn_release(ex->conn);
        }
    }
}

void mf__http_exchange_drained(mf_http_exchange_t *ex)
{
    if (!ex->on_drain)
        return;
    mf_http_exchange_drain_cb cb = ex->on_drain;
    ex->on_drain = NULL;
    cb(ex, ex->on_drain_arg);
}

void mf__http_exchange_destroy(mf_http_exchange_t *ex)
{
    if (mf_list_linked(&ex->drain_post._link))
        mf_list_remove(&ex->drain_post._link); /* a drain call not run yet */
    mf__buf_release(ex->loop, &ex->resp_headers);
    mf__buf_release(ex->loop, &ex->resp_body);
    mf_loop_free(ex->loop, ex, sizeof(*ex));
}

static void mf__exchange_series_done(mf_series_t *series)
{
    mf_http_exchange_t *ex = mf_series_callback_arg(series);
    ex->series = NULL; /* the series is freed after this callback */
    if (ex->state == MF_EX_DONE)
        mf__http_conn_release(ex->conn); /* sent (or lost) meanwhile */
    else if (!ex->held)
        mf_http_exchange_send(ex);
}

/* ---- public API: the request ----------------------------------------------
 */

const mf_http_request_t *mf_http_exchange_request(const mf_http_exchange_t *ex)
{
    return &ex->req;
}

const char *mf_http_exchange_body(const mf_http_exchange_t *ex, size_t *len)
{
    if (len)
        *len = ex->body_len;
    return ex->body;
}

const mf_sockaddr_t *mf_http_exchange_peer(const mf_http_exchange_t *ex)
{
    return ex->peer;
}

mf_loop_t *mf_http_exchange_loop(const mf_http_exchange_t *ex)
{
    return ex->loop;
}

mf_http_server_t *mf_http_exchange_server(const mf_http_exchange_t *ex)
{
    return ex->srv;
}

/* ---- public API: the response ------------------------------------------ */

void mf_http_exchange_set_status(mf_http_exchange_t *ex, int status)
{
    ex->status = status >= 100 && status <= 999 ? status : 500;
}

/* Headers the server computes itself: a handler's copy would contradict
 * the framing or the connection's fate. name is a valid token already, so
 * a whole-token comparison cannot be fooled ("Content-Length " is not a
 * token). */
static bool mf__header_is_managed(const char *name, size_t len)
{
    switch (len) { /* most names have none of these lengths */
    case 4:
        return strncasecmp(name, "date", 4) == 0;
    case 10:
        return strncasecmp(name, "connection", 10) == 0 ||
               strncasecmp(name, "keep-alive", 10) == 0;
    case 14:
        return strncasecmp(name, "content-length", 14) == 0;
    case 17:
        return strncasecmp(name, "transfer-encoding", 17) == 0;
    default:
        return false;
    }
}

/* Why a header cannot be added, or NULL when it can. */
static const char *mf__header_fault(const mf_http_exchange_t *ex,
                                    const char *name, size_t name_len,
                                    const char *value, size_t value_len)
{
    if (!mf_http_field_name_valid(name, name_len))
        return "is not a valid field name";
    if (!mf_http_field_value_valid(value, value_len))
        return "has a control byte in its value";
    if (mf__header_is_managed(name, name_len))
        return "is set by the server";
    if (ex->state == MF_EX_STREAM)
        return "comes after the head was sent";
    if (ex->state != MF_EX_ACTIVE)
        return "comes after the answer ended";
    return NULL;
}

/* A handler error, never a silent drop: counted and reported with the
 * request (once per exchange), and an answer not yet sent becomes a 500. */
static int mf__exchange_refuse_header(mf_http_exchange_t *ex, const char *name,
                                      size_t name_len, const char *fault)
{
    bool first = !ex->bad_header;
    ex->bad_header = true; /* only a head not yet sent looks at it */
    mf__http_server_header_refused(ex->srv, &ex->req, name, name_len, fault,
                                   first, ex->state != MF_EX_ACTIVE);
    return MF_EINVAL;
}

int mf_http_exchange_add_header(mf_http_exchange_t *ex, const char *name,
                                size_t name_len, const char *value,
                                size_t value_len)
{
    while (value_len && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        value_len--;
    }
    while (value_len &&
           (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
        value_len--;
    const char *fault = mf__header_fault(ex, name, name_len, value, value_len);
    if (fault)
        return mf__exchange_refuse_header(ex, name, name_len, fault);
    mf_buf_t *buf = &ex->resp_headers; /* "name: value\r\n", one reserve */
    size_t need = name_len + value_len + 4;
    if (ex->out_of_memory || (buf->cap - buf->len < need &&
                              mf__buf_reserve(ex->loop, buf, need) < 0)) {
        ex->out_of_memory = true;
        return MF_ENOMEM;
    }
    char *p = buf->data + buf->len;
    memcpy(p, name, name_len);
    p += name_len;
    memcpy(p, ": ", 2);
    if (value_len)
        memcpy(p + 2, value, value_len);
    memcpy(p + 2 + value_len, "\r\n", 2);
    buf->len += need;
    return 0;
}

void mf_http_exchange_add_header_line(mf_http_exchange_t *ex, const char *line,
                                      size_t len)
{
    mf__exchange_keep(ex, &ex->resp_headers, line, len);
}

void mf_http_exchange_add_header_static(mf_http_exchange_t *ex,
                                        const char *line, size_t len)
{
    if (ex->nstatic == MF_EX_STATIC_LINES || len > UINT16_MAX) {
        mf_http_exchange_add_header_line(ex, line, len);
        return;
    }
    ex->static_lines[ex->nstatic] = line;
    ex->static_lens[ex->nstatic] = (uint16_t)len;
    ex->nstatic++;
}

void mf_http_exchange_append(mf_http_exchange_t *ex, const void *data,
                             size_t len)
{
    if (ex->body_ref) { /* switch from a reference to an owned copy */
        const char *ref = ex->body_ref;
        ex->body_ref = NULL;
        mf__exchange_keep(ex, &ex->resp_body, ref, ex->body_ref_len);
    }
    mf__exchange_keep(ex, &ex->resp_body, data, len);
}

void mf_http_exchange_body_ref(mf_http_exchange_t *ex, const void *data,
                               size_t len)
{
    ex->resp_body.len = 0;
    ex->body_ref = data;
    ex->body_ref_len = len;
}

mf_series_t *mf_http_exchange_series(mf_http_exchange_t *ex)
{
    if (!ex->series) {
        ex->series = mf_series_create(ex->loop, mf__exchange_series_done);
        mf_series_set_callback_arg(ex->series, ex);
    }
    return ex->series;
}

void mf_http_exchange_hold(mf_http_exchange_t *ex)
{
    ex->held = true;
}

void mf_http_exchange_on_close(mf_http_exchange_t *ex,
                               mf_http_exchange_close_cb cb, void *arg)
{
    ex->on_close = cb;
    ex->on_close_arg = arg;
}

void mf_http_exchange_send_body(mf_http_exchange_t *ex, const void *data,
                                size_t len)
{
    if (ex->resp_body.len || ex->body_ref || len > MF_HTTP_COPY_BODY_MAX) {
        mf_http_exchange_append(ex, data, len); /* kept until written */
    } else {
        ex->body_ref = data; /* copied into the output by the send */
        ex->body_ref_len = len;
    }
    mf_http_exchange_send(ex);
}

void mf_http_exchange_send(mf_http_exchange_t *ex)
{
    if (ex->state == MF_EX_DONE)
        return;
    /* The handler lets go here: no callback of its may run after. */
    ex->on_close = NULL;
    ex->on_drain = NULL;
    ex->held = false;
    if (!ex->closed_early) {
        if (ex->state == MF_EX_STREAM)
            mf__exchange_end_stream(ex);
        else if (ex->state == MF_EX_ACTIVE)
            mf__exchange_queue_full(ex);
    }
    ex->state = MF_EX_DONE;
    if (ex->series) { /* sent from inside its series: its end releases */
        mf__http_conn_flush(ex->conn);
        return;
    }
    mf__http_conn_release(ex->conn); /* may destroy ex */
}

void mf_http_exchange_abort(mf_http_exchange_t *ex)
{
    if (ex->state == MF_EX_DONE)
        return;
    /* The handler lets go now: closing the connection below must not call
     * it back. */
    ex->on_close = NULL;
    ex->on_drain = NULL;
    if (ex->state == MF_EX_ACTIVE)
        mf__exchange_answer_500(ex);
    else if (ex->state == MF_EX_STREAM)
        mf__exchange_close(ex);
    mf_http_exchange_send(ex); /* failed: ends the exchange, adds nothing */
}

/* The head of a streamed response, on its first write; an answer that
 * cannot go out becomes a 500 instead. 0, MF_ENOMEM or MF_EINVAL. */
static int mf__exchange_start_stream(mf_http_exchange_t *ex, bool chunked)
{
    if (ex->out_of_memory || ex->bad_header) {
        int rc = ex->out_of_memory ? MF_ENOMEM : MF_EINVAL;
        mf__exchange_refuse_answer(ex);
        return rc;
    }
    ex->state = MF_EX_STREAM;
    if (!chunked) /* HTTP/1.0: the close ends the body */
        mf__http_conn_close_when_done(ex->conn);
    if (mf__exchange_queue_head(ex, chunked, 0, false, NULL, 0) == 0)
        return 0;
    mf__exchange_fail(ex); /* nothing queued yet: a 500 */
    return MF_ENOMEM;
}

/* One piece of a streamed body, framed as a chunk, queued as one copy. */
static int mf__exchange_queue_chunk(mf_http_exchange_t *ex, bool chunked,
                                    const void *data, size_t len)
{
    char size[20];
    size_t n = mf__http_fmt_hex(size, len);
    memcpy(size + n, "\r\n", 2);
    mf_piece_t pieces[3] = {{size, n + 2}, {data, len}, {"\r\n", 2}};
    if (!chunked)
        return mf__http_conn_queue_copy(ex->conn, data, len);
    return mf__http_conn_queue_pieces(ex->conn, pieces, 3);
}

int mf_http_exchange_write(mf_http_exchange_t *ex, const void *data, size_t len)
{
    if (ex->closed_early || ex->state == MF_EX_DONE)
        return MF_ECLOSED;
    if (ex->state == MF_EX_FAILED)
        return MF_ENOMEM;
    bool chunked = ex->req.minor_version >= 1;
    int rc = 0;
    if (ex->state == MF_EX_ACTIVE) /* on failure a 500 is queued instead */
        rc = mf__exchange_start_stream(ex, chunked);
    if (rc == 0 && len &&
        mf__exchange_queue_chunk(ex, chunked, data, len) < 0) {
        mf__exchange_cut(ex);
        return MF_ENOMEM;
    }
    if (mf__http_conn_flush(ex->conn) < 0 || ex->closed_early)
        return rc ? rc : MF_ECLOSED;
    if (rc)
        return rc;
    return mf__http_conn_pending(ex->conn) > MF_HTTP_WRITE_HIGH_WATER ? 1 : 0;
}

static void mf__exchange_drain_now(mf_post_t *post)
{
    mf_http_exchange_t *ex = post->data;
    if (ex->on_drain && !ex->closed_early) {
        mf_http_exchange_drain_cb cb = ex->on_drain;
        ex->on_drain = NULL;
        cb(ex, ex->on_drain_arg);
    }
}

void mf_http_exchange_on_drain(mf_http_exchange_t *ex,
                               mf_http_exchange_drain_cb cb, void *arg)
{
    ex->on_drain = cb;
    ex->on_drain_arg = arg;
    /* Room already: call back on the next phase (never inside this call),
     * with one post at most in flight. */
    if (cb && mf__http_conn_pending(ex->conn) < MF_HTTP_WRITE_LOW_WATER &&
        !mf_list_linked(&ex->drain_post._link)) {
        mf_post_init(&ex->drain_post, mf__exchange_drain_now, ex);
        mf_loop_defer(ex->loop, &ex->drain_post);
    }
}
