/*
 * http_exchange.c — the handler's view of a request (mf_http_exchange_*)
 * and the serialisation of responses into the connection's output.
 *
 * Response heads are written straight into conn->out, coalescing with
 * what is already queued, so pipelined answers leave in one write. Bodies
 * up to MF_HTTP_COPY_BODY_MAX are copied behind their head; bigger ones are
 * written from their own memory (zero copy for _ref bodies).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http_server_int.h"

/* ---- small formatters -------------------------------------------------- */

static size_t mf__fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static size_t mf__fmt_hex(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* "HTTP/1.1 200 OK\r\n" */
static size_t mf__fmt_status_line(char *out, int status)
{
    const char *reason = mf_http_reason(status);
    size_t rlen = strlen(reason);
    if (status < 100 || status > 999)
        status = 500;
    memcpy(out, "HTTP/1.1 ", 9);
    out[9] = (char)('0' + status / 100);
    out[10] = (char)('0' + status / 10 % 10);
    out[11] = (char)('0' + status % 10);
    out[12] = ' ';
    memcpy(out + 13, reason, rlen);
    memcpy(out + 13 + rlen, "\r\n", 2);
    return 15 + rlen;
}

/* ---- response heads -------------------------------------------------- */

typedef struct mf_head_builder {
    char fixed[384];
    size_t len;
} mf_head_builder_t;

static void mf__head_put(mf_head_builder_t *h, const char *s, size_t n)
{
    memcpy(h->fixed + h->len, s, n);
    h->len += n;
}

/* Status line, Server, Date: the part every response shares. Fits in
 * h->fixed (reason phrases are short, the server line is capped). */
static void mf__head_common(mf_head_builder_t *h, mf_http_server_t *srv,
                            int status)
{
    size_t date_len;
    const char *date = mf__server_date(srv, &date_len);
    h->len = mf__fmt_status_line(h->fixed, status);
    mf__head_put(h, srv->server_line, srv->server_line_len);
    mf__head_put(h, date, date_len);
}

static bool mf__status_has_body(int status)
{
    return status >= 200 && status != 204 && status != 304;
}

/* Whether this response closes the connection, and its Connection line. */
static void mf__head_connection(mf_head_builder_t *h, mf_http_conn_t *conn,
                                const mf_http_request_t *req)
{
    if (conn->srv->stopping || conn->peer_closed)
        conn->keep_alive = false;
    if (!conn->keep_alive)
        mf__head_put(h, "Connection: close\r\n", 19);
    else if (req->minor_version == 0)
        mf__head_put(h, "Connection: keep-alive\r\n", 24);
}

/* Status line, common and managed headers, the handler's headers, and a
 * body small enough to copy: queued as one copy. */
static void mf__exchange_queue_head(mf_http_exchange_t *ex, bool chunked,
                                    uint64_t length, bool has_length,
                                    const char *body, size_t body_len)
{
    mf_http_conn_t *conn = ex->conn;
    mf_head_builder_t h;
    mf__head_common(&h, conn->srv, ex->status);
    if (chunked) {
        mf__head_put(&h, "Transfer-Encoding: chunked\r\n", 28);
    } else if (has_length) {
        mf__head_put(&h, "Content-Length: ", 16);
        h.len += mf__fmt_u64(h.fixed + h.len, length);
        mf__head_put(&h, "\r\n", 2);
    }
    mf__head_connection(&h, conn, &ex->req);
    mf_piece_t pieces[4 + MF_EX_STATIC_LINES];
    size_t n = 0;
    pieces[n++] = (mf_piece_t){h.fixed, h.len};
    pieces[n++] = (mf_piece_t){ex->resp_headers.data, ex->resp_headers.len};
    for (unsigned i = 0; i < ex->nstatic; i++)
        pieces[n++] = (mf_piece_t){ex->static_lines[i], ex->static_lens[i]};
    pieces[n++] = (mf_piece_t){"\r\n", 2};
    pieces[n++] = (mf_piece_t){body, body_len};
    mf__conn_queue_pieces(conn, pieces, n);
}

static void mf__exchange_queue_full(mf_http_exchange_t *ex)
{
    mf_http_conn_t *conn = ex->conn;
    const char *body = ex->body_ref ? ex->body_ref : ex->resp_body.data;
    size_t len = ex->body_ref ? ex->body_ref_len : ex->resp_body.len;
    bool has_body = mf__status_has_body(ex->status);
    bool head_only =
        ex->req.method_len == 4 && memcmp(ex->req.method, "HEAD", 4) == 0;
    bool copy = has_body && !head_only && len <= MF_HTTP_COPY_BODY_MAX;
    mf__exchange_queue_head(ex, false, len, has_body, copy ? body : NULL,
                            copy ? len : 0);
    if (!has_body || head_only || !len || copy)
        return;
    if (ex->body_ref)
        mf__conn_queue_ref(conn, body, len, NULL);
    else
        mf__conn_queue_ref(conn, body, len, &ex->resp_body);
}

/* ---- the exchange lifecycle --------------------------------------------- */

void mf__exchange_free(mf_http_exchange_t *ex)
{
    mf_loop_t *loop = ex->conn->loop;
    if (mf_list_linked(&ex->drain_post._link))
        mf_list_remove(&ex->drain_post._link); /* a drain call not run yet */
    mf__buf_release(loop, &ex->resp_headers);
    mf__buf_release(loop, &ex->resp_body);
    mf_loop_free(loop, ex, sizeof(*ex));
}

/* The response is fully queued: hand the connection back. */
static void mf__exchange_finish(mf_http_exchange_t *ex)
{
    mf_http_conn_t *conn = ex->conn;
    ex->state = MF_EX_DONE;
    if (ex->in_handler)
        return; /* mf__exchange_run_handler completes it */
    if (ex->closed_early) {
        mf__conn_maybe_release(conn);
        return;
    }
    mf__conn_response_queued(conn); /* may free ex */
}

void mf__exchange_run_handler(mf_http_exchange_t *ex)
{
    mf_http_server_t *srv = ex->conn->srv;
    ex->in_handler = true;
    srv->handler(ex, srv->user);
    ex->in_handler = false;
    if (ex->state == MF_EX_DONE) {
        mf__exchange_finish(ex);
        return;
    }
    if (ex->series) {
        mf_series_start(ex->series);
        return;
    }
    if (ex->held || ex->state == MF_EX_STREAM)
        return;
    mf_http_exchange_send(ex);
}

void mf__exchange_connection_lost(mf_http_exchange_t *ex)
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
        /* After on_close the handler holds no reference, unless a series
         * still runs: its end releases the exchange. */
        if (!ex->series)
            ex->state = MF_EX_DONE;
    }
}

