/*
 * http_forward.c — proxying: the forward task (an http task that sends a
 * server exchange's request upstream) and the relay of the upstream's
 * answer back to that exchange as it arrives.
 *
 * May call: the client's internals (http_client_int.h: the task it extends,
 * its read and finish steps; the task calls back only through the relay
 * ops set here) and only the public exchange API
 * (moonflow/http_server.h); it knows nothing of the server's connections.
 * The exchange stays alive while the task runs because the task is in the
 * exchange's series, which the exchange waits for.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http_client_int.h"
#include "moonflow/http_forward.h"

static bool mf__name_is(const char *name, size_t len, const char *lower)
{
    return strlen(lower) == len && strncasecmp(lower, name, len) == 0;
}

static bool mf__name_in(const char *name, size_t len, const char *const *names,
                        size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (mf__name_is(name, len, names[i]))
            return true;
    return false;
}

/* Whether a Connection field's value lists the token [name, name + len):
 * comma-separated, with optional spaces around each (RFC 9110 §7.6.1). */
static bool mf__connection_lists(const mf_http_header_t *c, const char *name,
                                 size_t len)
{
    const char *p = c->value, *end = c->value + c->value_len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *b = p, *e = stop;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - b) == len && strncasecmp(b, name, len) == 0)
            return true;
        p = stop + 1;
    }
    return false;
}

bool mf_http_hop_by_hop(const mf_http_header_t *headers, size_t n,
                        const char *name, size_t len)
{
    static const char *const hop[] = {"connection",
                                      "keep-alive",
                                      "proxy-connection",
                                      "te",
                                      "trailer",
                                      "transfer-encoding",
                                      "upgrade",
                                      "proxy-authenticate",
                                      "proxy-authorization"};
    if (mf__name_in(name, len, hop, MF_ARRAY_SIZE(hop)))
        return true;
    for (size_t i = 0; i < n; i++)
        if (mf__name_is(headers[i].name, headers[i].name_len, "connection") &&
            mf__connection_lists(&headers[i], name, len))
            return true;
    return false;
}

/* A Forwarded value: a token as it is, anything else quoted (RFC 7239
 * §4: a quoted-string, '"' and '\' escaped). */
static bool mf__is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static size_t mf__put_value(char *out, size_t at, size_t cap, const char *v,
                            size_t len)
{
    bool token = len > 0;
    for (size_t i = 0; i < len && token; i++)
        token = mf__is_tchar((unsigned char)v[i]);
    if (token) {
        if (at + len >= cap)
            return cap;
        memcpy(out + at, v, len);
        return at + len;
    }
    if (at < cap)
        out[at++] = '"';
    for (size_t i = 0; i < len && at < cap; i++) {
        if (v[i] == '"' || v[i] == '\\')
            out[at++] = '\\';
        if (at < cap)
            out[at++] = v[i];
    }
    if (at < cap)
        out[at++] = '"';
    return at;
}

size_t mf_http_forwarded_element(char *out, size_t cap,
                                 const mf_sockaddr_t *peer, const char *proto,
                                 const char *host, size_t host_len)
{
    char ip[64], node[72];
    mf_sockaddr_format_ip(peer, ip, sizeof ip);
    bool v6 = peer->sa.sa_family == AF_INET6;
    snprintf(node, sizeof node, v6 ? "[%s]" : "%s", ip);
    size_t at = 0;
    if (cap < 5)
        return 0;
    memcpy(out, "for=", 4);
    at = mf__put_value(out, 4, cap, node, strlen(node));
    const char *parts[] = {";proto=", ";host="};
    const char *values[] = {proto ? proto : "http", host};
    size_t lens[] = {strlen(values[0]), host_len};
    for (int i = 0; i < 2 && at < cap; i++) {
        if (!values[i])
            continue;
        size_t pl = strlen(parts[i]);
        if (at + pl >= cap)
            return 0;
        memcpy(out + at, parts[i], pl);
        at = mf__put_value(out, at + pl, cap, values[i], lens[i]);
    }
    if (at >= cap)
        return 0;
    out[at] = '\0';
    return at;
}

/* What the answer's head does not carry over: hop-by-hop, and the fields
 * the server sets itself. */
