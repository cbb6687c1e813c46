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

/* Headers of one hop only: never forwarded in either direction. */
static bool mf__hop_by_hop(const mf_http_header_t *h)
{
    static const char *const hop[] = {"connection",
                                      "keep-alive",
                                      "proxy-connection",
                                      "te",
                                      "trailer",
                                      "transfer-encoding",
                                      "upgrade",
                                      "content-length",
                                      "proxy-authenticate",
                                      "proxy-authorization",
                                      "date",
                                      "server"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(hop); i++)
        if (strlen(hop[i]) == h->name_len &&
            strncasecmp(hop[i], h->name, h->name_len) == 0)
            return true;
    return false;
}

/* ---- relaying the answer to the exchange --------------------------------- */

static void mf__forward_relay_head(mf_http_client_task_t *t)
{
    mf_http_exchange_t *ex = t->forward;
    mf_http_exchange_set_status(ex, t->resp.status);
    for (size_t i = 0; i < t->resp.num_headers; i++) {
        const mf_http_header_t *h = &t->resp.headers[i];
        /* A refused header (no memory: the parser let only valid ones
         * through) has made the answer a 500, which the server reported:
         * the rest need not be copied. */
        if (!mf__hop_by_hop(h) &&
            mf_http_exchange_add_header(ex, h->name, h->name_len, h->value,
                                        h->value_len) < 0)
            return;
    }
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
 * 502 (504 on timeout); a streamed answer is ended by the exchange's series
 * when this task's callback has run. (If the client is gone, the answer
 * is built and dropped with the exchange.) */
static void mf__http_forward_settle(mf_http_client_task_t *t, int state)
{
    mf_http_exchange_t *ex = t->forward;
    if (!ex || t->relayed)
        return;
    bool timeout = state == MF_STATE_TIMEOUT;
    const char *text = timeout ? "upstream timed out\n" : "bad gateway\n";
    mf_http_exchange_set_status(ex, timeout ? 504 : 502);
    mf_http_exchange_append(ex, text, strlen(text));
}

/* ---- the forward task ---------------------------------------------------- */

static const mf_http_relay_ops_t mf__http_forward_ops = {
    mf__http_forward_relay, mf__http_forward_settle};

/* The end-to-end headers, X-Forwarded-For and the body of the request. */
static void mf__forward_copy_request(mf_http_client_task_t *t,
                                     const mf_http_exchange_t *ex)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    for (size_t i = 0; i < req->num_headers; i++) {
        const mf_http_header_t *h = &req->headers[i];
        if (!mf__hop_by_hop(h))
            mf__client_task_add_header(t, h->name, h->name_len, h->value,
                                       h->value_len);
    }
    char peer[64];
    mf_sockaddr_format_ip(mf_http_exchange_peer(ex), peer, sizeof peer);
    mf__client_task_add_header(t, "X-Forwarded-For", 15, peer, strlen(peer));
    size_t body_len;
    const char *body = mf_http_exchange_body(ex, &body_len);
    if (body_len)
        mf_task_http_set_body(&t->base, body, body_len);
}

mf_task_t *mf_task_http_forward(mf_http_exchange_t *ex, const char *upstream,
                                mf_task_cb cb, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    char url[4096];
    size_t ulen = strlen(upstream);
    while (ulen && upstream[ulen - 1] == '/')
        ulen--;
    snprintf(url, sizeof url, "%.*s%.*s", (int)ulen, upstream,
             (int)req->target_len, req->target);
    char method[32];
    snprintf(method, sizeof method, "%.*s", (int)req->method_len, req->method);
    mf_task_t *task =
        mf_task_http_create(mf_http_exchange_loop(ex), method, url, cb, user);
    mf_http_client_task_t *t = (mf_http_client_task_t *)task;
    t->forward = ex;
    t->relay = &mf__http_forward_ops;
    t->opts.max_retries = 0;
    mf__forward_copy_request(t, ex);
    return task;
}