static void mf__exchange_series_done(mf_series_t *series)
{
    mf_http_exchange_t *ex = mf_series_callback_arg(series);
    ex->series = NULL; /* the series is freed after this callback */
    if (ex->state != MF_EX_DONE && !ex->held)
        mf_http_exchange_send(ex);
    else if (ex->closed_early && ex->state == MF_EX_DONE)
        mf__conn_maybe_release(ex->conn);
}

/* ---- public API ------------------------------------------------------------
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
    return &ex->conn->peer;
}

mf_loop_t *mf_http_exchange_loop(const mf_http_exchange_t *ex)
{
    return ex->conn->loop;
}

mf_http_server_t *mf_http_exchange_server(const mf_http_exchange_t *ex)
{
    return ex->conn->srv;
}

void mf_http_exchange_set_status(mf_http_exchange_t *ex, int status)
{
    ex->status = status >= 100 && status <= 999 ? status : 500;
}

/* Headers the server computes itself; a handler's copy would contradict. */
static bool mf__header_is_managed(const char *name, size_t len)
{
    static const char *const managed[] = {"content-length", "connection",
                                          "transfer-encoding", "date"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(managed); i++)
        if (strlen(managed[i]) == len &&
            strncasecmp(managed[i], name, len) == 0)
            return true;
    return false;
}

