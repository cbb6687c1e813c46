/*
 * http_proto.h — the interface between an HTTP protocol and the exchange,
 * both ways. Internal, a leaf: types only, no code.
 *
 * A protocol (HTTP/1 in http1.c; HTTP/2 or a WebSocket upgrade would sit
 * beside it) turns a transport's bytes (http_transport.h) into requests and
 * frames responses back. The exchange (http_exchange.c) is the handler's
 * object for one request; it knows no wire format and no transport.
 *
 *   down, exchange -> protocol: mf_http_proto_ops_t. The protocol hands
 *     its ops and its state (proto) to each exchange it creates; the
 *     exchange sends its response through them only.
 *   up, protocol -> exchange: mf_http_exchange_ops_t. The server registers
 *     the exchange's ops in the site (http_site.h); a protocol creates one
 *     exchange per request through them, runs it, tells it when the
 *     connection is lost or its output drained, and destroys it.
 *
 * Ownership and lifetime:
 *   - The protocol owns proto and the request bytes (the request's strings
 *     and body point into the protocol's input). Both stay valid and in
 *     place from create until the protocol destroys the exchange, even
 *     after the connection closed: a handler's late send after a
 *     disconnect still touches live memory (and does nothing).
 *   - The exchange owns itself and its response buffers. It calls
 *     release exactly once, when its response is fully queued (or the
 *     connection is gone) and it will call the protocol no more; the
 *     protocol destroys it afterwards, never inside a call from the
 *     exchange that is still on the stack.
 *   - All on one loop thread; no call here blocks.
 */
#ifndef MF_HTTP_PROTO_H
#define MF_HTTP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/buf.h"
#include "moonflow/http_server.h"

/* Request headers kept per exchange (and parsed per request). */
#define MF_HTTP_MAX_HEADERS 100
/* Constant header lines an exchange keeps by reference
 * (mf_http_exchange_add_header_static); more are copied. */
#define MF_HTTP_STATIC_LINES 2

struct mf_http_site;

/* How a response's body is delimited. */
typedef enum mf_http_framing {
    MF_HTTP_FRAME_NONE,   /* no body by its status (1xx, 204, 304) */
    MF_HTTP_FRAME_LENGTH, /* exactly `length` bytes (even for HEAD) */
    MF_HTTP_FRAME_STREAM  /* unknown length, sent in pieces until the end */
} mf_http_framing_t;

/* A response head as the exchange describes it: the protocol adds its own
 * lines (status, Server, Date, framing, connection) and serialises. The
 * memory is the exchange's, read during the call only. */
typedef struct mf_http_response_head {
    int status;
    mf_http_framing_t framing;
    uint64_t length;   /* MF_HTTP_FRAME_LENGTH */
    const char *lines; /* the handler's fields, "Name: value\r\n" each */
    size_t lines_len;
    const char *const *static_lines; /* more whole lines, nstatic of them */
    const uint16_t *static_lens;
    unsigned nstatic; /* at most MF_HTTP_STATIC_LINES */
} mf_http_response_head_t;

/* What an exchange may ask of its protocol; proto is the protocol's state
 * given at create. The sends queue output (none writes by itself: flush
 * does); each returns 0, or MF_ENOMEM with nothing queued. */
