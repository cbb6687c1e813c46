/*
 * load_int.h — the load generator's two owners and the small interface
 * between them. Internal to core/load.
 *
 * load.c owns mf_load_t: the configuration copy, the run's phases (warm-up,
 * measured window, end), the 100 ms tick (Req/Sec samples, timeouts,
 * progress), the stats and the hooks. load_conn.c owns mf_load_conn_t: one
 * client connection's socket, request buffer, read buffer and response
 * framing. A connection reports to the load only through the mf__load_*
 * functions below (load_record.c, below both: the chain is load.c >
 * load_conn.c > load_record.c); the load drives a connection only through
 * the mf__load_conn_* ones.
 *
 * Each open socket is also counted in its target's endpoint of the loop's
 * endpoint pool (moonflow/endpoint.h, protocol "load"), added when its
 * connect starts and removed when it closes, so the one stats walk sees
 * the generator's connections with every client's. The pool never holds
 * them idle: nothing of it runs per request.
 */
#ifndef MF_LOAD_INT_H
#define MF_LOAD_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "moonflow/endpoint.h"
#include "moonflow/load.h"
#include "net/tls.h"

/* What a connection is doing. */
enum {
    MF_LOAD_CONN_CLOSED,     /* no socket; maybe a reconnect timer */
    MF_LOAD_CONN_CONNECTING, /* non-blocking connect under way */
    MF_LOAD_CONN_HANDSHAKE,  /* TLS handshake under way */
    MF_LOAD_CONN_IDLE,       /* open, waiting to send (delay, rate) */
    MF_LOAD_CONN_BUSY        /* a request written (or being written) */
};

/* Where the response parser is in the current response. */
enum {
    MF_LOAD_READ_HEAD,
    MF_LOAD_READ_LENGTH,
    MF_LOAD_READ_CHUNKED,
    MF_LOAD_READ_CLOSE
};

typedef struct mf_load_conn {
    mf_load_t *load;
    mf_endpoint_t *ep; /* its target's */
    mf_pconn_t pc;     /* in ep while its socket is open */
    mf_io_t io;
    mf_timer_t timer; /* reconnect, delay hook, constant-rate due time */
    SSL *ssl;
    size_t target;
    int state;
    bool want_write;   /* the socket was full: finish on the WRITE edge */
    uint64_t state_ns; /* when the connect or the request started */
    /* The request: the target's static bytes, or own (the request hook's
     * copy, grown only when a longer request comes). */
    const char *req;
    size_t req_len;
    size_t written;
    size_t depth;       /* requests in req: responses expected per write */
    uint64_t head_mask; /* bit i: request i is HEAD (no response body) */
    char *own;
    size_t own_cap;
    size_t pending;    /* responses still expected for this write */
    uint64_t start_ns; /* latency origin: the write, or the due time */
    uint64_t due_ns;   /* constant rate: when the next request is due */
    uint64_t served;   /* responses on this socket (requests_per_conn) */
    /* Read buffer: rbuf[rpos..rlen) is the current response from its
     * first unconsumed byte; kept heads and bodies (with a response hook)
     * start at rpos. */
    char *rbuf;
    char *rbuf_own; /* rbuf, or the load's shared buffer during a read */
    size_t rcap, rpos, rlen;
    int rstate;
    size_t scanned;     /* head bytes the parser already judged */
    size_t head_len;    /* the kept head (response hook only) */
    size_t body_len;    /* the kept body, de-chunked (response hook only) */
    uint64_t remaining; /* Content-Length bytes still to come */
    int status;
    bool close_after; /* the response said Connection: close */
    mf_http_chunked_t chunked;
} mf_load_conn_t;

struct mf_load {
    mf_loop_t *loop;
    mf_load_config_t cfg;
    mf_load_target_t *targets; /* copies: host and request owned */
    size_t *target_depth;
    uint64_t *target_head_mask;
    mf_load_hooks_t hooks;
    mf_load_conn_t *conns;
    unsigned nconns;      /* made so far (cfg.connections once created) */
    uint64_t interval_ns; /* constant rate: between one connection's
                             requests; 0 in a closed loop */
    /* The run. */
    uint64_t start_ns, window_ns, last_tick_ns, last_tick_requests;
    bool started, measuring, stopping, done_called;
    int error;
    mf_timer_t phase_timer; /* end of warm-up, end of the window */
    mf_timer_t tick_timer;  /* every 100 ms */
    mf_post_t done_post;
    void (*done)(mf_load_t *, void *);
    void (*stop)(mf_load_t *); /* mf_load_stop: how a hook's error ends the
                                  run from below (load_record.c) */
    void *done_user;
    mf_http_header_t headers[128]; /* a parsed head's fields, transient */
    /* Reads land here when a connection holds no partial response (the
     * common case, without a response hook): one hot buffer for every
     * connection instead of one each, as wrk reads; only a partial
     * response is copied to the connection's own buffer. */
    char *rbuf_shared;
    mf_load_stats_t stats;
    _Atomic uint64_t live_requests, live_errors, live_p99;
    _Atomic bool live_warming;
};

#define MF_LOAD_READ_BUF 16384
#define MF_LOAD_MAX_HEAD 65536
#define MF_LOAD_RECONNECT_MS 10
#define MF_LOAD_EARLY_NS 1000000 /* the loop timers' resolution */

static inline uint64_t mf__load_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- load_record.c, for connections ------------------------------------ */

/* A response came whole at now_ns: count and record it. */
void mf__load_record(mf_load_t *load, mf_load_conn_t *c, uint64_t now_ns);
/* An error of the measured window (a field of mf_load_errors_t). */
void mf__load_count_error(mf_load_t *load, size_t target, uint64_t *field);
/* Ends the run with a hook's error (0: a plain stop). */
void mf__load_fail(mf_load_t *load, int error);
/* Requests in buf, and which are HEAD (bit i for the i-th of the first
 * 64); 0 when buf does not hold complete requests. */
size_t mf__load_scan_requests(const char *buf, size_t len, uint64_t *heads);

/* ---- load_conn.c, for the load ----------------------------------------- */

/* Buffers of a connection (at create); false when memory ran out. */
bool mf__load_conn_init(mf_load_conn_t *c, mf_load_t *load, size_t target);
void mf__load_conn_free(mf_load_conn_t *c);
/* Opens the socket (and sends once connected). */
void mf__load_conn_open(mf_load_conn_t *c);
/* Closes the socket and stops its timer: the end of the run. */
void mf__load_conn_close(mf_load_conn_t *c);
/* The tick's check: a response or a connect older than the timeout. */
void mf__load_conn_check_timeout(mf_load_conn_t *c, uint64_t now_ns,
                                 uint64_t timeout_ns);

#endif /* MF_LOAD_INT_H */