/* No CR/LF may reach the wire from a header (response splitting). */
static bool mf__header_text_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return false;
    return true;
}

void mf_http_exchange_add_header(mf_http_exchange_t *ex, const char *name,
                                 size_t name_len, const char *value,
                                 size_t value_len)
{
    mf_loop_t *loop = ex->conn->loop;
    if (!name_len || mf__header_is_managed(name, name_len) ||
        !mf__header_text_ok(name, name_len) ||
        !mf__header_text_ok(value, value_len))
        return;
    mf__buf_append(loop, &ex->resp_headers, name, name_len);
    mf__buf_append(loop, &ex->resp_headers, ": ", 2);
    mf__buf_append(loop, &ex->resp_headers, value, value_len);
    mf__buf_append(loop, &ex->resp_headers, "\r\n", 2);
}

void mf_http_exchange_add_header_line(mf_http_exchange_t *ex, const char *line,
                                      size_t len)
{
    mf__buf_append(ex->conn->loop, &ex->resp_headers, line, len);
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
        mf__buf_append(ex->conn->loop, &ex->resp_body, ref, ex->body_ref_len);
    }
    mf__buf_append(ex->conn->loop, &ex->resp_body, data, len);
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
        ex->series = mf_series_create(ex->conn->loop, mf__exchange_series_done);
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
    if (!ex->closed_early) {
        if (ex->state == MF_EX_STREAM) {
            if (ex->req.minor_version >= 1)
                mf__conn_queue_copy(ex->conn, "0\r\n\r\n", 5);
        } else {
            mf__exchange_queue_full(ex);
        }
    }
    ex->held = false;
    mf__exchange_finish(ex);
}

int mf_http_exchange_write(mf_http_exchange_t *ex, const void *data, size_t len)
{
    mf_http_conn_t *conn = ex->conn;
    if (ex->closed_early || conn->phase == MF_CONN_CLOSED)
        return MF_ECLOSED;
    bool chunked = ex->req.minor_version >= 1;
    if (ex->state != MF_EX_STREAM) {
        ex->state = MF_EX_STREAM;
        if (!chunked)
            conn->keep_alive = false; /* HTTP/1.0: the close ends the body */
        mf__exchange_queue_head(ex, chunked, 0, false, NULL, 0);
    }
    if (len) {
        char size[20];
        size_t n = mf__fmt_hex(size, len);
        memcpy(size + n, "\r\n", 2);
        if (chunked)
            mf__conn_queue_copy(conn, size, n + 2);
        mf__conn_queue_copy(conn, data, len);
        if (chunked)
            mf__conn_queue_copy(conn, "\r\n", 2);
    }
    if (mf__conn_flush(conn) < 0 || ex->closed_early)
        return MF_ECLOSED;
    return mf__conn_pending(conn) > MF_HTTP_WRITE_HIGH_WATER ? 1 : 0;
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
    if (cb && mf__conn_pending(ex->conn) < MF_HTTP_WRITE_LOW_WATER &&
        !mf_list_linked(&ex->drain_post._link)) {
        mf_post_init(&ex->drain_post, mf__exchange_drain_now, ex);
        mf_loop_defer(ex->conn->loop, &ex->drain_post);
    }
}

/* ---- error answers ----------------------------------------------------- */

void mf__send_error(mf_http_conn_t *conn, int status)
{
    char body[64];
    int blen =
        snprintf(body, sizeof body, "%d %s\n", status, mf_http_reason(status));
    mf_head_builder_t h;
    mf__head_common(&h, conn->srv, status);
    mf__head_put(&h, "Content-Type: text/plain\r\nContent-Length: ", 42);
    h.len += mf__fmt_u64(h.fixed + h.len, (uint64_t)blen);
    mf__head_put(&h, "\r\nConnection: close\r\n\r\n", 23);
    mf__conn_queue_copy(conn, h.fixed, h.len);
    mf__conn_queue_copy(conn, body, (size_t)blen);
}