typedef struct mf_http_proto_ops {
    /* The head, with body[0..body_len) (or nothing) copied right behind
     * it: a small response leaves in one write. */
    int (*send_head)(void *proto, const mf_http_response_head_t *head,
                     const char *body, size_t body_len);
    /* Body bytes written from their own memory, which stays valid until
     * written; with owned, the protocol takes that buffer (owned is left
     * empty) and releases it once written. */
    int (*send_body)(void *proto, const char *data, size_t len,
                     mf_buf_t *owned);
    /* Body bytes from a file: [offset, offset+len) of fd, a regular file
     * open for reading, written from the file (HTTP/1 on a plain socket:
     * sendfile(2); under TLS, or a protocol that frames its data, read a
     * chunk at a time, never the whole file). On 0 the protocol owns fd
     * and closes it once written or at the close; on MF_ENOMEM nothing is
     * queued and fd stays the caller's. */
    int (*send_file)(void *proto, int fd, uint64_t offset, uint64_t len);
    /* One piece of a MF_HTTP_FRAME_STREAM body, framed by the protocol
     * (copied). */
    int (*send_piece)(void *proto, const void *data, size_t len);
    /* The end of a streamed body. */
    int (*end_stream)(void *proto);
    /* The end of a streamed body followed by trailer fields (lines
     * "Name: value\r\n", valid and allowed: mf_http_trailer_fault; read
     * during the call only). 0, MF_ENOMEM, or MF_ENOSYS when the stream
     * cannot carry trailers (HTTP/1.0, raw): then it ends without them. */
    int (*end_stream_trailers)(void *proto, const char *lines, size_t len);
    /* The request's trailer fields, "name: value\r\n" each, as far as
     * they came after its body (the protocol's memory, valid until the
     * next call into it); NULL with *len 0 when none came. NULL op: the
     * protocol does not keep them. */
    const char *(*request_trailers)(const void *proto, size_t *len);
    /* A whole error answer (status, a text body) instead of a response,
     * nothing of which was sent; the connection ends after it. */
    int (*send_error)(void *proto, int status);
    /* Writes what is queued: 0 (all written, or the rest waits for the
     * socket), or a negative code once the connection is closed. */
    int (*flush)(void *proto);
    /* Bytes queued and not yet written. */
    size_t (*pending)(const void *proto);
    /* Asks for one drained call (mf_http_exchange_ops_t) once the pending
     * output is below `below` bytes after a write. */
    void (*watch_drain)(void *proto, size_t below);
    /* The exchange is done with the protocol (see above). May destroy the
     * exchange before returning when it is not on the stack. */
    void (*release)(void *proto);
    /* Closes the connection now (the answer cannot be completed): the
     * exchange is told (lost) first. */
    void (*abort)(void *proto);
    /* A streamed body, or after upgrade the connection's bytes: copies up
     * to len of them into buf (mf_http_exchange_read's answers; a refused
     * body answers MF_EMSGSIZE, MF_EPROTO or MF_ETIMEDOUT, and
     * body_status then says which status the client should hear). */
    ssize_t (*read)(void *proto, void *buf, size_t len);
    int (*body_status)(const void *proto);
    /* Asks for one readable call (mf_http_exchange_ops_t) once a read has
     * an answer other than MF_EAGAIN; never calls it inside this call. */
    void (*watch_read)(void *proto);
    /* Stops parsing the connection: what follows the request is raw bytes
     * for read, sends are not framed, the connection ends with the
     * exchange, and the head says "Connection: upgrade" for a 101. 0 or
     * MF_EBUSY (a streamed body is not read to its end). Before the head
     * is queued. */
    int (*upgrade)(void *proto);
} mf_http_proto_ops_t;

/* What a protocol may ask of the exchange layer (registered by the server
 * in the site; see http_exchange.h for the one implementation). */
typedef struct mf_http_exchange_ops {
    /* The exchange of a parsed request (req's headers are copied; its
     * strings, and body, point into the protocol's input). peer lives as
     * long as proto. A body the protocol streams comes as body NULL and
     * body_len SIZE_MAX (read through the proto ops). */
    mf_http_exchange_t *(*create)(struct mf_http_site *site,
                                  const mf_http_proto_ops_t *ops, void *proto,
                                  const mf_sockaddr_t *peer,
                                  const mf_http_request_t *req,
                                  const char *body, size_t body_len);
    /* Runs the handler, then sends the response, starts the exchange's
     * series, or leaves it to its holder. */
    void (*run)(mf_http_exchange_t *ex);
    /* The connection closed before the exchange released it: its on_drain
     * and on_close callbacks run; may release. */
    void (*lost)(mf_http_exchange_t *ex);
    /* The output fell below the watched mark: wakes a waiting writer. */
    void (*drained)(mf_http_exchange_t *ex);
    /* A watched read has its answer now: wakes a waiting reader. */
    void (*readable)(mf_http_exchange_t *ex);
    /* The protocol moved the request's bytes: what was at from[0..len) is
     * at to now, and every pointer of the exchange into them follows. */
    void (*moved)(mf_http_exchange_t *ex, const char *from, size_t len,
                  const char *to);
    /* Frees the exchange and its response buffers. */
    void (*destroy)(mf_http_exchange_t *ex);
} mf_http_exchange_ops_t;

#endif /* MF_HTTP_PROTO_H */
