/*
 * moonflow/http_server.h — the HTTP/1.1 server, one instance per loop.
 *
 * Each worker loop runs its own server with its own SO_REUSEPORT listener
 * (the kernel spreads connections across workers); a connection and its
 * requests live on that loop for their whole life, with no locks. A server
 * opens its listener from `listen` (shared with any listener of the same
 * user on that port), or accepts on sockets opened for it (`listen_fds`,
 * from mf_listen_open: one process per address, handed over on a graceful
 * restart; moonflow/listen.h).
 *
 * A request is an *exchange*: the server parses the head (and the body),
 * calls the handler with the exchange, and sends the response when the
 * handler is done with it. Three ways to be done:
 *   1. Synchronous: set status/headers/body in the handler and return. The
 *      response is sent right after the handler returns.
 *   2. A flow (Workflow's server task): push tasks onto
 *      mf_http_exchange_series(ex) in the handler; the response is sent when
 *      that series has finished (its tasks' callbacks fill the response).
 *   3. Held: call mf_http_exchange_hold(ex), return, and call
 *      mf_http_exchange_send(ex) later (the Lua host resumes a coroutine).
 * Streaming: mf_http_exchange_write sends a chunked body piece by piece
 * (headers go out with the first piece); mf_http_exchange_send ends it.
 * The other way, a handler may read the request body as a stream
 * (mf_http_exchange_read: the config's stream_body decides per request
 * whether the server leaves the body unread for it), and take the raw
 * connection after the head (mf_http_exchange_upgrade: WebSocket and
 * other upgrades).
 *
 * Pipelined requests are answered in order: the next request on a
 * connection is parsed only when the current response is queued.
 *
 * Errors on input never reach the handler: malformed requests get 400,
 * oversize heads 431, long request lines 414, big bodies 413, unsupported
 * versions 505, transfer codings other than chunked 501, bodies that come
 * too slowly 408, and the connection is closed after the answer. A bad
 * head is answered at its first bad byte (moonflow/http_parser.h). A head
 * or body that stalls past its timeout is closed unanswered (408 to the
 * hook). Each of these is reported to the config's on_reject hook (an
 * access log writes its line there).
 *
 * Never a silently short answer: if memory runs out while a response is
 * built (an added header, an appended body, the queued head), the client
 * gets a 500 with Connection: close instead; once the head is out, the
 * connection is closed, so the client sees a cut body (no last chunk, or
 * fewer bytes than Content-Length). Each case is counted
 * (mf_http_server_failed_responses) and reported on stderr. The same 500
 * answers a response with an invalid header (mf_http_exchange_add_header),
 * and the same cut ends a stream the handler cannot finish
 * (mf_http_exchange_abort): a complete-looking answer is always complete.
 *
 * Threads: the loop's thread only. Ownership: the server owns connections
 * and exchanges; an exchange pointer is valid from the handler call until
 * the response is sent (or the on_close callback ran). Strings and bodies
 * given to the exchange are copied unless the call says "_ref".
 */
#ifndef MOONFLOW_HTTP_SERVER_H
#define MOONFLOW_HTTP_SERVER_H

#include <stdint.h>
#include <sys/types.h>

#include "dns.h"
#include "http_compress.h"
#include "http_parser.h"
#include "series.h"
#include "tls.h"

MF_EXTERN_C_BEGIN

typedef struct mf_http_server mf_http_server_t;
typedef struct mf_http_exchange mf_http_exchange_t;

typedef void (*mf_http_handler)(mf_http_exchange_t *ex, void *user);

/* The connection refused a request without calling the handler: status is
 * what it answered (400, 413, 414, 431, 501, 505; 500 when it had no memory
 * to take the request) or 408 for a head or body that stalled past its
 * timeout (closed unanswered). req is what is known of the request: the
 * whole head when it was complete (a body too big or stalled), else only
 * the parts of the request line that arrived whole — method, then target
 * (target_len 0 when not known), then minor_version (-1 when not known) —
 * with no headers; NULL when not even the method is known. body_bytes is
 * the length of the answer's body (mf_http_error_body_len(status)), 0 when
 * the connection closes unanswered. req and its strings are valid during
 * the call only. user is the handler's. Runs on the loop's thread, before
 * the answer is written; must not block. */
