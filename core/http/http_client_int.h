/*
 * http_client_int.h — the client's connection, task and forward structs.
 * Internal. The files form a chain, each calling only the ones below it:
 *
 *   http_forward.c   proxying: the forward task, the relay to an exchange
 *   http_client.c    the http task: request, response, redirects, retries
 *   http_pool.c      connections in the endpoint pool (moonflow/endpoint.h):
 *                    the dial (resolve, connect, TLS), keep-alive, health
 *
 * Calls upward go through function pointers the upper file registered: a
 * connection tells its user (the task's mf_http_conn_user_t) through
 * mf_http_conn_user_ops_t; the task tells a forward through t->relay.
 *
 * Ownership: the loop's endpoint pool owns the endpoints and their data
 * (mf_http_endpoint_t); http_pool.c owns the connections' memory (freed
 * from a deferred post, once a canceled DNS query has called back); an
 * HTTP/1 connection serves at most one user at a time and never owns it;
 * an HTTP/2 one (http2_client.c) serves many, one stream each.
 */
#ifndef MF_HTTP_CLIENT_INT_H
#define MF_HTTP_CLIENT_INT_H

#include "engine/buf.h"
#include "http2_client.h"
#include "moonflow/dns.h"
#include "moonflow/endpoint.h"
#include "moonflow/http_client.h"
#include "moonflow/http_server.h"
#include "moonflow/upstream.h"
#include "net/client_open.h"
#include "net/tls.h"

#define MF_HTTP_CLIENT_MAX_HEADERS 64

/* Where a URL points: what a redirect compares to tell another origin. */
typedef struct mf_http_origin {
    bool tls; /* https */
    uint16_t port;
    char host[MF_DNS_MAX_HOST + 1];
} mf_http_origin_t;

typedef struct mf_http_client_conn mf_http_client_conn_t;
typedef struct mf_http_client_task mf_http_client_task_t;
typedef struct mf_http_conn_user mf_http_conn_user_t;

/* ---- http_pool.c: connections ------------------------------------------ */

/* An endpoint's data: what its connections dial. */
typedef struct mf_http_endpoint {
    char host[MF_DNS_MAX_HOST + 1];
    uint16_t port;
    bool tls;
    bool verify;
    char *ca_file; /* verified against this CA bundle (NULL: system) */
    mf_h2c_endpoint_t h2; /* its HTTP/2 connection and waiters */
} mf_http_endpoint_t;

struct mf_http_client_conn {
    mf_pconn_t pc; /* in its endpoint */
    mf_io_t io;
    mf_loop_t *loop;
    SSL *ssl;
    mf_dial_t dial; /* while it opens */
    bool closed;
    unsigned requests;         /* answered on this connection */
    mf_http_conn_user_t *user; /* the one it serves, or opens for */
    mf_h2c_t *h2; /* HTTP/2: its session (many users, none in user) */
    mf_post_t free_post;
};

/* What a connection tells its user; the user registers them. */
typedef struct mf_http_conn_user_ops {
    /* u->conn is the user's and open: times is how it opened (NULL: an
     * idle one, nothing to open). */
    void (*ready)(mf_http_conn_user_t *u, const mf_dial_times_t *times);
    /* The connection opened for u failed and is closed (u->conn NULL);
     * state and error as for the task. */
    void (*failed)(mf_http_conn_user_t *u, const mf_dial_times_t *times,
                   int state, int error);
    /* An event of u->conn's socket once ready. */
    void (*event)(mf_http_conn_user_t *u, unsigned events);
    /* HTTP/2 (u->h2): new bytes of u's response in *u->h2_in (each head
     * written as HTTP/1.1 lines, then the body's bytes), end when the
     * stream ended; or state != success: the stream failed (reset, the
     * connection's GOAWAY or loss), why says how for people. */
    void (*h2_input)(mf_http_conn_user_t *u, bool end, int state, int error,
                     const char *why);
    /* HTTP/2: up to len bytes of u's request body into buf: the count (0:
     * the end), MF_EAGAIN (none yet: mf__h2c_body_ready later), or a
     * negative MF_E* code that fails the stream. */
    ssize_t (*h2_body)(mf_http_conn_user_t *u, void *buf, size_t len);
} mf_http_conn_user_ops_t;

/* The part of a task that uses a connection. */
struct mf_http_conn_user {
    mf_pwaiter_t waiter;
    const mf_http_conn_user_ops_t *ops;
    mf_http_client_conn_t *conn; /* in hand, or opening for the user */
    bool traced;                 /* a new connection stamps its times */
    long verify_result; /* the certificate check of a failed TLS open */
    /* HTTP/2 (http2_client.c): a stream on u->conn, or a wait for one. */
    bool h2;            /* u->conn is an h2 connection, the stream u's */
    bool h2_waiting;    /* in the endpoint's h2 waiters */
    bool h2_head_done;  /* the final (non-1xx) head arrived */
    bool h2_interim;    /* the head coming is a 1xx */
    bool h2_remote_end; /* the server ended its side */
    bool h2_local_end;  /* the request went out whole */
    bool h2_closed;     /* the stream is over (closed or failed) */
    bool h2_moved;      /* an append moved *h2_in: the user re-reads */
    bool h2_goaway;     /* failed by the server's GOAWAY: not processed,
                           and that connection takes no more */
    int32_t stream_id;
    int h2_error;         /* why a callback of ours reset the stream */
    mf_list_t h2_link;    /* in the endpoint's waiters or conn's streams */
    mf_buf_t *h2_in;      /* where the response goes (the user's) */
};

