/*
 * http_client.c — the http task: URL, request serialisation, response
 * reading (Content-Length, chunked, until close), timeouts, redirects and
 * retries. Relaying a response to a server exchange (proxying) is
 * http_forward.c's, reached through the ops it set in t->relay.
 *
 * One attempt = acquire a connection (http_pool.c, which calls back through
 * the task's mf_http_conn_user_ops_t) → write the request →
 * read the head → read the body → release the connection (reusable when the
 * response was complete and keep-alive) → complete, or go again for a
 * redirect or a safe retry. The task's own timer covers the connect phase
 * (including a wait for a pool slot) and then the response.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_client_int.h"
#include "moonflow/url.h"
#include "net/net.h"

static void mf__client_task_attempt(mf_http_client_task_t *t);
static void mf__client_task_on_io(mf_http_client_task_t *t, unsigned events);
static void mf__client_task_send_h2(mf_http_client_task_t *t);
static void mf__client_task_h2_framing(mf_http_client_task_t *t);

void mf_http_client_opts_init(mf_http_client_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max_redirects = 0;
    o->max_retries = 1;
    o->connect_timeout_ms = 10000;
    o->response_timeout_ms = 60000;
    o->max_response_body = 64u << 20;
    o->tls_verify = true;
}

/* ---- URL ------------------------------------------------------------------
 */

/* "http[s]://host[:port][/path][?query]"; host may be "[v6]". Fills *o
 * and the offset of the path; *o is garbage on failure. */
static int mf__client_url_parse(const char *url, mf_http_origin_t *o,
                                size_t *path_off)
{
    size_t skip;
    if (strncasecmp(url, "http://", 7) == 0) {
        o->tls = false;
        skip = 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        o->tls = true;
        skip = 8;
    } else {
        return MF_EINVAL;
    }
    const char *auth = url + skip;
    size_t alen = strcspn(auth, "/?#");
    o->port = o->tls ? 443 : 80;
    if (mf__net_parse_hostport(auth, alen, o->host, &o->port) < 0 ||
        strchr(o->host, '@')) /* userinfo is not taken */
        return MF_EINVAL;
    *path_off = skip + alen;
    return 0;
}

static bool mf__same_origin(const mf_http_origin_t *a,
                            const mf_http_origin_t *b)
{
    return a->tls == b->tls && a->port == b->port &&
           strcasecmp(a->host, b->host) == 0;
}

/* Appends to one of the task's buffers. A refused allocation is not
 * ignored: the task fails with MF_ENOMEM at its next step (never a cut
 * request on the wire). */
static void mf__client_task_keep(mf_http_client_task_t *t, mf_buf_t *buf,
                                 const void *data, size_t len)
{
    if (t->out_of_memory)
        return;
    if (mf__buf_append(t->base._loop, buf, data, len) < 0)
        t->out_of_memory = true;
}

static void mf__client_task_set_url(mf_http_client_task_t *t, const char *url,
                                    size_t len)
{
    t->url.len = 0;
    mf__client_task_keep(t, &t->url, url, len);
    mf__client_task_keep(t, &t->url, "", 1);
    if (!t->out_of_memory)
        t->url.len--; /* keep the NUL outside len */
}

/* ---- request ------------------------------------------------------------- */

static void mf__client_task_put(mf_http_client_task_t *t, const char *s,
                                size_t n)
{
    mf__client_task_keep(t, &t->out, s, n);
}

static void mf__client_task_puts(mf_http_client_task_t *t, const char *s)
{
    mf__client_task_put(t, s, strlen(s));
}

static bool mf__client_task_method_is(const mf_http_client_task_t *t,
                                      const char *name)
{
    size_t n = strlen(name);
    return t->method.len == n && memcmp(t->method.data, name, n) == 0;
}

/* Whether the request header line at p (len bytes with its CRLF) is name. */
static bool mf__header_line_is(const char *p, size_t len, const char *name,
                               size_t name_len)
{
    return len > name_len && strncasecmp(p, name, name_len) == 0 &&
           p[name_len] == ':';
}

/* The length of the header line at p, its LF included. */
static size_t mf__header_line_len(const char *p, const char *end)
{
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    return lf ? (size_t)(lf + 1 - p) : (size_t)(end - p);
}

static bool mf__client_task_has_header(const mf_http_client_task_t *t,
                                       const char *name)
{
    if (!t->headers.len)
        return false;
    size_t n = strlen(name);
    const char *p = t->headers.data, *end = p + t->headers.len;
    for (size_t len; p < end; p += len) {
        len = mf__header_line_len(p, end);
        if (mf__header_line_is(p, len, name, n))
            return true;
    }
    return false;
}

/* Removes every request header line named name (any case). */
static void mf__client_task_drop_header(mf_http_client_task_t *t,
                                        const char *name)
{
    if (!t->headers.len)
        return;
    size_t n = strlen(name);
    char *p = t->headers.data, *end = p + t->headers.len, *kept = p;
    for (size_t len; p < end; p += len) {
        len = mf__header_line_len(p, end);
        if (!mf__header_line_is(p, len, name, n)) {
            memmove(kept, p, len);
            kept += len;
        }
    }
    t->headers.len = (size_t)(kept - t->headers.data);
}

/* The framing of a body from a source, and where its pieces start. */
static void mf__client_task_frame_source(mf_http_client_task_t *t)
{
    char num[48];
    if (t->source_len >= 0) {
        snprintf(num, sizeof num, "Content-Length: %lld\r\n\r\n",
                 (long long)t->source_len);
        mf__client_task_puts(t, num);
    } else {
        mf__client_task_puts(t, "Transfer-Encoding: chunked\r\n\r\n");
    }
    t->source_sent = 0;
    t->source_eof = t->source_len == 0;
    t->source_waiting = false;
}

