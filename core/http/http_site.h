/*
 * http_site.h — one server as the layers below it see it: its settings,
 * the Server and Date lines every answer shares, the handler, the
 * exchange ops its protocols create exchanges with, and the hooks through
 * which a protocol or an exchange reports up. Internal, a leaf.
 *
 * The server (http_server.c) embeds and owns mf_http_site_t: it fills it
 * at start, sets `stopping`, and outlives every connection and exchange
 * that points to it. The layers below (http1.c, http_exchange.c,
 * http_head.c) read it and call its function pointers; they never call
 * the server's functions, which sit above them. The two caches are the
 * only parts written from below, by http_head.c (the Date line through
 * http_date.h), on the loop thread.
 */
#ifndef MF_HTTP_SITE_H
#define MF_HTTP_SITE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/buf.h"
#include "http_date.h"
#include "http_proto.h"
#include "moonflow/http_server.h"

typedef struct mf_http_site mf_http_site_t;

/* The status line and Server line of the last status answered, formatted
 * (most answers of a server share their status). Written by http_head.c. */
typedef struct mf_http_status_cache {
    int status; /* 0: nothing cached */
    size_t len;
    char text[128]; /* "HTTP/1.1 200 OK\r\nServer: moonflow\r\n" */
} mf_http_status_cache_t;

/* Reports up to the server. Cold paths, each counted or logged there. */
typedef struct mf_http_site_hooks {
    /* A response could not be built for lack of memory: it was answered
     * 500 (answered) or its connection closed instead. Counts it
     * (mf_http_server_failed_responses) and says so on stderr. */
    void (*response_failed)(mf_http_site_t *site, bool answered);
    /* The handler gave a header that cannot be sent (fault says why).
     * Counts it (mf_http_server_invalid_headers); with report, says on
     * stderr which request and which header, and what follows: the answer
     * becomes a 500, or (head_sent) the header is only refused. */
    void (*header_refused)(mf_http_site_t *site, const mf_http_request_t *req,
                           const char *name, size_t name_len, const char *fault,
                           bool report, bool head_sent);
    /* A protocol refused a request with status and an answer of
     * body_bytes (or closed it stalled: 408, 0 bytes); in->data[off..len)
     * is what it had received of it. Tells the config's on_reject hook, if
     * any, what is known of the request. */
    void (*rejected)(mf_http_site_t *site, int status, size_t body_bytes,
                     const mf_buf_t *in, size_t off, const mf_sockaddr_t *peer);
} mf_http_site_hooks_t;

/* HTTP/2's counts (mf_http_server_stats_t says what each is). Written by
 * http2.c only, on the loop thread; read by the server for its stats. */
typedef struct mf_http2_counters {
    uint64_t connections, streams, resets_received, calm_goaways, floods,
        headers_refused, protocol_errors;
} mf_http2_counters_t;

struct mf_transport;

struct mf_http_site {
    mf_loop_t *loop;
    mf_http_server_t *srv; /* the handle the handler API hands out */
    const mf_http_server_config_t *config;
    mf_http_handler handler;
    void *user;
    const mf_http_exchange_ops_t *exchange; /* http_exchange.c's */
    const mf_http_site_hooks_t *hooks;
    bool stopping; /* a graceful stop is under way: no more keep-alive */
    /* Hands a connection whose client speaks HTTP/2 (the preface, or ALPN
     * "h2") from HTTP/1 to HTTP/2: set by the server when http2 is on,
     * else NULL. The input holds the client's first bytes. */
    void (*attach_h2)(mf_http_site_t *site, struct mf_transport *t);
    /* Offers HTTP/2 a request that asks for "Upgrade: h2c" (RFC 7540
     * §3.2; see mf__http2_attach_upgraded): set by the server when http2
     * is on and it has no TLS, else NULL. True when HTTP/2 took the
     * connection; false when HTTP/1 serves the request as it is. */
    bool (*upgrade_h2)(mf_http_site_t *site, struct mf_transport *t,
                       const mf_http_request_t *req, size_t head_len);
    mf_http2_counters_t h2;
    mf_http_date_t date;
    mf_http_status_cache_t status_cache;
    size_t server_line_len; /* 0 when disabled */
    char server_line[80];   /* "Server: name\r\n" */
};

#endif /* MF_HTTP_SITE_H */