typedef void (*mf_http_reject_cb)(mf_http_server_t *srv, int status,
                                  const mf_http_request_t *req,
                                  const mf_sockaddr_t *peer, size_t body_bytes,
                                  void *user);

/* HTTP/2 (RFC 9113) on the same listeners: by prior knowledge on plain
 * TCP (the client's first bytes are the connection preface) and by ALPN
 * ("h2") on TLS. The numbers are the SETTINGS the server announces. */
typedef struct mf_http2_config {
    bool enabled;                    /* default true */
    uint32_t max_concurrent_streams; /* default 128 */
    uint32_t max_header_list_size;   /* a request's header block; 65536 */
    uint32_t max_frame_size;         /* 16384 to 16777215; 16384 */
    uint32_t initial_window_size;    /* per stream, bytes; 65535 */
} mf_http2_config_t;

#define MF_HTTP2_CONFIG_DEFAULT        \
    {                                  \
        true, 128, 65536, 16384, 65535 \
    }

typedef struct mf_http_server_config {
    const char *listen;            /* "127.0.0.1:8080", "[::1]:8443", ":8080" */
    int backlog;                   /* default 1024 */
    size_t max_connections;        /* per loop; default 10000 */
    mf_http_limits_t limits;       /* head/line/header-count limits */
    uint64_t max_body;             /* 413 above; default 1 MiB */
    uint32_t header_timeout_ms;    /* whole head; default 10000 (slowloris) */
    uint32_t body_timeout_ms;      /* between body reads; default 10000 */
    uint32_t keepalive_timeout_ms; /* idle between requests; default 60000 */
    uint32_t write_timeout_ms;     /* a stalled response; default 10000 */
    uint32_t max_keepalive_requests; /* per connection; 0 = unlimited */
    /* A body that keeps coming but too slowly is answered 408 and closed
     * (nginx answers its client_body_timeout so). It must arrive whole
     * within body_total_timeout_ms of its head (0, the default: no such
     * bound), and once body_rate_grace_ms have passed, at an average of
     * min_body_rate bytes a second: by then it may take grace + received /
     * rate (Apache mod_reqtimeout's MinRate; 0: no minimum). Defaults: 500
     * bytes/s after 10000 ms. A body that stops for body_timeout_ms is
     * closed without an answer, as before. */
    uint32_t body_total_timeout_ms;
    uint32_t min_body_rate;
    uint32_t body_rate_grace_ms;
    /* HTTPS when tls.cert_file and tls.key_file are set; SNI: extra
     * certificates by server name (tls.h). */
    mf_tls_server_config_t tls;
    const char *server_header;   /* default "moonflow"; "" to omit */
    mf_http_reject_cb on_reject; /* default NULL: refused requests unseen */
    /* Listening, non-blocking sockets to accept on instead of opening
     * `listen` (nlisten_fds > 0). The server owns them from the start call
     * on, failed or not, and closes them when it stops: pass dups of
     * sockets kept elsewhere. The array itself is only read during the
     * call. */
    const int *listen_fds;
    unsigned nlisten_fds;
    /* Whether a request's body is left to the handler to read as a stream
     * (mf_http_exchange_read) instead of being read whole before the
     * handler runs: asked, with the handler's user, once the head is
     * parsed, for a request with a body. NULL (the default): every body is
     * read first. A streamed body keeps the limits of a read one (max_body:
     * 413; a chunked body is refused at its first byte past it), the body
     * deadlines (body_total_timeout_ms, min_body_rate: 408) as its bytes
     * arrive, and 100-continue goes out at the first read that waits. */
    bool (*stream_body)(const mf_http_request_t *req, void *user);
    /* Response compression (moonflow/http_compress.h); NULL (the
     * default): none. Read, not copied: it outlives the server. */
    const mf_http_compress_config_t *compress;
    /* HTTP/2 beside HTTP/1.1 (see above). Over HTTP/2 a streamed body
     * (stream_body) gives its flow-control window back as the handler
     * reads it; a body read whole, as it is kept (max_body per request,
     * and at most max(8 MiB, max_body) held per connection for handlers
     * not run yet: 503 past it). */
    mf_http2_config_t http2;
} mf_http_server_config_t;

