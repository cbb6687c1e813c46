/*
 * stream_int.h — the stream record, shared by stream.c (connecting, I/O,
 * closing: the owner of the record) and stream_pool.c (the keepalive
 * pool: idle streams in the loop's endpoint pool, moonflow/endpoint.h,
 * which links them through s->pc and closes dead ones with the calls
 * below). Internal.
 */
#ifndef MF_STREAM_INT_H
#define MF_STREAM_INT_H

#include "client_open.h"
#include "moonflow/endpoint.h"
#include "moonflow/stream.h"
#include "moonflow/upstream.h"

typedef enum mf_stream_state {
    MF_STREAM_NEW,         /* created, no connect yet */
    MF_STREAM_CONNECTING,  /* the dial runs: DNS, then a connect */
    MF_STREAM_HANDSHAKING, /* TLS */
    MF_STREAM_OPEN,        /* connected (and TLS done when asked) */
    MF_STREAM_POOLED,      /* idle in the keepalive pool */
    MF_STREAM_FAILED,      /* connect or handshake failed: only close */
    MF_STREAM_CLOSED       /* fd closed; freed once no callback is pending */
} mf_stream_state_t;

/* One pending operation: the read, or the write (connect and handshake use
 * the write slot: nothing else can run before they end). */
typedef struct mf_stream_op {
    mf_stream_t *owner;
    mf_stream_cb cb;
    void *data;
    mf_timer_t timer;
    mf_post_t post; /* the completion, deferred */
    ssize_t status;
    bool active; /* started, its callback has not run */
    bool posted; /* its completion waits in the loop's deferred queue */
} mf_stream_op_t;

struct mf_stream {
    mf_loop_t *loop;
    mf_stream_type_t type;
    mf_stream_state_t state;
    mf_io_t io;
    SSL *ssl;
    long verify_result;     /* of the last failed handshake (X509_V_*) */
    uint64_t tls_identity;  /* what the session was made for (name, check) */
    bool tls_other;         /* the last handshake asked for another one */
    uint32_t timeout_ms[3]; /* connect, send, read */
    mf_stream_op_t rd, wr;
    void *rbuf;
    size_t rlen;
    struct iovec *wiov;
    int wcnt;
    size_t written;
    unsigned in_callback; /* an operation's callback runs: no free yet */
    unsigned reused;
    mf_pconn_t pc;  /* in an endpoint while pooled (the pool's links) */
    mf_dial_t dial; /* its callback may be due after a close */
    /* A connect to an upstream group's name: its attempts (loop memory,
     * freed with the stream). NULL for an ordinary host. */
    mf_upstream_try_t *ups;
};

/* Closes the socket and TLS at once (the pool calls it on streams it
 * has taken out of their endpoint). */
void mf__stream_close(mf_stream_t *s);
/* Whether an idle stream can be reused: nothing to read, no end of file
 * (a non-blocking peek), no TLS bytes buffered. */
bool mf__stream_healthy(const mf_stream_t *s);

#endif /* MF_STREAM_INT_H */