void mf__http_pool_user_init(mf_http_conn_user_t *u,
                             const mf_http_conn_user_ops_t *ops);
/* The loop's endpoint of (host, port, TLS, verification, CA file):
 * connections verified one way are never reused for a request that asks
 * another. */
mf_endpoint_t *mf__http_endpoint(mf_loop_t *loop, const mf_http_origin_t *o,
                                 bool verify, const char *ca_file, int http2);
/* Gives u a connection of ep: an idle one (ready before returning), a new
 * one (ready or failed later), or a place in the wait queue. */
void mf__http_pool_acquire(mf_endpoint_t *ep, mf_http_conn_user_t *u);
/* The user is done with its connection; reuse says whether it is clean. */
void mf__http_pool_release(mf_http_conn_user_t *u, bool reuse);
/* Leaves the wait queue, or closes the connection in hand or opening. */
void mf__http_pool_abandon(mf_http_conn_user_t *u);

/* ---- http_client.c: the task ------------------------------------------- */

/* What the task tells a forward (http_forward.c) that it serves. */
typedef struct mf_http_relay_ops {
    /* New response bytes (the whole body when complete). */
    void (*relay)(mf_http_client_task_t *t, bool complete);
    /* The task ends with state: a forward that relayed nothing answers. */
    void (*settle)(mf_http_client_task_t *t, int state);
} mf_http_relay_ops_t;

typedef enum mf_ctask_phase {
    MF_CT_IDLE,
    MF_CT_WAITING, /* for a connection slot */
    MF_CT_OPENING, /* resolving, connecting, TLS */
    MF_CT_SENDING,
    MF_CT_HEAD,
    MF_CT_BODY,
    MF_CT_DONE
} mf_ctask_phase_t;

struct mf_http_client_task {
    mf_task_t base;
    mf_http_client_opts_t opts;
    mf_ctask_phase_t phase;
    mf_buf_t method;
    mf_buf_t url;     /* current URL, NUL-terminated */
    mf_buf_t headers; /* "Name: value\r\n" lines */
    mf_buf_t body;
    mf_http_origin_t origin;  /* of url */
    size_t path_off;          /* path+query inside url */
    mf_http_conn_user_t user; /* its connection */
    mf_timer_t timer;         /* connect, then response timeout */
    mf_buf_t out;
    size_t out_done;
    mf_buf_t in;
    size_t scanned;
    size_t head_len;
    size_t body_len; /* decoded body bytes after the head */
    bool got_bytes;  /* any response byte arrived on this attempt */
    mf_http_chunked_t chunked;
    mf_http_response_t resp;
    int retries;
    int redirects;
    int version;        /* of the response: 20 (HTTP/2), 11 or 10 */
    bool out_of_memory; /* a request buffer could not grow: fail the task */
    mf_http_exchange_t *forward;      /* relay the body to this exchange */
    const mf_http_relay_ops_t *relay; /* set with forward */
    size_t relayed;                   /* 0: nothing relayed yet */
    bool paused;        /* the client is slow: stop reading the upstream */
    uint64_t body_seen; /* body bytes relayed and dropped from `in` */
    /* A body read from a source as it is sent (mf_task_http_set_body_
     * source): pieces of it pass through `out`, one at a time. */
    mf_http_body_read_fn source;
    void *source_arg;
    int64_t source_len;        /* -1: sent chunked */
    uint64_t source_sent;      /* body bytes taken on this attempt */
    bool source_taken;         /* a byte was taken: no attempt may follow */
    bool source_eof;           /* the whole body is in `out` */
    bool source_waiting;       /* for mf_task_http_body_ready */
    uint32_t idle_ms;          /* a forward's: the longest wait for the
                                  upstream between two reads or writes */
    mf_buf_t via;              /* a forward's "1.1 name" (Via), or empty */
    mf_http_timings_t timings; /* a traced task's (mf__client_task_mark) */
    mf_buf_t upstream_key; /* the group's hash key ("": the path) */
    int last_state, last_error; /* of the last failed attempt */
    bool ups_again; /* a stale connection: the same server once more */
    /* What a failure is about (mf_task_http_error_detail): the malformed
     * URL's fault, or the origin a connection to failed; "" otherwise. */
    char why[224];
    /* Creation zeroes everything before it; the parser fills it. */
    mf_http_header_t resp_headers[MF_HTTP_CLIENT_MAX_HEADERS];
    /* The attempts' servers when the host names an upstream group (only
     * ups.up is set at creation: the rest when a group is met). */
    mf_upstream_try_t ups;
};

/* Reads and processes what the connection has (relaying when forwarding). */
void mf__client_task_read(mf_http_client_task_t *t);
/* Ends the attempt: reuse, redirect, retry, or complete the task. */
void mf__client_task_finish(mf_http_client_task_t *t, int state, int error);
/* Starts or stops the task's timer; stopped while the upstream waits for
 * the forward's client (paused), restarted when it goes on. */
void mf__client_task_idle(mf_http_client_task_t *t, bool waiting);
/* Adds "name: value" to the request (copied; checked for injection). */
void mf__client_task_add_header(mf_http_client_task_t *t, const char *name,
                                size_t name_len, const char *value,
                                size_t value_len);

#endif /* MF_HTTP_CLIENT_INT_H */
