/*
 * moonflow/load.h — the HTTP load generator of one loop: `connections`
 * client connections that send requests and read responses as fast as the
 * server answers (closed loop, as wrk), or each at its share of a constant
 * rate (open loop, as wrk2), and record every response's latency.
 *
 * One mf_load_t per worker loop; `moonflow bench -t N` runs N of them and
 * merges their stats. Everything of a load happens on its loop's thread,
 * hooks included.
 *
 * The hot path. A connection keeps one request buffer (the static request,
 * or the bytes the request hook last gave) and one read buffer; it writes
 * a request straight away (no wait for writability unless the socket is
 * full), and reads until the response parser says the response is
 * complete, with no read to confirm EAGAIN when a read returned less than
 * asked. Per request in steady state: one write, one read and a share of
 * one epoll_wait; no allocation, no lock.
 *
 * Latency is measured, in nanoseconds of CLOCK_MONOTONIC, from the moment
 * the request was written (closed loop), or from the moment it was due
 * (constant rate: the k-th request of a connection is due at start + k /
 * (rate / connections), whether or not the connection was free then), to
 * the moment its response was complete. A stalled server thus shows in the
 * constant-rate percentiles for as long as it stalled, where a closed loop
 * records one slow request (coordinated omission).
 *
 * A pipelined request buffer (several requests back to back, as wrk's
 * pipeline.lua returns) counts as that many requests: the engine counts the
 * heads (and their Content-Length bodies) in the bytes, and expects as many
 * responses, each recorded from the buffer's write.
 *
 * Errors are counted, never fatal to the run, as in wrk: a connect that
 * fails (connect), a read that fails or an answer that does not parse
 * (read), a write that fails (write), a status >= 400 (status: the response
 * still counts as a request), a response not complete within timeout_ns
 * (timeout: the connection is closed and opened again). A connection that
 * fails is opened again after 10 ms.
 *
 * Ownership: the load copies cfg (targets, requests, names); hooks' user
 * pointers are borrowed. mf_load_stats points into the load: valid until
 * mf_load_destroy.
 */
#ifndef MOONFLOW_LOAD_H
#define MOONFLOW_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dns.h"
#include "hdr.h"
#include "http_parser.h"
#include "loop.h"

MF_EXTERN_C_BEGIN

typedef struct mf_load mf_load_t;

/* One URL: where to connect and what to send. */
typedef struct mf_load_target {
    mf_sockaddr_t addr;  /* resolved by the caller (wrk.lookup, thread.addr) */
    bool tls;            /* https: TLS with SNI host, certificate not checked
                            (as wrk) */
    const char *host;    /* SNI; may be NULL */
    const char *request; /* the static request: complete HTTP/1.1 bytes */
    size_t request_len;
} mf_load_target_t;

typedef struct mf_load_config {
    const mf_load_target_t *targets; /* connection i uses i % ntargets */
    size_t ntargets;
    unsigned connections;       /* on this loop, >= 1 */
    uint64_t duration_ns;       /* of the measured run (after warm-up) */
    uint64_t warmup_ns;         /* load sent first, not recorded; 0: none */
    uint64_t timeout_ns;        /* per response; 0: 2 s (wrk's default) */
    double rate;                /* requests/s of this loop; 0: closed loop */
    bool keepalive;             /* false: "Connection: close" requests are the
                                   caller's; the engine closes after each
                                   response and connects again */
    uint64_t requests_per_conn; /* close and reconnect after this many; 0:
                                   never */
} mf_load_config_t;

/* The hooks a script gives (wrk's request(), response(), delay()); each
 * may be NULL. They run on the load's loop; a hook may call mf_load_stop. */
typedef struct mf_load_hooks {
    /* The bytes of the next request(s) for a connection to target t: 0 and
     * *buf and *len set (the engine copies them before it returns), or < 0 to
     * stop the load with that error (mf_load_error). */
    int (*request)(void *user, size_t t, const char **buf, size_t *len);
    /* Milliseconds to wait before the connection sends its next request. */
    uint64_t (*delay)(void *user);
    /* A complete response: its parsed head and its body (de-chunked). When
     * this hook is set the engine keeps heads and bodies; otherwise it only
     * frames them. Returns < 0 to stop the load (a script error). */
    int (*response)(void *user, size_t t, const mf_http_response_t *head,
                    const char *body, size_t body_len);
    void *user;
} mf_load_hooks_t;

typedef struct mf_load_errors {
    uint64_t connect, read, write, status, timeout;
} mf_load_errors_t;

typedef struct mf_load_stats {
    uint64_t requests;    /* responses completed in the measured window */
    uint64_t bytes;       /* read in the measured window */
    uint64_t duration_ns; /* the measured window as it ran */
    mf_load_errors_t errors;
    mf_hdr_t *latency; /* every response's, ns */
    mf_hdr_t *rate;    /* this loop's requests/s, sampled every 100 ms
                          (wrk's Req/Sec per thread) */
    /* Per target (cfg order): requests, errors and latency (with one target,
     * target_latency[0] is latency itself). */
    size_t ntargets;
    uint64_t *target_requests;
    uint64_t *target_errors; /* every kind, status errors included */
    mf_hdr_t **target_latency;
} mf_load_stats_t;

/* A load on loop with a copy of cfg; NULL with *err (MF_EINVAL: a field out
 * of range, MF_ENOMEM) when it cannot be made. */
MF_API mf_load_t *mf_load_create(mf_loop_t *loop, const mf_load_config_t *cfg,
                                 const mf_load_hooks_t *hooks, int *err);
/* Opens the connections and runs: warm-up, then the measured window; when
 * it is over (or mf_load_stop), closes every connection and calls done on
 * the loop, once, never from inside mf_load_start. */
MF_API void mf_load_start(mf_load_t *load, void (*done)(mf_load_t *, void *),
                          void *user);
/* Ends the run now (wrk's thread:stop()): done follows from the loop. */
MF_API void mf_load_stop(mf_load_t *load);
/* 0, or why the run stopped early (a hook's error code). */
MF_API int mf_load_error(const mf_load_t *load);
MF_API const mf_load_stats_t *mf_load_stats(const mf_load_t *load);
/* Live counters for a progress line, readable from another thread while it
 * runs (relaxed atomics, refreshed by the loop every 100 ms): requests and
 * errors of the measured window so far, and the p99 latency so far. */
typedef struct mf_load_progress {
    uint64_t requests, errors, p99_ns;
    bool warming_up;
} mf_load_progress_t;
MF_API void mf_load_progress(const mf_load_t *load, mf_load_progress_t *out);
/* After done (or before start). */
MF_API void mf_load_destroy(mf_load_t *load);

/* Requests in buf (complete heads and their Content-Length bodies, back
 * to back): the pipeline depth of a request buffer; 0 when buf does not
 * hold complete requests. */
MF_API size_t mf_load_count_requests(const char *buf, size_t len);

MF_EXTERN_C_END

#endif /* MOONFLOW_LOAD_H */
