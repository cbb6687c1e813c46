/*
 * moonflow/http_client.h — the HTTP/1.1 client as a task kind.
 *
 *   mf_task_t *t = mf_task_http_create(loop, "GET", "https://host/p?q", cb, u);
 *   mf_task_http_add_header(t, "Accept", "application/json");
 *   mf_series_push_back(series, t);            // or mf_task_start(t)
 *   ... in cb: mf_task_http_status(t), mf_task_http_body(t, &len)
 *
 * Connections are pooled per loop and per endpoint (scheme, host, port, TLS
 * verification): keep-alive reuse, a maximum per endpoint (further requests
 * wait for a free connection), idle connections closed after a timeout or as
 * soon as the server closes them. Names resolve through the loop's c-ares
 * resolver (dns.h); TLS verifies the server's certificate and name by
 * default (system CA bundle), with SNI.
 *
 * Failures come back in the task's completion, never from the factory:
 *   bad URL                 MF_STATE_TASK_ERROR    / MF_EINVAL
 *   name does not resolve   MF_STATE_DNS_ERROR     / MF_EDNS
 *   connect/reset/refused   MF_STATE_SYS_ERROR     / MF_ECONNREFUSED ...
 *   TLS handshake/verify    MF_STATE_TLS_ERROR     / MF_ETLS
 *   closed before the end   MF_STATE_SYS_ERROR     / MF_ECLOSED
 *   connect or response
 *   timeout, task timeout   MF_STATE_TIMEOUT       / MF_ETIMEDOUT
 *   malformed response      MF_STATE_PROTOCOL_ERROR/ MF_EPROTO
 *   body over the limit     MF_STATE_TASK_ERROR    / MF_EMSGSIZE
 *   redirects exhausted     MF_STATE_TASK_ERROR    / MF_ETOOMANYREDIRECTS
 *   https → http redirect   MF_STATE_TASK_ERROR    / MF_EINSECUREREDIRECT
 * Any HTTP status (404, 500 ...) is a success at this level: read it.
 *
 * A connection is reused only when the response ended exactly where its
 * framing says: a byte after it (in the same read, or arriving while the
 * connection is idle) or a close closes it, so that no request is ever
 * answered with bytes meant for another.
 *
 * Redirects (301/302/303/307/308 with a Location) are followed only when
 * max_redirects > 0 (with 0 the 3xx is the answer); one more than allowed
 * fails the task. A redirect to another origin (scheme, host or port) drops
 * the Authorization, Cookie, Proxy-Authorization and Host headers the
 * request had; from https to http it fails unless allow_insecure_redirects.
 * 301/302 after POST and 303 after anything but HEAD continue as GET,
 * without the body and its headers (Content-Type, Content-Length,
 * Transfer-Encoding, Content-Encoding, Content-Language, Content-Location).
 *
 * Retries (max_retries) happen only where safe: when the request never
 * reached a server (connect failure, or a reused connection that the server
 * had closed before any answer byte), and for idempotent methods.
 *
 * Threads: the loop's thread. Ownership: the task copies the method, URL,
 * headers and body (unless _ref); response data lives until the task is
 * destroyed after its callback.
 */
#ifndef MOONFLOW_HTTP_CLIENT_H
#define MOONFLOW_HTTP_CLIENT_H

#include "http_parser.h"
#include "task.h"

MF_EXTERN_C_BEGIN

typedef struct mf_http_client_opts {
    int max_redirects;             /* default 0 */
    int max_retries;               /* default 1 */
    uint32_t connect_timeout_ms;   /* TCP + TLS; default 10000 */
    uint32_t response_timeout_ms;  /* request sent → response complete;
                                      default 60000 */
    uint64_t max_response_body;    /* default 64 MiB; over: MF_EMSGSIZE */
    bool tls_verify;               /* default true */
    bool allow_insecure_redirects; /* follow https → http; default false */
    const char *ca_file;           /* NULL: the system bundle */
    /* An upstream group's host (moonflow/upstream.h): a failed attempt of
     * a non-idempotent request goes to another server only when it cannot
     * have been sent (the connect failed), unless this is true. */
    bool retry_non_idempotent;
    /* HTTP/2 (mf_http2_mode_t): by default an https request offers h2 by
     * ALPN and stays on HTTP/1.1 when the server picks it or nothing. A
     * forward speaks HTTP/1.1 whatever this says. */
    int http2;
} mf_http_client_opts_t;

typedef enum mf_http2_mode {
    MF_HTTP2_ALPN = 0, /* https: h2 when the server picks it; http: 1.1 */
    MF_HTTP2_OFF,      /* HTTP/1.1 only */
    /* http: h2c from the first byte (the server is known to speak it);
     * https: as MF_HTTP2_ALPN */
    MF_HTTP2_PRIOR_KNOWLEDGE
} mf_http2_mode_t;

MF_API void mf_http_client_opts_init(mf_http_client_opts_t *opts);

/* Pool settings of the loop (before its first request). */
typedef struct mf_http_pool_config {
    size_t max_connections_per_endpoint; /* default 64 */
    uint32_t idle_timeout_ms;            /* default 60000 */
} mf_http_pool_config_t;
MF_API void mf_http_pool_configure(mf_loop_t *loop,
                                   const mf_http_pool_config_t *config);