static bool mf__answer_drops(const mf_http_response_t *resp,
                             const mf_http_header_t *h)
{
    static const char *const own[] = {"content-length", "date", "server"};
    return mf__name_in(h->name, h->name_len, own, MF_ARRAY_SIZE(own)) ||
           mf_http_hop_by_hop(resp->headers, resp->num_headers, h->name,
                              h->name_len);
}

/* ---- relaying the answer to the exchange --------------------------------- */

/* The values of every field named name, joined with ", ", then mine (if
 * any), as one "Name: value" line of the upstream request (or, with ex,
 * of the answer). */
static void mf__join_field(mf_http_client_task_t *t, mf_http_exchange_t *ex,
                           const mf_http_header_t *hs, size_t n,
                           const char *name, const char *mine, size_t mlen)
{
    mf_buf_t v;
    mf__buf_init(&v);
    mf_loop_t *loop = t->base._loop;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!mf__name_is(hs[i].name, hs[i].name_len, name) ||
            hs[i].value_len == 0)
            continue;
        if (v.len)
            rc = mf__buf_append(loop, &v, ", ", 2);
        if (rc == 0)
            rc = mf__buf_append(loop, &v, hs[i].value, hs[i].value_len);
    }
    if (mine && v.len && rc == 0)
        rc = mf__buf_append(loop, &v, ", ", 2);
    if (mine && rc == 0)
        rc = mf__buf_append(loop, &v, mine, mlen);
    const char *val = v.len ? v.data : "";
    if (rc < 0)
        t->out_of_memory = true; /* the task fails with MF_ENOMEM */
    else if (v.len && ex)
        mf_http_exchange_add_header(ex, name, strlen(name), val, v.len);
    else if (v.len)
        mf__client_task_add_header(t, name, strlen(name), val, v.len);
    mf__buf_release(loop, &v);
}

static void mf__forward_relay_head(mf_http_client_task_t *t)
{
    mf_http_exchange_t *ex = t->forward;
    mf_http_exchange_set_status(ex, t->resp.status);
    bool via = t->via.len > 0;
    for (size_t i = 0; i < t->resp.num_headers; i++) {
        const mf_http_header_t *h = &t->resp.headers[i];
        if (mf__answer_drops(&t->resp, h) ||
            (via && mf__name_is(h->name, h->name_len, "via")))
            continue;
        /* A refused header (no memory: the parser let only valid ones
         * through) has made the answer a 500, which the server reported:
         * the rest need not be copied. */
        if (mf_http_exchange_add_header(ex, h->name, h->name_len, h->value,
                                        h->value_len) < 0)
            return;
    }
    if (via)
        mf__join_field(t, ex, t->resp.headers, t->resp.num_headers, "via",
                       t->via.data, t->via.len);
}

/* The client caught up, or left (a drain call comes then too): an empty
 * write tells which. Then read what the upstream sent meanwhile (its edge
 * has already fired, so read now rather than wait for the next one). */
static void mf__forward_resume(mf_http_exchange_t *ex, void *arg)
{
    mf_http_client_task_t *t = arg;
    t->paused = false;
    if (t->phase != MF_CT_BODY)
        return;
    mf__client_task_idle(t, false);
    int rc = mf_http_exchange_write(ex, NULL, 0);
    if (rc < 0) {
        mf__client_task_finish(t, MF_STATE_CANCELED, rc);
        return;
    }
    mf__client_task_read(t);
}

/* A body that is complete at once goes out with a Content-Length; else the
 * pieces are streamed (chunked) as they arrive and dropped from memory. */
static void mf__http_forward_relay(mf_http_client_task_t *t, bool complete)
{
    mf_http_exchange_t *ex = t->forward;
    const char *body = t->in.data + t->head_len;
    if (t->relayed == 0 && complete) {
        mf__forward_relay_head(t);
        mf_http_exchange_append(ex, body, t->body_len);
        t->relayed = t->body_len + 1;
        t->body_seen = t->body_len; /* mf_task_http_forwarded_bytes */
        return;
    }
    if (t->relayed == 0) {
        mf__forward_relay_head(t);
        t->relayed = 1;
    }
    int rc = t->body_len ? mf_http_exchange_write(ex, body, t->body_len) : 0;
    if (rc < 0) { /* the client left, or its answer was cut */
        mf__client_task_finish(t, MF_STATE_CANCELED, rc);
        return;
    }
    if (rc == 1 && !complete) { /* the client is slower than the upstream */
        t->paused = true;
        mf__client_task_idle(t, true); /* the client's pace, not a stall */
        mf_http_exchange_on_drain(ex, mf__forward_resume, t);
    }
    /* Keep only what is not decoded yet (a partial chunk header). */
    size_t used = t->head_len + t->body_len;
    memmove(t->in.data + t->head_len, t->in.data + used, t->in.len - used);
    t->in.len -= t->body_len;
    t->body_seen += t->body_len;
    t->body_len = 0;
}