/* Fills every field with its default. */
MF_API void mf_http_server_config_init(mf_http_server_config_t *config);

/* Creates the server on the loop and starts listening. On failure returns
 * NULL and, if err is not NULL, a negative MF_E* code (bad address, port in
 * use, unreadable certificate, MF_EINVAL for http2 numbers outside RFC
 * 9113's ranges ...). */
MF_API mf_http_server_t *
mf_http_server_start(mf_loop_t *loop, const mf_http_server_config_t *config,
                     mf_http_handler handler, void *user, int *err);

/* Graceful stop: closes the listener and idle connections at once, lets
 * requests in flight finish (their responses carry Connection: close), then
 * calls done(server, arg) on the loop and frees the server. Call once
 * (this or mf_http_server_drain). */
typedef void (*mf_http_server_stopped_cb)(mf_http_server_t *srv, void *arg);
MF_API void mf_http_server_stop(mf_http_server_t *srv,
                                mf_http_server_stopped_cb done, void *arg);
/* The stop of a server whose listeners another process accepts on now (a
 * graceful restart): as mf_http_server_stop, except that an idle
 * keep-alive connection is not closed at once, where a request the client
 * has just sent would cross the close and fail: it gets idle_ms to send
 * one more request, answered with Connection: close, and only one still
 * idle then is closed. idle_ms 0 is mf_http_server_stop. */
MF_API void mf_http_server_drain(mf_http_server_t *srv, uint32_t idle_ms,
                                 mf_http_server_stopped_cb done, void *arg);

/* The bound port (useful with port 0). */
MF_API uint16_t mf_http_server_port(const mf_http_server_t *srv);
/* Open connections on this loop. */
MF_API size_t mf_http_server_connections(const mf_http_server_t *srv);
/* The server's connections now (idle: keep-alive ones waiting for their
 * next request) and its counts since it started. Loop thread; walks the
 * connections (for a scrape, not per request). */
typedef struct mf_http_server_stats {
    size_t connections;
    size_t idle;
    uint64_t failed_responses; /* answered 500 or cut for lack of memory */
    uint64_t invalid_headers;  /* refused by mf_http_exchange_add_header */
    /* HTTP/2, since the start: connections that spoke it, requests
     * (streams) served, RST_STREAM frames from clients, connections ended
     * with ENHANCE_YOUR_CALM (too many resets: the rapid reset attack),
     * connections ended for a flood (SETTINGS, PING or other frames that
     * each demand an answer, queued faster than the client reads them),
     * header blocks refused (over max_header_list_size, or too many
     * fields or CONTINUATION frames), and connections ended for a
     * protocol error of the client. */
    uint64_t h2_connections;
    uint64_t h2_streams;
    uint64_t h2_resets_received;
    uint64_t h2_calm_goaways;
    uint64_t h2_floods;
    uint64_t h2_headers_refused;
    uint64_t h2_protocol_errors;
} mf_http_server_stats_t;
MF_API void mf_http_server_stats(const mf_http_server_t *srv,
                                 mf_http_server_stats_t *out);

MF_API mf_loop_t *mf_http_server_loop(const mf_http_server_t *srv);
/* Responses that could not be built for lack of memory since the start:
 * each was answered 500 (with Connection: close) or, when its head was
 * already out, cut by closing the connection. Never a silent short answer. */
MF_API uint64_t mf_http_server_failed_responses(const mf_http_server_t *srv);
/* Headers refused by mf_http_exchange_add_header since the start (invalid,
 * managed by the server, or added after the head was sent). */
MF_API uint64_t mf_http_server_invalid_headers(const mf_http_server_t *srv);

