/*
 * http_server_int.h — the server's connection and exchange structs, shared
 * by http_server.c (listener, lifecycle, graceful stop), http_conn.c (reading,
 * parsing, timeouts, writing) and http_exchange.c (the handler-facing API and
 * response serialisation). Internal.
 *
 * Ownership: the server owns its connections (srv->conns). A connection owns
 * at most one exchange at a time (allocated per request from the loop's free
 * lists, so an idle keep-alive connection holds no request memory and no
 * input buffer). A connection's memory is released when it is closed AND
 * its exchange is no longer held by a handler or a series, so a handler's
 * late send after a disconnect still touches live memory. Releases happen
 * from a deferred post, never inside the callback that closed it.
 */
#ifndef MF_HTTP_SERVER_INT_H
#define MF_HTTP_SERVER_INT_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "engine/buf.h"
#include "moonflow/http_server.h"
#include "net/tls.h"

#define MF_HTTP_MAX_HEADERS 100
/* Output segments: copies coalesce into conn->out; only big bodies get a
 * segment of their own. A full table pauses pipelined parsing. */
#define MF_CONN_MAX_SEGS 4
/* Bodies up to this size are copied into conn->out (one write for head and
 * body); bigger ones are written from their own memory. */
#define MF_HTTP_COPY_BODY_MAX (16 * 1024)
#define MF_CONN_IN_INITIAL 4096
#define MF_CONN_LINGER_MS 2000

/* What the connection is waiting for; picks the timeout that applies. */
typedef enum mf_conn_phase {
    MF_CONN_IDLE,      /* keep-alive: waiting for the next request */
    MF_CONN_HEAD,      /* some bytes of a head have arrived */
    MF_CONN_BODY,      /* head parsed, body bytes pending */
    MF_CONN_HANDLING,  /* the handler owns the exchange */
    MF_CONN_LINGERING, /* answered an error; draining before close */
    MF_CONN_CLOSED
} mf_conn_phase_t;

typedef enum mf_ex_state {
    MF_EX_NONE,   /* no request on the connection */
    MF_EX_ACTIVE, /* handler running, series running or held */
    MF_EX_STREAM, /* streamed response: head sent, chunks flowing */
    MF_EX_DONE
} mf_ex_state_t;

typedef struct mf_http_conn mf_http_conn_t;

/* A request body being received: kept out of the connection so that an
 * idle keep-alive connection stays small (it fits a 512-byte slot). */
typedef struct mf_conn_body {
    size_t head_len;         /* the parsed head's length */
    size_t body_have;        /* decoded body bytes after the head */
    uint64_t content_length; /* when not chunked */
    mf_http_chunked_t chunked;
    bool chunked_body;
    bool sent_continue;
} mf_conn_body_t;

#define MF_EX_STATIC_LINES 2

struct mf_http_exchange {
    mf_http_conn_t *conn;
    size_t raw_len; /* head + body bytes the request took in conn->in */
    mf_http_request_t req;
    const char *body;
    size_t body_len;
    mf_ex_state_t state;
    bool held;
    bool in_handler;   /* a send now only marks; the caller finishes */
    bool closed_early; /* connection went away before the response */
    int status;
    mf_buf_t resp_headers; /* "Name: value\r\n" lines as added */
    mf_buf_t resp_body;    /* appended body */
    const char *body_ref;  /* zero-copy body */
    size_t body_ref_len;
    /* constant header lines (add_header_static): referenced, not copied */
    const char *static_lines[MF_EX_STATIC_LINES];
    uint16_t static_lens[MF_EX_STATIC_LINES];
    unsigned nstatic;
    mf_series_t *series;
    mf_http_exchange_close_cb on_close;
    void *on_close_arg;
    mf_http_exchange_drain_cb on_drain;
    void *on_drain_arg;
    mf_post_t drain_post;
    mf_http_header_t headers[MF_HTTP_MAX_HEADERS]; /* last: not zeroed */
};

/* A piece of output: bytes in conn->out at [off, off+len), or memory that
 * is referenced (owned or not) until written. */