/* Connections opened on this loop so far (tests observe reuse with it). */
MF_API uint64_t mf_http_pool_connects(mf_loop_t *loop);

/* One endpoint of the loop's client pool (host, port, TLS) as it is now. */
typedef struct mf_http_endpoint_stats {
    const char *host; /* valid during the call */
    uint16_t port;
    bool tls;
    size_t connections; /* open, busy or idle */
    size_t idle;        /* kept for the next request */
    size_t waiters;     /* requests waiting for a connection slot */
    uint64_t evictions; /* idle ones closed: timed out, or by the server */
} mf_http_endpoint_stats_t;
typedef void (*mf_http_endpoint_stats_fn)(void *ud,
                                          const mf_http_endpoint_stats_t *st);
/* Calls fn for each endpoint the loop's client has used. Loop thread; walks
 * the lists (for a scrape, not per request). */
MF_API void mf_http_pool_stats(mf_loop_t *loop, mf_http_endpoint_stats_fn fn,
                               void *ud);

MF_API mf_task_t *mf_task_http_create(mf_loop_t *loop, const char *method,
                                      const char *url, mf_task_cb cb,
                                      void *user);
MF_API void mf_task_http_set_opts(mf_task_t *task,
                                  const mf_http_client_opts_t *opts);
MF_API void mf_task_http_add_header(mf_task_t *task, const char *name,
                                    const char *value);
MF_API void mf_task_http_set_body(mf_task_t *task, const void *data,
                                  size_t len);
/* The key an upstream group's consistent hashing (or manual pick, or
 * balancer) gets for this request; without one, the URL's path and query.
 * Copied. */
MF_API void mf_task_http_set_upstream_key(mf_task_t *task, const char *key,
                                          size_t len);

/* Removes every request header named name (any case): one given before,
 * or, for a forward, one copied from its client's request. */
MF_API void mf_task_http_remove_header(mf_task_t *task, const char *name);

/* A streamed upload: the body is read from a source as the connection
 * takes it, a piece of at most MF_HTTP_UPLOAD_PIECE bytes at a time, so
 * memory stays flat however long it is and a slow server slows the
 * source. read returns the bytes it put in buf (> 0), 0 at the body's end,
 * MF_EAGAIN when it has none yet (it then calls mf_task_http_body_ready
 * when it has, and is not read before; nor after the task's end), or an
 * error, which fails the task (MF_STATE_SYS_ERROR
 * with that error). length >= 0 goes out as Content-Length (a body that
 * ends short fails with MF_ECLOSED), -1 chunked. Instead of
 * mf_task_http_set_body. A body once taken cannot be sent again: the
 * task is retried only while no byte of it was taken (a connection that
 * failed to open, a reused one the server had closed), and a redirect's
 * 3xx is the answer. A server that answers before it has taken the whole
 * body and closes (a 413, a 401) gives that answer as the result. */
#define MF_HTTP_UPLOAD_PIECE (64 * 1024)
typedef ssize_t (*mf_http_body_read_fn)(void *arg, void *buf, size_t len);
MF_API void mf_task_http_set_body_source(mf_task_t *task,
                                         mf_http_body_read_fn read, void *arg,
                                         int64_t length);
MF_API void mf_task_http_body_ready(mf_task_t *task);

/* Results, valid in the task's callback. */
MF_API int mf_task_http_status(const mf_task_t *task);
MF_API const mf_http_response_t *mf_task_http_response(const mf_task_t *task);
MF_API const char *mf_task_http_body(const mf_task_t *task, size_t *len);
MF_API const char *mf_task_http_header(const mf_task_t *task, const char *name,
                                       size_t *len);
/* The URL finally answered (after redirects). */
MF_API const char *mf_task_http_url(const mf_task_t *task);
MF_API int mf_task_http_redirects(const mf_task_t *task);
/* The response's HTTP version: 20 (HTTP/2), 11 or 10; 0 without one. */
MF_API int mf_task_http_version(const mf_task_t *task);
/* What a failed task's error is about, or NULL: for MF_EINVAL the URL's
 * fault ("malformed URL 'http://': no host", moonflow/url.h); for a connection
 * that could not be opened (DNS, connect, TLS) its origin ("https://host:443"),
 * and for TLS the certificate check's verdict after it ("...: 18:
 * self-signed certificate"). Never the URL's user info. */
MF_API const char *mf_task_http_error_detail(const mf_task_t *task);

/* When each step of a task's last attempt happened (CLOCK_MONOTONIC ns; 0:
 * it did not happen, e.g. a pooled connection needs no resolving or
 * opening). Kept only for a task made under a trace context (moonflow/
 * task.h: a traced request's), so that other tasks read no clock; all 0
 * otherwise. */
typedef struct mf_http_timings {
    uint64_t resolved;   /* the name resolved (DNS, or its cache) */
    uint64_t connected;  /* the TCP connection established */
    uint64_t opened;     /* ready for the request: connected, and over TLS
                            the handshake done (== connected without TLS) */
    uint64_t sending;    /* a connection in hand: the request starts */
    uint64_t sent;       /* the request written */
    uint64_t first_byte; /* the response's first byte read */
} mf_http_timings_t;
MF_API void mf_task_http_timings(const mf_task_t *task, mf_http_timings_t *out);

/* Proxying (mf_task_http_forward) is in http_forward.h. */

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_CLIENT_H */