/* Writes s[0..len) into out as a log line shows a client's bytes: '"', '\\'
 * and every byte outside printable ASCII become \xNN (nginx's escaping),
 * so they can neither end a quoted field nor start a new line. At most
 * cap - 1 bytes, cut at a whole escape, then a NUL (cap > 0). Returns the
 * bytes written. */
MF_API size_t mf_http_log_escape(char *out, size_t cap, const char *s,
                                 size_t len);
/* The length of the body of an answer the server makes itself: a refused
 * request, or the 500 that replaces an answer that cannot go out
 * (mf_http_exchange_abort before anything was sent). That body is one
 * line of text, "500 Internal Server Error\n". */
MF_API size_t mf_http_error_body_len(int status);

/* ---- the exchange: request side --------------------------------------- */

MF_API const mf_http_request_t *
mf_http_exchange_request(const mf_http_exchange_t *ex);
/* The whole request body (de-chunked), or NULL/0 when there is none. */
MF_API const char *mf_http_exchange_body(const mf_http_exchange_t *ex,
                                         size_t *len);
MF_API const mf_sockaddr_t *mf_http_exchange_peer(const mf_http_exchange_t *ex);
MF_API mf_loop_t *mf_http_exchange_loop(const mf_http_exchange_t *ex);
MF_API mf_http_server_t *mf_http_exchange_server(const mf_http_exchange_t *ex);

/* ---- the exchange: the body as a stream, the raw connection ----------- */

/* Reads up to len bytes of the request body into buf: the bytes (> 0), 0
 * at the body's end, MF_EAGAIN when none are there yet (mf_http_exchange_
 * on_readable tells when), or an error: MF_ECLOSED (the client is gone),
 * MF_EMSGSIZE (the body is past max_body), MF_EPROTO (bad chunked coding),
 * MF_ETIMEDOUT (the body came too slowly: the body deadlines). On these
 * three the server answers 413, 400 or 408 itself if nothing was sent yet
 * (the handler's answer is dropped) and closes the connection after it.
 * A body read whole before the handler is read from memory; a streamed
 * one (stream_body) from the connection, through a window of the input
 * that is used again as the handler reads: memory stays flat however
 * long the body. After mf_http_exchange_upgrade, reads return the
 * connection's bytes, 0 once the client has closed its side. */
MF_API ssize_t mf_http_exchange_read(mf_http_exchange_t *ex, void *buf,
                                     size_t len);
/* Whether the body is streamed (stream_body said so and it was not whole
 * when the head was parsed); mf_http_exchange_body is then NULL. */
MF_API bool mf_http_exchange_body_streamed(const mf_http_exchange_t *ex);
/* Calls cb(ex, arg) once, when a read would not answer MF_EAGAIN any more
 * (bytes, the end or an error; the connection closing too), never inside
 * this call. NULL cancels. */
typedef void (*mf_http_exchange_readable_cb)(mf_http_exchange_t *ex, void *arg);
MF_API void mf_http_exchange_on_readable(mf_http_exchange_t *ex,
                                         mf_http_exchange_readable_cb cb,
                                         void *arg);
/* Sends the response head now (status and headers, no body framing) and
 * hands the connection over: from here on mf_http_exchange_read returns
 * the client's bytes and mf_http_exchange_write sends bytes as they are
 * (no chunks); the server parses nothing more on the connection and
 * closes it when the exchange ends (_send); a graceful stop makes reads
 * answer 0, as the client's end would, so that the handler finishes. A
 * 101 answer says "Connection: upgrade", any other "Connection: close".
 * Before anything was sent only, and not while a streamed body is unread:
 * 0, MF_EBUSY (a body still on its way), MF_EINVAL (the head was sent
 * already, or a header was refused: the answer became a 500), MF_ENOMEM,
 * MF_ECLOSED, MF_ENOSYS (a request over HTTP/2, whose stream cannot
 * become a raw connection). */
MF_API int mf_http_exchange_upgrade(mf_http_exchange_t *ex);

/* ---- the exchange: response side -------------------------------------- */