typedef struct mf_out_seg {
    const char *ptr; /* NULL: lives in conn->out at `off` */
    size_t off;
    size_t len;
    mf_buf_t owned; /* released once written (a moved response body) */
} mf_out_seg_t;

struct mf_http_conn {
    mf_io_t io;
    mf_timer_t timer;
    mf_http_server_t *srv;
    mf_loop_t *loop;
    mf_list_t link; /* srv->conns */
    SSL *ssl;
    bool handshaking;
    mf_conn_phase_t phase;
    bool keep_alive;  /* the current request allows reuse */
    bool close_after; /* close once the output is flushed */
    bool peer_closed; /* read returned EOF */
    bool rdhup;       /* the peer half-closed: read to EOF */
    bool in_process;  /* inside mf__conn_process: flush at its end */
    bool release_posted;
    uint64_t deadline; /* loop ms; the timer may fire early (lazy) */
    unsigned requests; /* served on this connection */
    mf_buf_t in;
    size_t in_off;        /* start of the current (unparsed) request */
    size_t scanned;       /* head bytes already searched for the end */
    mf_conn_body_t *body; /* BODY phase only, from the free lists */
    mf_buf_t out;
    mf_out_seg_t segs[MF_CONN_MAX_SEGS];
    int nsegs;
    size_t seg_done; /* bytes of segs[0] already written */
    mf_sockaddr_t peer;
    mf_http_exchange_t *ex; /* the request being served, or NULL */
    mf_post_t release_post;
};

struct mf_http_server {
    mf_loop_t *loop;
    mf_http_server_config_t config;
    mf_http_handler handler;
    void *user;
    int listen_fd;
    mf_io_t listen_io;
    bool accepting;
    uint16_t port;
    mf_tls_server_t *tls;
    mf_list_t conns;
    size_t nconns;
    bool stopping;
    mf_http_server_stopped_cb stopped_cb;
    void *stopped_arg;
    mf_post_t stopped_post;
    long date_sec;
    uint64_t date_checked; /* loop time of the last clock read */
    char date[40];         /* "Date: Tue, 01 Dec 2026 10:00:00 GMT\r\n" */
    size_t date_len;
    char server_line[80];
    size_t server_line_len;
};

/* http_conn.c */
void mf__conn_accepted(mf_http_server_t *srv, int fd,
                       const mf_sockaddr_t *peer);
void mf__conn_close(mf_http_conn_t *conn);
/* The exchange has queued its response: flush and go on with the input. */
void mf__conn_response_queued(mf_http_conn_t *conn);
/* Queues bytes (copied) / a segment for output. 0 or MF_ENOMEM. */
int mf__conn_queue_copy(mf_http_conn_t *conn, const void *data, size_t len);
/* Queues n pieces as one copy: a single reservation and segment update
 * (a response head is several pieces). */
typedef struct mf_piece {
    const void *data;
    size_t len;
} mf_piece_t;
int mf__conn_queue_pieces(mf_http_conn_t *conn, const mf_piece_t *pieces,
                          size_t n);
int mf__conn_queue_ref(mf_http_conn_t *conn, const char *ptr, size_t len,
                       mf_buf_t *owned);
int mf__conn_flush(mf_http_conn_t *conn);
/* Bytes queued and not yet written. */
size_t mf__conn_pending(const mf_http_conn_t *conn);
/* Called by the exchange when the handler lets go; may free the conn. */
void mf__conn_maybe_release(mf_http_conn_t *conn);

/* http_exchange.c */
/* Runs the handler for conn->ex, then sends or leaves it to the flow. */
void mf__exchange_run_handler(mf_http_exchange_t *ex);
/* The connection closed with the exchange still active. */
void mf__exchange_connection_lost(mf_http_exchange_t *ex);
/* Frees an exchange's buffers and memory. */
void mf__exchange_free(mf_http_exchange_t *ex);
/* Queues a complete error response (status 4xx/5xx) with Connection: close. */
void mf__send_error(mf_http_conn_t *conn, int status);

/* http_server.c */
void mf__server_conn_gone(mf_http_server_t *srv);
const char *mf__server_date(mf_http_server_t *srv, size_t *len);

#endif /* MF_HTTP_SERVER_INT_H */