static void mf__client_task_build_request(mf_http_client_task_t *t)
{
    const char *path = t->url.data + t->path_off;
    size_t plen = strcspn(path, "#");
    char num[32];
    t->out.len = 0;
    t->out_done = 0;
    mf__client_task_put(t, t->method.data, t->method.len);
    mf__client_task_put(t, " ", 1);
    if (plen == 0 || path[0] == '?')
        mf__client_task_put(t, "/", 1);
    mf__client_task_put(t, path, plen);
    mf__client_task_puts(t, " HTTP/1.1\r\n");
    if (!mf__client_task_has_header(t, "host")) {
        bool v6 = strchr(t->origin.host, ':') != NULL;
        mf__client_task_puts(t, v6 ? "Host: [" : "Host: ");
        mf__client_task_puts(t, t->origin.host);
        if (v6)
            mf__client_task_puts(t, "]");
        if (t->origin.port != (t->origin.tls ? 443 : 80)) {
            snprintf(num, sizeof num, ":%u", t->origin.port);
            mf__client_task_puts(t, num);
        }
        mf__client_task_puts(t, "\r\n");
    }
    mf__client_task_put(t, t->headers.data, t->headers.len);
    if (t->source) {
        mf__client_task_frame_source(t);
        return;
    }
    /* Bodiless GET/HEAD send no length; everything else says it. */
    if (t->body.len || !(mf__client_task_method_is(t, "GET") ||
                         mf__client_task_method_is(t, "HEAD"))) {
        snprintf(num, sizeof num, "Content-Length: %zu\r\n", t->body.len);
        mf__client_task_puts(t, num);
    }
    mf__client_task_puts(t, "\r\n");
    mf__client_task_put(t, t->body.data, t->body.len);
}

/* Stamps *at with the time, for a traced task only (mf_task_http_timings):
 * an untraced one reads no clock. */
static void mf__client_task_mark(const mf_http_client_task_t *t, uint64_t *at)
{
    if (MF_LIKELY(mf_task_trace(&t->base) == NULL))
        return;
    *at = mf_monotonic_ns();
}

void mf_task_http_timings(const mf_task_t *task, mf_http_timings_t *out)
{
    *out = ((const mf_http_client_task_t *)task)->timings;
}

static void mf__client_task_arm(mf_http_client_task_t *t, uint32_t ms)
{
    if (ms)
        mf_timer_start(t->base._loop, &t->timer, ms);
    else
        mf_timer_stop(t->base._loop, &t->timer);
}

void mf__client_task_idle(mf_http_client_task_t *t, bool waiting)
{
    if (t->idle_ms && t->phase != MF_CT_DONE)
        mf__client_task_arm(t, waiting ? 0 : t->idle_ms);
}

/* Room in `out` for a piece and its chunk framing: the piece goes at
 * MF__PIECE_AT, its chunk-size line just before it. */
#define MF__PIECE_AT 16

/* The next piece of a source's body into `out`: 1 there is one (or the
 * end's framing), 0 the source has none yet (it will call
 * mf_task_http_body_ready), -1 the task failed. */
static int mf__client_task_take_piece(mf_http_client_task_t *t)
{
    size_t want = MF_HTTP_UPLOAD_PIECE;
    if (t->source_len >= 0 && (uint64_t)t->source_len - t->source_sent < want)
        want = (size_t)((uint64_t)t->source_len - t->source_sent);
    t->out.len = t->out_done = 0;
    if (t->out.cap < MF__PIECE_AT + MF_HTTP_UPLOAD_PIECE + 2 &&
        mf__buf_reserve(t->base._loop, &t->out,
                        MF__PIECE_AT + MF_HTTP_UPLOAD_PIECE + 2) < 0) {
        mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return -1;
    }
    ssize_t n = t->source(t->source_arg, t->out.data + MF__PIECE_AT, want);
    if (n == MF_EAGAIN) {
        t->source_waiting = true;
        mf__client_task_idle(t, true); /* the source is slow, not the server */
        return 0;
    }
    if (n < 0 || (n == 0 && t->source_len >= 0)) { /* ended short */
        mf__client_task_finish(t, MF_STATE_SYS_ERROR,
                               n < 0 ? (int)n : MF_ECLOSED);
        return -1;
    }
    t->source_taken = true;
    t->source_sent += (size_t)n;
    if (t->source_len >= 0) { /* the bytes as they are */
        t->out_done = MF__PIECE_AT;
        t->out.len = MF__PIECE_AT + (size_t)n;
        t->source_eof = t->source_sent == (uint64_t)t->source_len;
        return 1;
    }
    char size[MF__PIECE_AT];
    int hl = snprintf(size, sizeof size, "%zx\r\n", (size_t)n);
    memcpy(t->out.data + MF__PIECE_AT - hl, size, (size_t)hl);
    t->out_done = MF__PIECE_AT - (size_t)hl;
    t->out.len = MF__PIECE_AT + (size_t)n;
    memcpy(t->out.data + t->out.len, "\r\n", 2); /* "0\r\n\r\n" at the end */
    t->out.len += 2;
    t->source_eof = n == 0;
    return 1;
}

/* The server stopped taking a streamed body (it closed, or reset the
 * connection): it may have answered already (a 413, a 401), which is
 * the task's answer then; else the task fails with error. */
static void mf__client_task_answered_early(mf_http_client_task_t *t, int error)
{
    t->phase = MF_CT_HEAD; /* the connection is not reused: !source_eof */
    mf__client_task_read(t);
    if (t->phase == MF_CT_HEAD && !t->got_bytes)
        mf__client_task_finish(t, MF_STATE_SYS_ERROR, error);
}

static void mf__client_task_write(mf_http_client_task_t *t)
{
    mf_http_client_conn_t *conn = t->user.conn;
    for (;;) {
        while (t->out_done < t->out.len) {
            struct iovec iov = {t->out.data + t->out_done,
                                t->out.len - t->out_done};
            ssize_t w = mf__sock_writev(conn->io.fd, conn->ssl, &iov, 1);
            if (w == MF_EAGAIN)
                return;
            if (w < 0 && MF_UNLIKELY(t->source_taken)) {
                mf__client_task_answered_early(t, (int)w);
                return;
            }
            if (w < 0) {
                /* A reused connection the server had already closed:
                 * retry. */
                mf__client_task_finish(t, MF_STATE_SYS_ERROR, (int)w);
                return;
            }
            t->out_done += (size_t)w;
        }
        if (MF_LIKELY(!t->source) || t->source_eof)
            break;
        if (t->source_waiting) /* until mf_task_http_body_ready */
            return;
        if (mf__client_task_take_piece(t) <= 0)
            return;
        mf__client_task_idle(t, false);
    }
    t->phase = MF_CT_HEAD;
    mf__client_task_mark(t, &t->timings.sent);
}