/* A forward that ends without relaying anything answers the client with
 * 502 (504 on timeout, 503 when an upstream group had no live server),
 * unless it was canceled; a streamed answer is ended by
 * the exchange's series when this task's callback has run. (If the client is
 * gone, the answer is built and dropped with the exchange.) */
static void mf__http_forward_settle(mf_http_client_task_t *t, int state)
{
    mf_http_exchange_t *ex = t->forward;
    if (!ex)
        return;
    /* Nothing of the exchange may call the ended task back. */
    if (t->source_waiting)
        mf_http_exchange_on_readable(ex, NULL, NULL);
    if (t->paused)
        mf_http_exchange_on_drain(ex, NULL, NULL);
    t->source_waiting = t->paused = false;
    if (t->relayed || state == MF_STATE_CANCELED)
        return; /* canceled: whoever canceled answers */
    bool timeout = state == MF_STATE_TIMEOUT;
    /* An upstream group with no server left to try (moonflow/upstream.h):
     * the service is unavailable, not a gateway gone bad. */
    bool none = state == MF_STATE_TASK_ERROR && t->ups.up;
    const char *text = timeout ? "upstream timed out\n"
                       : none  ? "no live upstream\n"
                               : "bad gateway\n";
    mf_http_exchange_set_status(ex, timeout ? 504 : none ? 503 : 502);
    mf_http_exchange_append(ex, text, strlen(text));
    t->body_seen = strlen(text);
}

/* ---- the forward task ---------------------------------------------------- */

static const mf_http_relay_ops_t mf__http_forward_ops = {
    mf__http_forward_relay, mf__http_forward_settle};

/* The request's fields the forward replaces or extends instead of
 * copying. */
static bool mf__request_drops(const mf_http_request_t *req,
                              const mf_http_header_t *h)
{
    static const char *const own[] = {"content-length",   "x-forwarded-for",
                                      "forwarded",        "x-forwarded-proto",
                                      "x-forwarded-host", "via"};
    return mf__name_in(h->name, h->name_len, own, MF_ARRAY_SIZE(own)) ||
           mf_http_hop_by_hop(req->headers, req->num_headers, h->name,
                              h->name_len);
}

/* The client's side of the hop: X-Forwarded-*, Forwarded, Via. */
static void mf__forward_add_origin(mf_http_client_task_t *t,
                                   const mf_http_exchange_t *ex,
                                   const mf_http_forward_opts_t *o)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    const mf_http_header_t *hs = req->headers;
    size_t n = req->num_headers;
    const char *proto = o->proto ? o->proto : "http";
    char peer[64];
    mf_sockaddr_format_ip(mf_http_exchange_peer(ex), peer, sizeof peer);
    mf__join_field(t, NULL, hs, n, "x-forwarded-for", peer, strlen(peer));
    mf__client_task_add_header(t, "X-Forwarded-Proto", 17, proto,
                               strlen(proto));
    const mf_http_header_t *host = mf_http_find_header(hs, n, "host");
    if (host)
        mf__client_task_add_header(t, "X-Forwarded-Host", 16, host->value,
                                   host->value_len);
    char fwd[512];
    size_t flen = mf_http_forwarded_element(
        fwd, sizeof fwd, mf_http_exchange_peer(ex), proto,
        host ? host->value : NULL, host ? host->value_len : 0);
    if (!flen) /* a Host too long for it: the element without it */
        flen = mf_http_forwarded_element(
            fwd, sizeof fwd, mf_http_exchange_peer(ex), proto, NULL, 0);
    mf__join_field(t, NULL, hs, n, "forwarded", fwd, flen);
    mf__join_field(t, NULL, hs, n, "via", t->via.len ? t->via.data : NULL,
                   t->via.len);
}

static void mf__forward_body_readable(mf_http_exchange_t *ex, void *arg)
{
    (void)ex;
    mf_task_http_body_ready(arg);
}