MF_API void mf_http_exchange_set_status(mf_http_exchange_t *ex, int status);
/* Adds a response header (copied); leading and trailing SP/HTAB of the
 * value are trimmed. Returns 0, or:
 *   MF_EINVAL  the name is not a token, the value holds a control byte (CR,
 *              LF, NUL ...; mf_http_field_*_valid in http_parser.h), the
 *              name is one the server manages (Content-Length,
 *              Transfer-Encoding, Connection, Keep-Alive, Date: compared
 *              as whole tokens, any case), or the head was already sent;
 *   MF_ENOMEM  the header could not be stored.
 * Either is a handler error, never a silently dropped header: the server
 * counts it (mf_http_server_invalid_headers, or _failed_responses for
 * memory), says on stderr which request and header, and the answer becomes
 * a 500 with Connection: close (once a stream's head is out, the header
 * is only refused). */
MF_API int mf_http_exchange_add_header(mf_http_exchange_t *ex, const char *name,
                                       size_t name_len, const char *value,
                                       size_t value_len);
/* Adds a complete, already valid header line ("Name: value\r\n"), copied
 * as is: for constant headers on the hot path. Trusted: none of the checks
 * above is made, the caller guarantees the syntax and that the name is not
 * one the server manages (use it for literals, never for a client's or a
 * script's strings). */
MF_API void mf_http_exchange_add_header_line(mf_http_exchange_t *ex,
                                             const char *line, size_t len);
/* Adds a constant header line ("Name: value\r\n", same rules as above) by
 * reference: line must stay valid until the response is sent (a literal).
 * The first two cost no copy and no memory; more are copied. */
MF_API void mf_http_exchange_add_header_static(mf_http_exchange_t *ex,
                                               const char *line, size_t len);
/* Why a field cannot be sent as a trailer, or NULL when it can: a name
 * that is not a token, a control byte in the value, or a field RFC 9110
 * §6.5.1 keeps out of trailers (framing, routing, request modifiers,
 * authentication, response control, content processing, connection).
 * Names compared as whole tokens, any case. */
MF_API const char *mf_http_trailer_fault(const char *name, size_t name_len,
                                         const char *value, size_t value_len);
/* Adds a trailer field (copied) sent after the body's last piece: on
 * HTTP/1.1 after the last chunk, on HTTP/2 as a HEADERS frame that ends
 * the stream. A non-streamed answer that has trailers is sent streamed
 * (chunked, no Content-Length) so they can follow it. Where trailers
 * cannot go (an HTTP/1.0 client, a HEAD request, a status without a
 * body) they are dropped with a line on stderr. Returns 0, MF_EINVAL (see
 * mf_http_trailer_fault, or the answer has ended) with nothing stored,
 * or MF_ENOMEM (the answer fails like a header's, see above). */
MF_API int mf_http_exchange_add_trailer(mf_http_exchange_t *ex,
                                        const char *name, size_t name_len,
                                        const char *value, size_t value_len);
/* The request's trailer fields, "name: value\r\n" lines (names in
 * lowercase), once its body has been read to the end; NULL with *len 0
 * when none came. Kept over HTTP/2 (a HEADERS frame after the DATA,
 * bounded by max_header_list_size); HTTP/1's chunked trailer section is
 * checked and passed over, never kept. Valid until the exchange's next
 * call. */
MF_API const char *mf_http_exchange_trailers(const mf_http_exchange_t *ex,
                                             size_t *len);
/* Appends to the response body (copied). */
MF_API void mf_http_exchange_append(mf_http_exchange_t *ex, const void *data,
                                    size_t len);
/* Sets the body to caller memory that stays valid until the response is
 * sent (static strings, caches): zero copy. */
MF_API void mf_http_exchange_body_ref(mf_http_exchange_t *ex, const void *data,
                                      size_t len);

/* The exchange's series: tasks pushed here run after the handler returns;
 * the response is sent when the series is done (a task's callback may also
 * send it earlier: the connection moves on once the series is done). */
