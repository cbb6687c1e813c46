/*
 * http_client_int.h — the client's task, connection and endpoint structs,
 * shared by http_pool.c (endpoints, connections, connect + TLS),
 * http_client.c (the task: request, response, redirects, retries) and
 * http_forward.c (proxying: relays to a server exchange through its public
 * API only). Internal.
 *
 * Ownership: the loop's pool (under its loop key) owns endpoints;
 * an endpoint owns its connections; a connection serves at most one task at
 * a time and never owns it. Connections are freed from a deferred post.
 */
#ifndef MF_HTTP_CLIENT_INT_H
#define MF_HTTP_CLIENT_INT_H

#include "engine/buf.h"
#include "net/client_open.h"
#include "moonflow/dns.h"
#include "moonflow/http_client.h"
#include "moonflow/http_server.h"
#include "net/tls.h"

#define MF_HTTP_CLIENT_MAX_HEADERS 64

/* Where a URL points: what a redirect compares to tell another origin. */
typedef struct mf_http_origin {
    bool tls; /* https */
    uint16_t port;
    char host[MF_DNS_MAX_HOST + 1];
} mf_http_origin_t;

typedef struct mf_http_endpoint mf_http_endpoint_t;
typedef struct mf_http_client_conn mf_http_client_conn_t;
typedef struct mf_http_client_task mf_http_client_task_t;

struct mf_http_endpoint {
    mf_list_t link; /* pool->endpoints */
    char host[MF_DNS_MAX_HOST + 1];
    uint16_t port;
    bool tls;
    bool verify;
    char *ca_file;     /* verified against this CA bundle (NULL: system) */
    mf_list_t conns;   /* all connections, busy or idle */
    mf_list_t idle;    /* idle connections, most recent first */
    mf_list_t waiters; /* tasks waiting for a connection slot */
    size_t nconns;
    uint64_t evictions; /* idle connections closed: timed out, or by the peer */
};

typedef struct mf_http_pool {
    mf_loop_t *loop;
    mf_list_t endpoints;
    mf_http_pool_config_t config;
    uint64_t connects;
} mf_http_pool_t;

struct mf_http_client_conn {
    mf_io_t io;
    mf_timer_t idle_timer;
    mf_http_endpoint_t *ep;
    mf_loop_t *loop;
    mf_list_t link;      /* ep->conns */
    mf_list_t idle_link; /* ep->idle when idle */
    SSL *ssl;
    mf_client_open_t opener; /* while its task opens it */
    bool closed;
    unsigned requests; /* answered on this connection */
    mf_http_client_task_t *task;
    mf_post_t free_post;
};

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
    mf_http_origin_t origin; /* of url */
    size_t path_off;         /* path+query inside url */
    mf_http_endpoint_t *ep;
    mf_http_client_conn_t *conn;
    mf_list_t wait_link;
    mf_dns_query_t dns;
    bool resolving;
    mf_timer_t timer; /* connect, then response timeout */
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
    bool out_of_memory; /* a request buffer could not grow: fail the task */
    mf_http_exchange_t *forward; /* relay the body to this exchange */
    size_t relayed;              /* 0: nothing relayed yet */
    bool paused;        /* the client is slow: stop reading the upstream */
    uint64_t body_seen; /* body bytes relayed and dropped from `in` */
    mf_http_timings_t timings; /* a traced task's (mf__client_task_mark) */
    /* Last: creation zeroes everything before it, the parser fills it. */
    mf_http_header_t resp_headers[MF_HTTP_CLIENT_MAX_HEADERS];
};

/* Stamps *at with the time, for a traced task only (mf_task_http_timings):
 * an untraced one reads no clock. */
void mf__client_task_mark(const mf_http_client_task_t *t, uint64_t *at);

/* http_pool.c */
mf_http_pool_t *mf__http_pool(mf_loop_t *loop);
/* The endpoint of (host, port, TLS, verification, CA file): connections
 * verified one way are never reused for a request that asks another. */
mf_http_endpoint_t *mf__http_endpoint(mf_http_pool_t *pool, const char *host,
                                      uint16_t port, bool tls, bool verify,
                                      const char *ca_file);
/* Gives the task a connection: an idle one (then mf__client_task_send runs), a
 * new one (opened; then mf__client_task_send), or a place in the wait queue. */
void mf__http_acquire(mf_http_client_task_t *t);
/* The task is done with its connection; reuse says whether it is clean. */
void mf__http_release(mf_http_client_conn_t *conn, bool reuse);
/* Removes a task from the wait queue / aborts its connection attempt. */
void mf__http_abandon(mf_http_client_task_t *t);
/* An I/O event while the task's connection is opening: finishes connect
 * and the TLS handshake, then calls mf__client_task_send. */
void mf__http_opening_event(mf_http_client_task_t *t, unsigned events);

/* http_client.c */
void mf__client_task_send(mf_http_client_task_t *t);
/* Reads and processes what the connection has (relaying when forwarding). */
void mf__client_task_read(mf_http_client_task_t *t);
/* Ends the attempt: reuse, redirect, retry, or complete the task. */
void mf__client_task_finish(mf_http_client_task_t *t, int state, int error);
/* Adds "name: value" to the request (copied; checked for injection). */
void mf__client_task_add_header(mf_http_client_task_t *t, const char *name,
                                size_t name_len, const char *value,
                                size_t value_len);
void mf__client_task_on_io(mf_http_client_task_t *t, unsigned events);
/* The connection could not be opened (state + error as for the task). */
void mf__client_task_open_failed(mf_http_client_task_t *t, int state,
                                 int error);

/* http_forward.c */
/* New response bytes (the whole body when complete) for t->forward. */
void mf__http_forward_relay(mf_http_client_task_t *t, bool complete);
/* The task ends with state: a forward that relayed nothing answers 502/504. */
void mf__http_forward_settle(mf_http_client_task_t *t, int state);

#endif /* MF_HTTP_CLIENT_INT_H */