/* A streamed request body, read as the upstream takes it; when the
 * client has sent nothing more yet, its next bytes (or its leaving) wake
 * the task. */
static ssize_t mf__forward_body_read(void *arg, void *buf, size_t len)
{
    mf_http_client_task_t *t = arg;
    ssize_t n = mf_http_exchange_read(t->forward, buf, len);
    if (n == MF_EAGAIN)
        mf_http_exchange_on_readable(t->forward, mf__forward_body_readable,
                                     &t->base);
    return n;
}

/* The end-to-end headers, the hop's fields and the body of the request. */
static void mf__forward_copy_request(mf_http_client_task_t *t,
                                     mf_http_exchange_t *ex,
                                     const mf_http_forward_opts_t *o)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    for (size_t i = 0; i < req->num_headers; i++) {
        const mf_http_header_t *h = &req->headers[i];
        if (!mf__request_drops(req, h))
            mf__client_task_add_header(t, h->name, h->name_len, h->value,
                                       h->value_len);
    }
    mf__forward_add_origin(t, ex, o);
    if (mf_http_exchange_body_streamed(ex)) {
        int64_t len = req->body == MF_HTTP_BODY_LENGTH
                          ? (int64_t)req->content_length
                          : -1;
        mf_task_http_set_body_source(&t->base, mf__forward_body_read, t, len);
        return;
    }
    size_t body_len;
    const char *body = mf_http_exchange_body(ex, &body_len);
    if (body_len)
        mf_task_http_set_body(&t->base, body, body_len);
}

void mf_http_forward_opts_init(mf_http_forward_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->tries = 1;
}

/* The URL the request goes to: upstream as it is (whole_url), or with the
 * request's target in place of its trailing slashes. */
static void mf__forward_url(char *url, size_t size, const char *upstream,
                            const mf_http_request_t *req, bool whole)
{
    size_t ulen = strlen(upstream);
    if (whole) {
        snprintf(url, size, "%s", upstream);
        return;
    }
    while (ulen && upstream[ulen - 1] == '/')
        ulen--;
    snprintf(url, size, "%.*s%.*s", (int)ulen, upstream, (int)req->target_len,
             req->target);
}

mf_task_t *mf_task_http_forward_with(mf_http_exchange_t *ex,
                                     const char *upstream,
                                     const mf_http_forward_opts_t *opts,
                                     mf_task_cb cb, void *user)
{
    mf_http_forward_opts_t defaults;
    mf_http_forward_opts_init(&defaults);
    const mf_http_forward_opts_t *o = opts ? opts : &defaults;
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    char url[4096];
    mf__forward_url(url, sizeof url, upstream, req, o->whole_url);
    char method[32];
    snprintf(method, sizeof method, "%.*s", (int)req->method_len, req->method);
    mf_task_t *task =
        mf_task_http_create(mf_http_exchange_loop(ex), method, url, cb, user);
    mf_http_client_task_t *t = (mf_http_client_task_t *)task;
    t->forward = ex;
    t->relay = &mf__http_forward_ops;
    t->opts.max_retries = o->tries > 1 ? o->tries - 1 : 0;
    t->opts.max_response_body = UINT64_MAX; /* streamed: nothing is kept */
    t->idle_ms = o->timeout_ms ? o->timeout_ms : 60000;
    if (o->timeout_ms)
        t->opts.connect_timeout_ms = o->timeout_ms;
    if (o->via && *o->via) {
        mf_loop_t *loop = t->base._loop;
        if (mf__buf_append(loop, &t->via, "1.1 ", 4) < 0 ||
            mf__buf_append(loop, &t->via, o->via, strlen(o->via)) < 0 ||
            mf__buf_append(loop, &t->via, "", 1) < 0)
            t->out_of_memory = true;
        else
            t->via.len--; /* the NUL outside len */
    }
    mf__forward_copy_request(t, ex, o);
    return task;
}

mf_task_t *mf_task_http_forward(mf_http_exchange_t *ex, const char *upstream,
                                mf_task_cb cb, void *user)
{
    return mf_task_http_forward_with(ex, upstream, NULL, cb, user);
}

uint64_t mf_task_http_forwarded_bytes(const mf_task_t *task)
{
    const mf_http_client_task_t *t = (const mf_http_client_task_t *)task;
    return t->forward ? t->body_seen : 0;
}
