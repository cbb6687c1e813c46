/*
 * http2_client.h — the client's HTTP/2 connections (nghttp2 1.52: frames,
 * HPACK, flow control and stream states are the library's; the bytes go
 * through our socket and TLS calls). Internal.
 *
 * How it sits in the chain (http_client_int.h): http_pool.c hands a
 * connection here once it is open and speaks h2 (ALPN chose "h2", or the
 * endpoint was told so: prior knowledge); from then on the connection
 * carries many users at once, one stream each, and never goes back to the
 * pool's idle list. The endpoint keeps one such connection that new
 * streams go to (mf_h2c_endpoint_t.shared); users beyond the server's
 * MAX_CONCURRENT_STREAMS, or that come while it is opening, wait in the
 * endpoint's list. A user learns about its stream through the ops it
 * registered (mf_http_conn_user_ops_t: h2_input, h2_body), exactly as an
 * HTTP/1 user learns about its socket.
 *
 * Ownership: http_pool.c owns the connection; its session (mf_h2c_t) is
 * this file's, made by mf__h2c_dialed and freed by mf__h2c_free when the
 * pool shuts the connection. A stream never owns its user: release and
 * abandon end it (RST_STREAM CANCEL while it is open).
 */
#ifndef MF_HTTP2_CLIENT_H
#define MF_HTTP2_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moonflow/endpoint.h"
#include "moonflow/list.h"
#include "net/client_open.h"

typedef struct mf_h2c mf_h2c_t;
struct mf_http_client_conn;
struct mf_http_conn_user;

/* An endpoint's HTTP/2 state (in mf_http_endpoint_t). */
typedef struct mf_h2c_endpoint {
    int mode;  /* mf_http2_mode_t as it applies: OFF for http without
                  prior knowledge */
    int known; /* 1 the server chose h2, -1 it chose HTTP/1.1, 0 unknown */
    /* Where new streams go: an h2 connection, or the one being opened in
     * the hope of h2 (then waiters wait for its ALPN); NULL: none. */
    struct mf_http_client_conn *shared;
    mf_list_t waiters; /* users (h2_link) waiting for a stream on it */
} mf_h2c_endpoint_t;

/* One request as HTTP/2 needs it; the strings are the caller's and are
 * copied by the submit. */
typedef struct mf_h2c_request {
    const char *method;
    size_t method_len;
    const char *scheme; /* "http" or "https" */
    const char *authority;
    size_t authority_len;
    const char *path;
    size_t path_len;
    const char *headers; /* "Name: value\r\n" lines (names any case) */
    size_t headers_len;
    bool has_body;    /* DATA follows, read through ops->h2_body */
    int64_t body_len; /* its length when known (content-length), else -1 */
} mf_h2c_request_t;

/* The connection that the pool closes (http_pool.c's, passed in so this
 * file never calls the pool by name). */
typedef void (*mf_h2c_close_fn)(struct mf_http_client_conn *conn);

void mf__h2c_endpoint_init(mf_h2c_endpoint_t *e, int mode);

/* Serves u from the endpoint's h2 connection when it has one (u gets a
 * stream and ops->ready before this returns), or queues u behind the
 * connection being opened or full: true. false: u goes to the pool. */
bool mf__h2c_acquire(mf_endpoint_t *ep, struct mf_http_conn_user *u);
/* After the pool's acquire for u: a connection being dialed for u, on an
 * endpoint that may speak h2, becomes the one other users wait for. */
void mf__h2c_opening(mf_endpoint_t *ep, struct mf_http_conn_user *u);
/* conn, opened for u, is open: when it speaks h2 it becomes an HTTP/2
 * connection, u and the waiters get streams on it: 1. 0: HTTP/1 (waiters
 * that hoped for h2 go to the pool). A negative MF_E* code: it speaks h2
 * but no session could be made (the pool fails it as a failed open). */
int mf__h2c_dialed(struct mf_http_client_conn *conn,
                   struct mf_http_conn_user *u, const mf_dial_times_t *times,
                   mf_h2c_close_fn close);
/* conn failed to open: the users waiting for it fail the same way. */
void mf__h2c_dial_failed(struct mf_http_client_conn *conn, int state,
                         int error);
/* u's request on its stream: 0, or a negative MF_E* code (nothing sent). */
int mf__h2c_submit(struct mf_http_conn_user *u, const mf_h2c_request_t *req);
/* u's body source has bytes again (after h2_body said MF_EAGAIN). */
void mf__h2c_body_ready(struct mf_http_conn_user *u);
/* Ends u's stream or its wait: true when u was an HTTP/2 user. */
bool mf__h2c_detach(struct mf_http_conn_user *u);
/* An event of an HTTP/2 connection's socket. */
void mf__h2c_event(struct mf_http_client_conn *conn, unsigned events);
/* The pool shuts conn: frees its session (users already gone); a
 * connection that was opening for the endpoint's waiters leaves them to
 * open another. */
void mf__h2c_free(struct mf_http_client_conn *conn);

#endif /* MF_HTTP2_CLIENT_H */
