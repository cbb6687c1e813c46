/*
 * stream_int.h — the stream record, shared by stream.c (connecting, I/O,
 * closing: the owner of the record) and stream_pool.c (the per-loop
 * keepalive pool, which only links idle streams and closes dead ones
 * through the two calls below). Internal.
 */
#ifndef MF_STREAM_INT_H
#define MF_STREAM_INT_H

#include "client_open.h"
#include "moonflow/stream.h"

typedef enum mf_stream_state {
    MF_STREAM_NEW,         /* created, no connect yet */
    MF_STREAM_RESOLVING,   /* the DNS query runs */
    MF_STREAM_CONNECTING,  /* a non-blocking connect runs */
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
    bool dns_pending;     /* the query's callback has not run */
    unsigned in_callback; /* an operation's callback runs: no free yet */
    unsigned reused;
    /* the pool's: its bucket's idle list, the bucket, the idle timer */
    mf_list_t pool_link;
    void *bucket;
    mf_timer_t idle;
    mf_client_open_t open;
    mf_dns_query_t dns;
};

/* Closes the socket and TLS at once, without touching the pool's links
 * (the pool calls it on streams it has unlinked). */
void mf__stream_close(mf_stream_t *s);
/* The socket of a pooled stream fired: the peer closed it or sent
 * something unasked; it leaves the pool, closed (stream_pool.c). */
void mf__stream_pool_event(mf_stream_t *s);
/* Whether an idle stream can be reused: nothing to read, no end of file
 * (a non-blocking peek), no TLS bytes buffered. */
bool mf__stream_healthy(const mf_stream_t *s);

#endif /* MF_STREAM_INT_H */