static void mf__client_task_send(mf_http_client_task_t *t)
{
    t->phase = MF_CT_SENDING;
    mf__client_task_mark(t, &t->timings.sending);
    t->timings.sent = t->timings.first_byte = 0; /* a retry starts over */
    t->in.len = 0;
    t->scanned = 0;
    t->got_bytes = false;
    if (t->user.h2) {
        mf__client_task_send_h2(t);
        return;
    }
    mf__client_task_build_request(t);
    if (t->out_of_memory) {
        mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    mf__client_task_arm(t,
                        t->idle_ms ? t->idle_ms : t->opts.response_timeout_ms);
    mf__client_task_write(t);
    if (t->phase == MF_CT_HEAD)
        mf__client_task_on_io(t,
                              MF_IO_READ); /* the answer may be there already */
}

/* ---- response --------------------------------------------------------- */

static bool mf__client_task_is_head(const mf_http_client_task_t *t)
{
    return mf__client_task_method_is(t, "HEAD");
}

static int mf__client_task_parse_head(mf_http_client_task_t *t)
{
    t->resp.headers = t->resp_headers;
    t->resp.num_headers = MF_HTTP_CLIENT_MAX_HEADERS;
    mf_http_limits_t limits = {65536, 65536, MF_HTTP_CLIENT_MAX_HEADERS};
    return mf_http_parse_response(t->in.data, t->in.len, &t->resp,
                                  mf__client_task_is_head(t), &limits,
                                  &t->scanned);
}

/* The response is larger than the task accepts. */
static void mf__client_task_too_long(mf_http_client_task_t *t)
{
    mf__client_task_finish(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
}

/* Decodes the chunked body in place; true when it is complete. Bytes after
 * its end stay in t->in, past head_len + body_len. */
static bool mf__client_task_chunked_progress(mf_http_client_task_t *t)
{
    size_t start = t->head_len + t->body_len;
    size_t len = t->in.len - start;
    ssize_t rest =
        mf_http_chunked_decode(&t->chunked, t->in.data + start, &len);
    t->body_len += len;
    t->in.len = t->head_len + t->body_len + (rest > 0 ? (size_t)rest : 0);
    if (rest == MF_HTTP_ERROR && t->chunked.error_status == 413)
        mf__client_task_too_long(t);
    else if (rest == MF_HTTP_ERROR)
        mf__client_task_finish(t, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
    return rest >= 0;
}

/* Body bytes after the head: returns true when the body is complete. Bytes
 * after the body stay in t->in, past head_len + body_len: they are not this
 * response's, and their presence forbids reusing the connection. */
static bool mf__client_task_body_progress(mf_http_client_task_t *t, bool eof)
{
    bool complete;
    if (t->resp.body == MF_HTTP_BODY_NONE)
        return true;
    if (t->resp.body == MF_HTTP_BODY_CHUNKED) {
        complete = mf__client_task_chunked_progress(t);
    } else if (t->resp.body == MF_HTTP_BODY_UNTIL_CLOSE) {
        t->body_len = t->in.len - t->head_len;
        complete = eof;
    } else {
        /* body_seen: bytes already relayed to an exchange and dropped. */
        uint64_t want = t->resp.content_length - t->body_seen;
        t->body_len = t->in.len - t->head_len;
        complete = t->body_len >= want;
        if (complete)
            t->body_len = (size_t)want;
    }
    if (t->phase == MF_CT_BODY &&
        t->body_seen + t->body_len > t->opts.max_response_body) {
        mf__client_task_too_long(t);
        return false;
    }
    return complete;
}

/* Parses what has arrived; finishes the attempt when complete. */
static void mf__client_task_process(mf_http_client_task_t *t, bool eof)
{
    if (t->phase == MF_CT_HEAD) {
        int rc = mf__client_task_parse_head(t);
        if (rc == MF_HTTP_INCOMPLETE) {
            if (eof) /* a cut head: t->got_bytes forbids a retry */
                mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ECLOSED);
            return;
        }
        if (rc == MF_HTTP_ERROR) {
            mf__client_task_finish(t, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
            return;
        }
        if (t->resp.status < 200 && t->resp.status != 101) {
            /* 1xx interim answer: drop it and read the real one. */
            memmove(t->in.data, t->in.data + rc, t->in.len - (size_t)rc);
            t->in.len -= (size_t)rc;
            t->scanned = 0;
            mf__client_task_process(t, eof);
            return;
        }
        t->head_len = (size_t)rc;
        t->body_len = 0;
        t->phase = MF_CT_BODY;
        mf__client_task_h2_framing(t);
        if (t->resp.body == MF_HTTP_BODY_CHUNKED)
            mf_http_chunked_init(&t->chunked, t->opts.max_response_body);
        if (t->resp.body == MF_HTTP_BODY_LENGTH &&
            t->resp.content_length > t->opts.max_response_body) {
            mf__client_task_too_long(t);
            return;
        }
    }
    bool complete = mf__client_task_body_progress(t, eof);
    if (t->phase != MF_CT_BODY)
        return; /* failed inside */
    if (t->relay)
        t->relay->relay(t, complete);
    if (t->phase != MF_CT_BODY)
        return;
    if (complete)
        mf__client_task_finish(t, MF_STATE_SUCCESS, 0);
    else if (eof)
        mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ECLOSED);
}

/* The parsed head points into t->in: when a growing body moves the
 * buffer, parse the head again where it now is (the bytes are the same,
 * so is the result), or header lookups would read freed memory. */
static void mf__client_task_head_moved(mf_http_client_task_t *t)
{
    t->scanned = 0;
    mf__client_task_parse_head(t);
    t->scanned = 0;
    mf__client_task_h2_framing(t);
}

void mf__client_task_read(mf_http_client_task_t *t)
{
    while ((t->phase == MF_CT_HEAD || t->phase == MF_CT_BODY) && !t->paused) {
        const char *before = t->in.data;
        if (t->in.cap - t->in.len < 4096 &&
            mf__buf_reserve(t->base._loop, &t->in, 16384) < 0) {
            mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
            return;
        }
        if (t->in.data != before && t->phase == MF_CT_BODY)
            mf__client_task_head_moved(t);
        if (t->in.len > 65536 && /* a head, then more than the body */
            t->in.len - 65536 > t->opts.max_response_body) {
            mf__client_task_too_long(t);
            return;
        }
        mf_http_client_conn_t *conn = t->user.conn;
        ssize_t n =
            mf__sock_read(conn->io.fd, conn->ssl, t->in.data + t->in.len,
                          t->in.cap - t->in.len);
        if (n == MF_EAGAIN)
            return;
        if (n < 0) {
            mf__client_task_finish(
                t, n == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR,
                (int)n);
            return;
        }
        if (n > 0) {
            if (t->idle_ms)
                mf__client_task_arm(t, t->idle_ms);
            if (!t->got_bytes)
                mf__client_task_mark(t, &t->timings.first_byte);
            t->got_bytes = true;
            t->in.len += (size_t)n;
        }
        mf__client_task_process(t, n == 0);
        if (n == 0)
            return;
    }
}

static void mf__client_task_on_io(mf_http_client_task_t *t, unsigned events)
{
    (void)events; /* a write and a read are tried on either edge */
    switch (t->phase) {
    case MF_CT_SENDING:
        mf__client_task_write(t);
        if (t->phase == MF_CT_HEAD)
            mf__client_task_read(t); /* the answer may follow at once */
        return;
    case MF_CT_HEAD:
    case MF_CT_BODY:
        mf__client_task_read(t);
        return;
    default:
        return;
    }
}

/* ---- finishing: reuse, redirects, retries ------------------------------- */

static bool mf__method_idempotent(const mf_http_client_task_t *t)
{
    static const char *const safe[] = {"GET",    "HEAD",    "PUT",
                                       "DELETE", "OPTIONS", "TRACE"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(safe); i++)
        if (mf__client_task_method_is(t, safe[i]))
            return true;
    return false;
}

static const mf_http_header_t *
mf__client_task_find(const mf_http_client_task_t *t, const char *name)
{
    return mf_http_find_header(t->resp.headers, t->resp.num_headers, name);
}

/* Resolves a Location against the current URL into buf: its length, or -1
 * when it does not fit. */
static int mf__client_task_resolve(const mf_http_client_task_t *t,
                                   const char *loc, size_t len, char *buf,
                                   size_t size)
{
    int n;
    if (len >= 7 && (strncasecmp(loc, "http://", 7) == 0 ||
                     (len >= 8 && strncasecmp(loc, "https://", 8) == 0)))
        n = snprintf(buf, size, "%.*s", (int)len, loc);
    else if (len >= 2 && loc[0] == '/' && loc[1] == '/')
        n = snprintf(buf, size, "%s:%.*s", t->origin.tls ? "https" : "http",
                     (int)len, loc);
    else if (len >= 1 && loc[0] == '/')
        n = snprintf(buf, size, "%.*s%.*s", (int)t->path_off, t->url.data,
                     (int)len, loc);
    else {
        const char *path = t->url.data + t->path_off;
        size_t dir = strcspn(path, "?#");
        while (dir > 0 && path[dir - 1] != '/')
            dir--;
        n = snprintf(buf, size, "%.*s%s%.*s", (int)(t->path_off + dir),
                     t->url.data, dir ? "" : "/", (int)len, loc);
    }
    return n > 0 && (size_t)n < size ? n : -1;
}

/* The request's credentials, and its Host, belong to the origin they were
 * given for: never sent to another (curl does the same since
 * CVE-2018-1000007). */
static void mf__client_task_drop_credentials(mf_http_client_task_t *t)
{
    static const char *const names[] = {"authorization", "cookie",
                                        "proxy-authorization", "host"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++)
        mf__client_task_drop_header(t, names[i]);
}

/* 301/302 after POST and 303 after anything but HEAD go on as GET (as
 * browsers and curl do); a 303 after HEAD stays HEAD. */
static bool mf__redirect_makes_get(const mf_http_client_task_t *t, int status)
{
    if (status == 303)
        return !mf__client_task_is_head(t);
    return (status == 301 || status == 302) &&
           mf__client_task_method_is(t, "POST");
}

/* A GET carries no body, nor the headers that described it (the Fetch
 * standard's request-body-header names, and the framing). */
static void mf__client_task_become_get(mf_http_client_task_t *t)
{
    static const char *const names[] = {
        "content-type",     "content-length",   "transfer-encoding",
        "content-encoding", "content-language", "content-location"};
    t->method.len = 0;
    mf__client_task_keep(t, &t->method, "GET", 3);
    t->body.len = 0;
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++)
        mf__client_task_drop_header(t, names[i]);
}

static bool mf__is_redirect(int status)
{
    return status == 301 || status == 302 || status == 303 || status == 307 ||
           status == 308;
}

/* What a successful answer means: 0 it is the task's result, 1 the task
 * goes on to its Location (t now holds the next request), or a negative
 * MF_E* code the task fails with. With max_redirects 0 nothing is
 * followed; a Location that cannot be used leaves the 3xx as the result. */
static int mf__client_task_redirect(mf_http_client_task_t *t)
{
    int status = t->resp.status;
    if (t->forward || t->source || t->opts.max_redirects <= 0 ||
        !mf__is_redirect(status))
        return 0; /* a body from a source cannot be sent again */
    const mf_http_header_t *loc = mf__client_task_find(t, "location");
    if (!loc)
        return 0;
    if (t->redirects >= t->opts.max_redirects)
        return MF_ETOOMANYREDIRECTS;
    char url[4096];
    mf_http_origin_t to;
    size_t path_off;
    int n =
        mf__client_task_resolve(t, loc->value, loc->value_len, url, sizeof url);
    if (n < 0 || mf__client_url_parse(url, &to, &path_off) < 0)
        return 0;
    if (t->origin.tls && !to.tls && !t->opts.allow_insecure_redirects)
        return MF_EINSECUREREDIRECT;
    if (!mf__same_origin(&t->origin, &to))
        mf__client_task_drop_credentials(t);
    if (mf__redirect_makes_get(t, status))
        mf__client_task_become_get(t);
    t->origin = to;
    t->path_off = path_off;
    mf__client_task_set_url(t, url, (size_t)n); /* out of memory: the next
                                                   attempt fails with it */
    t->redirects++;
    return 1;
}

/* An upstream group's request goes to another server after a failure of
 * the transport (not of the answer's content), when nothing was relayed to
 * a client yet and the request is idempotent or cannot have been sent. */
static bool mf__client_task_may_try_another(mf_http_client_task_t *t, int state)
{
    if (state != MF_STATE_SYS_ERROR && state != MF_STATE_TIMEOUT &&
        state != MF_STATE_TLS_ERROR && state != MF_STATE_DNS_ERROR &&
        state != MF_STATE_PROTOCOL_ERROR)
        return false;
    if (t->relayed || t->source_taken) /* a streamed body is gone */
        return false;
    bool unsent = t->phase == MF_CT_OPENING || t->phase == MF_CT_WAITING;
    if (!unsent && !mf__method_idempotent(t) && !t->opts.retry_non_idempotent)
        return false;
    return mf_upstream_may_retry(&t->ups);
}

/* Whether a failed attempt may go again: only if the request cannot have
 * been processed (nothing answered) and repeating it is harmless. */
static bool mf__client_task_may_retry(mf_http_client_task_t *t, int state)
{
    if (t->ups.up)
        return mf__client_task_may_try_another(t, state);
    if (state != MF_STATE_SYS_ERROR || t->got_bytes || t->source_taken)
        return false;
    if (t->retries >= t->opts.max_retries)
        return false;
    if (t->forward) /* its client's request: only one that never left */
        return t->phase == MF_CT_OPENING && mf__method_idempotent(t);
    return mf__method_idempotent(t) || t->phase == MF_CT_OPENING;
}

/* A forward learns the task's end (it may answer its exchange). */
static void mf__client_task_settle(mf_http_client_task_t *t, int state)
{
    if (t->relay)
        t->relay->settle(t, state);
}

/* The task's end: settles a forward, then completes. */
static void mf__client_task_complete(mf_http_client_task_t *t, int state,
                                     int error)
{
    t->phase = MF_CT_DONE;
    mf_timer_stop(t->base._loop, &t->timer);
    mf__client_task_settle(t, state);
    mf_task_complete(&t->base, state, error);
}

/* Whether bytes followed the response in t->in: they belong to no request,
 * so the connection that carried them must not serve another. */
static bool mf__client_task_surplus(const mf_http_client_task_t *t)
{
    return t->in.len != t->head_len + t->body_len;
}

/* What the attempt teaches its upstream server: a success and its time,
 * a failure of the transport, or nothing (a stale keep-alive connection,
 * a cancel, an answer the request refused). */
static void mf__client_task_upstream_done(mf_http_client_task_t *t, int state,
                                          int error, bool stale)
{
    if (stale) { /* the same server again, on a fresh connection */
        t->ups_again = true;
        return;
    }
    if (state == MF_STATE_SUCCESS)
        mf_upstream_done(&t->ups, true, mf_monotonic_ns() - t->ups.attempt_ns);
    else if (state == MF_STATE_CANCELED || state == MF_STATE_TASK_ERROR)
        mf_upstream_abandon(&t->ups);
    else
        mf_upstream_done(&t->ups, false, 0);
    if (state != MF_STATE_SUCCESS) {
        t->last_state = state;
        t->last_error = error;
    }
}

void mf__client_task_finish(mf_http_client_task_t *t, int state, int error)
{
    bool ok = state == MF_STATE_SUCCESS;
    bool reuse = ok && t->resp.keep_alive && !mf__client_task_surplus(t) &&
                 (!t->source || t->source_eof); /* a whole request */
    const mf_http_client_conn_t *conn = t->user.conn;
    /* HTTP/2: only a GOAWAY's refusal is stale (that connection takes no
     * more); a stream refused on a live one counts as a retry. */
    bool used = conn && (conn->h2 ? t->user.h2_goaway : conn->requests > 0);
    bool stale = !ok && used && !t->got_bytes && !t->source_taken &&
                 mf__method_idempotent(t);
    mf__http_pool_release(&t->user, reuse);
    if (t->ups.up)
        mf__client_task_upstream_done(t, state, error, stale);
    int redirect = ok ? mf__client_task_redirect(t) : 0;
    if (redirect < 0) {
        mf__client_task_complete(t, MF_STATE_TASK_ERROR, redirect);
        return;
    }
    if (redirect > 0) {
        mf__client_task_attempt(t);
        return;
    }
    if (stale || (!ok && mf__client_task_may_retry(t, state))) {
        if (!stale)
            t->retries++;
        mf__client_task_attempt(t);
        return;
    }
    mf__client_task_complete(t, state, error);
}

/* ---- what the connection tells the task -------------------------------- */

static mf_http_client_task_t *mf__client_task_of(mf_http_conn_user_t *u)
{
    return mf_container_of(u, mf_http_client_task_t, user);
}

/* The steps of opening, when a new connection was opened for the task. */
static void mf__client_task_opened_at(mf_http_client_task_t *t,
                                      const mf_dial_times_t *times)
{
    if (!times || !t->user.traced)
        return;
    /* Only the steps that happened: a failed dial stamps some. */
    if (times->resolved)
        t->timings.resolved = times->resolved;
    if (times->connected)
        t->timings.connected = times->connected;
    if (times->opened)
        t->timings.opened = times->opened;
}

static void mf__client_task_ready(mf_http_conn_user_t *u,
                                  const mf_dial_times_t *times)
{
    mf_http_client_task_t *t = mf__client_task_of(u);
    mf__client_task_opened_at(t, times);
    mf__client_task_send(t);
}

/* What a failed open is about: the origin ("https://host:port"), and for
 * TLS the certificate check's verdict ("18: self-signed certificate"). */
static void mf__client_task_explain_open(mf_http_client_task_t *t, int state,
                                         long verify)
{
    const mf_http_origin_t *o = &t->origin;
    const char *host = t->ups.up ? t->ups.host : o->host;
    unsigned port = t->ups.up ? t->ups.port : o->port;
    bool v6 = strchr(host, ':') != NULL;
    int n = snprintf(t->why, sizeof t->why, "%s://%s%s%s:%u",
                     o->tls ? "https" : "http", v6 ? "[" : "", host,
                     v6 ? "]" : "", port);
    if (t->ups.up && n > 0 && (size_t)n < sizeof t->why)
        n += snprintf(t->why + n, sizeof t->why - (size_t)n, " (upstream '%s')",
                      mf_upstream_name(t->ups.up));
    if (state == MF_STATE_TLS_ERROR && verify != X509_V_OK && n > 0 &&
        (size_t)n < sizeof t->why)
        snprintf(t->why + n, sizeof t->why - (size_t)n, ": %ld: %s", verify,
                 X509_verify_cert_error_string(verify));
}

static void mf__client_task_open_failed(mf_http_conn_user_t *u,
                                        const mf_dial_times_t *times, int state,
                                        int error)
{
    mf_http_client_task_t *t = mf__client_task_of(u);
    mf__client_task_opened_at(t, times);
    mf__client_task_explain_open(t, state, u->verify_result);
    t->phase = MF_CT_OPENING; /* nothing was sent: a retry is safe */
    mf__client_task_finish(t, state, error);
}

static void mf__client_task_event(mf_http_conn_user_t *u, unsigned events)
{
    mf__client_task_on_io(mf__client_task_of(u), events);
}

/* ---- HTTP/2: the same task on a stream (http2_client.c) ------------------ */

/* HTTP/2 ends a body with its stream, never by its fields (nghttp2 holds
 * the DATA to the Content-Length); the connection is not the task's to
 * keep or close. */
static void mf__client_task_h2_framing(mf_http_client_task_t *t)
{
    t->version = t->user.h2 ? 20 : 10 + t->resp.minor_version;
    if (!t->user.h2)
        return;
    if (t->resp.body != MF_HTTP_BODY_NONE)
        t->resp.body = MF_HTTP_BODY_UNTIL_CLOSE;
    t->resp.keep_alive = true;
}

/* "host[:port]" for :authority, the way Host is written. */
static void mf__client_task_authority(const mf_http_client_task_t *t, char *buf,
                                      size_t size)
{
    const mf_http_origin_t *o = &t->origin;
    bool v6 = strchr(o->host, ':') != NULL;
    int n =
        snprintf(buf, size, "%s%s%s", v6 ? "[" : "", o->host, v6 ? "]" : "");
    if (n > 0 && (size_t)n < size && o->port != (o->tls ? 443 : 80))
        snprintf(buf + n, size - (size_t)n, ":%u", o->port);
}

static void mf__client_task_send_h2(mf_http_client_task_t *t)
{
    const char *path = t->url.data + t->path_off;
    size_t plen = strcspn(path, "#");
    char authority[MF_DNS_MAX_HOST + 16];
    mf__client_task_authority(t, authority, sizeof authority);
    t->out.len = t->out_done = 0; /* the path here; then the body's offset */
    if (plen == 0 || path[0] == '?')
        mf__client_task_put(t, "/", 1);
    mf__client_task_put(t, path, plen);
    if (t->out_of_memory) {
        mf__client_task_finish(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    bool bodiless = mf__client_task_method_is(t, "GET") ||
                    mf__client_task_method_is(t, "HEAD");
    int64_t len = t->source                  ? t->source_len
                  : t->body.len || !bodiless ? (int64_t)t->body.len
                                             : -1;
    mf_h2c_request_t req = {.method = t->method.data,
                            .method_len = t->method.len,
                            .scheme = t->origin.tls ? "https" : "http",
                            .authority = authority,
                            .authority_len = strlen(authority),
                            .path = t->out.data,
                            .path_len = t->out.len,
                            .headers = t->headers.data,
                            .headers_len = t->headers.len,
                            .has_body = t->source || t->body.len,
                            .body_len = len};
    t->source_sent = 0;
    t->source_eof = t->source_len == 0;
    t->source_waiting = false;
    t->phase = MF_CT_HEAD; /* the body goes out as the stream takes it */
    mf__client_task_arm(t,
                        t->idle_ms ? t->idle_ms : t->opts.response_timeout_ms);
    int rc = mf__h2c_submit(&t->user, &req);
    t->out.len = 0;
    if (rc < 0) {
        t->phase = MF_CT_OPENING; /* nothing went out */
        bool transient = rc == MF_ENOMEM || rc == MF_ECONNRESET;
        mf__client_task_finish(
            t, transient ? MF_STATE_SYS_ERROR : MF_STATE_TASK_ERROR, rc);
        return;
    }
    mf__client_task_mark(t, &t->timings.sent);
}

static void mf__client_task_h2_input(mf_http_conn_user_t *u, bool end,
                                     int state, int error, const char *why)
{
    mf_http_client_task_t *t = mf__client_task_of(u);
    if (state != MF_STATE_SUCCESS) {
        if (why)
            snprintf(t->why, sizeof t->why, "%s", why);
        mf__client_task_finish(t, state, error);
        return;
    }
    if (u->h2_moved && t->phase == MF_CT_BODY)
        mf__client_task_head_moved(t);
    u->h2_moved = false;
    if (!t->got_bytes)
        mf__client_task_mark(t, &t->timings.first_byte);
    t->got_bytes = true;
    if (t->idle_ms)
        mf__client_task_arm(t, t->idle_ms);
    if (t->phase == MF_CT_HEAD || t->phase == MF_CT_BODY)
        mf__client_task_process(t, end);
}

/* The request body's next bytes for the stream: from memory (out_done is
 * the offset), or from the source as mf__client_task_take_piece takes
 * them for HTTP/1. */
static ssize_t mf__client_task_h2_body(mf_http_conn_user_t *u, void *buf,
                                       size_t len)
{
    mf_http_client_task_t *t = mf__client_task_of(u);
    if (!t->source) {
        size_t n = t->body.len - t->out_done;
        n = n < len ? n : len;
        memcpy(buf, t->body.data + t->out_done, n);
        t->out_done += n;
        return (ssize_t)n;
    }
    if (t->source_len >= 0) {
        uint64_t left = (uint64_t)t->source_len - t->source_sent;
        if (left == 0)
            return 0;
        len = left < len ? (size_t)left : len;
    }
    ssize_t n = t->source(t->source_arg, buf, len);
    if (n == MF_EAGAIN) {
        t->source_waiting = true;
        mf__client_task_idle(t, true); /* the source is slow, not the server */
        return MF_EAGAIN;
    }
    if (n < 0 || (n == 0 && t->source_len >= 0)) /* ended short */
        return n < 0 ? n : MF_ECLOSED;
    t->source_taken |= n > 0;
    t->source_sent += (size_t)n;
    t->source_eof = n == 0 || (t->source_len >= 0 &&
                               t->source_sent == (uint64_t)t->source_len);
    return n;
}

static const mf_http_conn_user_ops_t mf__client_task_conn_ops = {
    mf__client_task_ready, mf__client_task_open_failed, mf__client_task_event,
    mf__client_task_h2_input, mf__client_task_h2_body};

static void mf__client_task_timed_out(mf_timer_t *timer)
{
    mf_http_client_task_t *t = timer->data;
    mf__http_pool_abandon(&t->user);
    if (t->ups.up) {
        mf__client_task_upstream_done(t, MF_STATE_TIMEOUT, MF_ETIMEDOUT, false);
        if (mf__client_task_may_try_another(t, MF_STATE_TIMEOUT)) {
            mf__client_task_attempt(t);
            return;
        }
    }
    mf__client_task_settle(t, MF_STATE_TIMEOUT);
    t->phase = MF_CT_DONE;
    mf_task_complete(&t->base, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
}

/* When the origin's host names an upstream group, the attempt's server
 * (moonflow/upstream.h) into *member: 1; 0 for an ordinary host; or a
 * negative MF_E* code when the group has no server left to try. */
static int mf__client_task_pick(mf_http_client_task_t *t,
                                mf_http_origin_t *member)
{
    mf_upstream_t *up = mf_upstream_find(t->origin.host, MF_UPSTREAM_NUL);
    if (MF_LIKELY(!up)) {
        t->ups.up = NULL; /* a redirect left the group */
        return 0;
    }
    if (t->ups.up != up)
        mf_upstream_try_init(&t->ups, up);
    /* A stale keep-alive connection's request goes to its server again
     * (still counted in flight); any other attempt asks the group. */
    bool again = t->ups_again && t->ups.host;
    t->ups_again = false;
    if (!again) {
        const char *key = t->url.data + t->path_off;
        size_t key_len = strlen(key);
        if (t->upstream_key.len) {
            key = t->upstream_key.data;
            key_len = t->upstream_key.len;
        }
        int rc = mf_upstream_balance(t->base._loop, &t->ups, key, key_len);
        if (rc < 0)
            return rc;
    }
    member->tls = t->origin.tls;
    member->port = t->ups.port;
    size_t n = strlen(t->ups.host); /* at most MF_UPSTREAM_HOST_MAX */
    memcpy(member->host, t->ups.host, n + 1);
    return 1;
}

/* No server is left: the last attempt's failure, or (none made) the
 * group's. */
static void mf__client_task_no_server(mf_http_client_task_t *t, int rc)
{
    const char *name = mf_upstream_name(t->ups.up);
    if (t->last_state) {
        size_t n = strlen(t->why);
        snprintf(t->why + n, sizeof t->why - n, "; no other server in '%s'",
                 name);
        mf__client_task_complete(t, t->last_state, t->last_error);
        return;
    }
    snprintf(t->why, sizeof t->why, "'%s'", name); /* after the words */
    mf__client_task_complete(t, MF_STATE_TASK_ERROR,
                             rc == MF_ENOUPSTREAM ? MF_ENOUPSTREAM : rc);
}

static void mf__client_task_attempt(mf_http_client_task_t *t)
{
    if (t->out_of_memory) { /* building the request or its URL failed */
        mf__client_task_complete(t, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    mf_http_origin_t member;
    const mf_http_origin_t *to = &t->origin;
    int picked = mf__client_task_pick(t, &member);
    if (MF_UNLIKELY(picked < 0)) {
        mf__client_task_no_server(t, picked);
        return;
    }
    if (picked)
        to = &member;
    mf_endpoint_t *ep = mf__http_endpoint(
        t->base._loop, to, t->opts.tls_verify, t->opts.ca_file,
        t->forward ? MF_HTTP2_OFF : t->opts.http2);
    if (!picked)
        t->why[0] = '\0'; /* a failed attempt before this one is retried */
    t->phase = MF_CT_IDLE;
    t->user.traced = mf_task_trace(&t->base) != NULL;
    mf__client_task_arm(t, t->opts.connect_timeout_ms);
    mf__http_pool_acquire(ep, &t->user);
    if (t->phase == MF_CT_IDLE) /* no idle connection was ready */
        t->phase =
            mf_pwaiter_waiting(&t->user.waiter) ? MF_CT_WAITING : MF_CT_OPENING;
}

/* ---- the task kind ---------------------------------------------------------
 */

static void mf__client_task_dispatch(mf_task_t *task)
{
    mf_http_client_task_t *t = (mf_http_client_task_t *)task;
    if (t->out_of_memory) {
        mf_task_complete(task, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    if (mf__client_url_parse(t->url.data, &t->origin, &t->path_off) < 0) {
        static const char *const schemes[] = {"http", "https", NULL};
        mf_url_problem(t->url.data, schemes,
                       "user info (name:password@) is not taken", t->why,
                       sizeof t->why);
        mf_task_complete(task, MF_STATE_TASK_ERROR, MF_EINVAL);
        return;
    }
    mf__client_task_attempt(t);
}

static void mf__client_task_cancel(mf_task_t *task)
{
    mf_http_client_task_t *t = (mf_http_client_task_t *)task;
    if (t->phase == MF_CT_DONE)
        return;
    mf_timer_stop(task->_loop, &t->timer);
    mf__http_pool_abandon(&t->user);
    if (t->ups.up)
        mf_upstream_abandon(&t->ups);
    /* A per-task timeout lands here too: the engine decided the state. */
    mf__client_task_settle(t, task->_state);
    t->phase = MF_CT_DONE;
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__client_task_destroy(mf_task_t *task)
{
    mf_http_client_task_t *t = (mf_http_client_task_t *)task;
    mf_loop_t *loop = task->_loop;
    mf_timer_stop(loop, &t->timer);
    mf__http_pool_abandon(&t->user);
    if (t->ups.up)
        mf_upstream_abandon(&t->ups);
    mf_buf_t *bufs[] = {&t->method, &t->url, &t->headers,      &t->body,
                        &t->out,    &t->in,  &t->upstream_key, &t->via};
    for (size_t i = 0; i < MF_ARRAY_SIZE(bufs); i++)
        mf__buf_release(loop, bufs[i]);
    mf_loop_free(loop, t, sizeof(*t));
}

static const mf_task_ops_t mf__client_task_ops = {
    "http", mf__client_task_dispatch, mf__client_task_cancel,
    mf__client_task_destroy};

static mf_http_client_task_t *mf__ctask(const mf_task_t *task)
{
    return task && task->_ops == &mf__client_task_ops
               ? (mf_http_client_task_t *)task
               : NULL;
}

mf_task_t *mf_task_http_create(mf_loop_t *loop, const char *method,
                               const char *url, mf_task_cb cb, void *user)
{
    mf_http_client_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    memset(t, 0, offsetof(mf_http_client_task_t, resp_headers));
    mf_task_init(&t->base, &mf__client_task_ops, loop, cb, user);
    t->ups.up = NULL; /* the rest once a group is met */
    mf_http_client_opts_init(&t->opts);
    mf_timer_init(&t->timer, mf__client_task_timed_out, t);
    mf__http_pool_user_init(&t->user, &mf__client_task_conn_ops);
    t->user.h2_in = &t->in;
    const char *m = method && *method ? method : "GET";
    mf__client_task_keep(t, &t->method, m, strlen(m));
    mf__client_task_set_url(t, url ? url : "", url ? strlen(url) : 0);
    return &t->base;
}

void mf_task_http_set_opts(mf_task_t *task, const mf_http_client_opts_t *opts)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (t)
        t->opts = *opts;
}

static bool mf__client_header_text_ok(const char *s, size_t len, bool is_name)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0' ||
            (is_name && s[i] == ':'))
            return false;
    return true;
}

void mf__client_task_add_header(mf_http_client_task_t *t, const char *name,
                                size_t name_len, const char *value,
                                size_t value_len)
{
    if (!mf__client_header_text_ok(name, name_len, true) ||
        !mf__client_header_text_ok(value, value_len, false))
        return; /* no header injection */
    mf__client_task_keep(t, &t->headers, name, name_len);
    mf__client_task_keep(t, &t->headers, ": ", 2);
    mf__client_task_keep(t, &t->headers, value, value_len);
    mf__client_task_keep(t, &t->headers, "\r\n", 2);
}

void mf_task_http_add_header(mf_task_t *task, const char *name,
                             const char *value)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (t)
        mf__client_task_add_header(t, name, strlen(name), value, strlen(value));
}

void mf_task_http_set_body(mf_task_t *task, const void *data, size_t len)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (!t)
        return;
    t->body.len = 0;
    mf__client_task_keep(t, &t->body, data, len);
}

void mf_task_http_set_upstream_key(mf_task_t *task, const char *key, size_t len)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (!t)
        return;
    t->upstream_key.len = 0;
    mf__client_task_keep(t, &t->upstream_key, key, len);
}

void mf_task_http_remove_header(mf_task_t *task, const char *name)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (t)
        mf__client_task_drop_header(t, name);
}

void mf_task_http_set_body_source(mf_task_t *task, mf_http_body_read_fn read,
                                  void *arg, int64_t length)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (!t)
        return;
    t->body.len = 0;
    t->source = read;
    t->source_arg = arg;
    t->source_len = length < 0 ? -1 : length;
}

void mf_task_http_body_ready(mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (t && t->source_waiting && t->user.h2) {
        t->source_waiting = false;
        mf__client_task_idle(t, false);
        mf__h2c_body_ready(&t->user);
        return;
    }
    if (!t || !t->source_waiting || t->phase != MF_CT_SENDING)
        return;
    t->source_waiting = false;
    mf__client_task_idle(t, false);
    mf__client_task_write(t);
    if (t->phase == MF_CT_HEAD)
        mf__client_task_read(t); /* the answer may be there already */
}

int mf_task_http_status(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t && t->head_len ? t->resp.status : 0;
}

const mf_http_response_t *mf_task_http_response(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t && t->head_len ? &t->resp : NULL;
}

const char *mf_task_http_body(const mf_task_t *task, size_t *len)
{
    mf_http_client_task_t *t = mf__ctask(task);
    if (!t || !t->head_len) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->body_len;
    return t->in.data + t->head_len;
}

const char *mf_task_http_header(const mf_task_t *task, const char *name,
                                size_t *len)
{
    mf_http_client_task_t *t = mf__ctask(task);
    const mf_http_header_t *h =
        t && t->head_len ? mf__client_task_find(t, name) : NULL;
    if (len)
        *len = h ? h->value_len : 0;
    return h ? h->value : NULL;
}

const char *mf_task_http_url(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t ? t->url.data : NULL;
}

const char *mf_task_http_error_detail(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t && t->why[0] ? t->why : NULL;
}

int mf_task_http_redirects(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t ? t->redirects : 0;
}

int mf_task_http_version(const mf_task_t *task)
{
    mf_http_client_task_t *t = mf__ctask(task);
    return t && t->head_len ? t->version : 0;
}