MF_API mf_series_t *mf_http_exchange_series(mf_http_exchange_t *ex);
/* The compression of this exchange's answer instead of the server's
 * (moonflow/http_compress.h; NULL: none), e.g. a route's own. Before the
 * head is sent; config must outlive the exchange. */
MF_API void
mf_http_exchange_set_compress(mf_http_exchange_t *ex,
                              const mf_http_compress_config_t *config);
/* Keeps the exchange open after the handler returns, until _send. */
MF_API void mf_http_exchange_hold(mf_http_exchange_t *ex);
/* Sends the response (or ends a streamed one). Once. From here on no
 * on_close or on_drain callback of the exchange runs. */
MF_API void mf_http_exchange_send(mf_http_exchange_t *ex);
/* Ends an answer the handler cannot complete (it failed, or ran out of
 * time), instead of _send: before anything was sent the client gets a 500
 * with Connection: close; once a streamed head is out the connection is
 * closed without the last chunk, so the client sees a cut body, never a
 * complete-looking one. Like _send: once, and no callback runs after. */
MF_API void mf_http_exchange_abort(mf_http_exchange_t *ex);
/* Appends data to the body and sends, in one step: data need only be valid
 * during the call, and a small body is copied once, straight to the
 * output. */
MF_API void mf_http_exchange_send_body(mf_http_exchange_t *ex, const void *data,
                                       size_t len);
/* Sends the response with bytes [offset, offset+len) of the file fd (a
 * regular file open for reading) as its body, Content-Length len, and ends
 * the exchange like _send. The body goes from the file to the socket
 * (sendfile(2) on a plain HTTP/1 connection; under TLS read a chunk at a
 * time on the compute pool), never whole in memory. Takes fd in every
 * case: it is closed once written, or at once when nothing of it is sent (a
 * HEAD request, a status without a body, an answer that failed). A file
 * found shorter than len while it is written closes the connection: the
 * client sees a cut body. */
MF_API void mf_http_exchange_send_file(mf_http_exchange_t *ex, int fd,
                                       uint64_t offset, uint64_t len);
/* Streams a piece of the body (chunked; for HTTP/1.0 the connection closes
 * at the end instead). The data is always queued (copied). Returns 0; 1 when
 * the output not yet written to the socket is above
 * MF_HTTP_WRITE_HIGH_WATER — the writer should wait for the drain callback
 * before writing more (a slow client must not make the server buffer a
 * whole upstream body); MF_ECLOSED if the client is gone; MF_ENOMEM if the
 * piece could not be queued (the answer became a 500, or the connection
 * was cut); MF_EINVAL on the first write after an invalid header (the
 * answer became a 500). After an error, stop writing and still call
 * mf_http_exchange_send (or _abort): it ends the exchange. */
#define MF_HTTP_WRITE_HIGH_WATER (256 * 1024)
#define MF_HTTP_WRITE_LOW_WATER (64 * 1024)
MF_API int mf_http_exchange_write(mf_http_exchange_t *ex, const void *data,
                                  size_t len);
/* Calls cb(ex, arg) once, when the unwritten output has fallen below
 * MF_HTTP_WRITE_LOW_WATER (at once, deferred, if it already is), or when the
 * connection closes (so a waiting writer wakes up; its next write returns
 * MF_ECLOSED). */
typedef void (*mf_http_exchange_drain_cb)(mf_http_exchange_t *ex, void *arg);
MF_API void mf_http_exchange_on_drain(mf_http_exchange_t *ex,
                                      mf_http_exchange_drain_cb cb, void *arg);

/* Called once if the connection closes before the response was sent (client
 * gone, timeout, server stop). After it the exchange pointer is dead: the
 * handler's pending work must drop its references (the Lua host unrefs the
 * coroutine here). */
typedef void (*mf_http_exchange_close_cb)(mf_http_exchange_t *ex, void *arg);
MF_API void mf_http_exchange_on_close(mf_http_exchange_t *ex,
                                      mf_http_exchange_close_cb cb, void *arg);

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_SERVER_H */
