/*
 * moonflow/stream.h — a connected byte stream owned by one loop: a
 * non-blocking client connection for protocols moonflow does not speak
 * itself (the Lua cosockets are built on it).
 *
 * A stream connects by host:port (DNS through the loop's resolver and its
 * cache, moonflow/dns.h, then each resolved address in turn) or to a unix
 * socket ("unix:/path"); a TCP stream may then do a TLS handshake
 * (verification on unless asked otherwise, SNI, a CA file). Reads go into a
 * caller buffer, writes take an iovec. Each operation has its own timeout
 * on the loop's timers (connect and handshake, send, read; 0 means the
 * default of 60 s: no wait is ever unbounded). A UDP stream is a connected
 * datagram socket: one read is one datagram, one write one datagram.
 *
 * Two ways to do I/O, meant to be used together: mf_stream_try_read and
 * mf_stream_try_writev never wait (the fast path), mf_stream_read and
 * mf_stream_writev wait for the socket and call back. At most one read and
 * one write are pending at a time; a read and a write may be pending
 * together. Every started operation calls back exactly once, on the loop,
 * never inside the call that started it: 0 or bytes on success, or a
 * negative MF_E* code (MF_EOF: the peer closed; MF_ETIMEDOUT; MF_EDNS;
 * MF_ETLS; MF_ECANCELED when the stream was closed first; a system error
 * such as MF_ECONNREFUSED or MF_ECONNRESET).
 *
 * The keepalive pool: one per loop, keyed by the caller's string (the Lua
 * layer uses OpenResty's "host:port[:pool]"). A stream put there keeps its
 * TLS session with it (a handshake on a stream taken back, for the same
 * name and trust, is done at once). An idle stream leaves the pool and closes
 * when its idle timeout passes, or when its socket becomes readable (the peer
 * closed it or sent something unasked); a full pool closes its least recently
 * used stream. Taking checks each candidate with a non-blocking peek and hands
 * out only a stream with nothing to read and no end of file.
 *
 * Threads: the loop's thread only. Ownership: mf_stream_create returns a
 * stream the caller owns until mf_stream_close or mf_stream_pool_put; both
 * end the caller's ownership (the memory goes back to the loop once no
 * callback is pending: a callback may close its stream). Buffers and iovec
 * arrays passed to mf_stream_read / mf_stream_writev stay the caller's and
 * must live until the callback; the iovec array is advanced in place.
 * Strings are copied. Destroying the loop closes the pooled streams.
 */
#ifndef MOONFLOW_STREAM_H
#define MOONFLOW_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "loop.h"

MF_EXTERN_C_BEGIN

typedef struct mf_stream mf_stream_t;

typedef enum mf_stream_type { MF_STREAM_TCP, MF_STREAM_UDP } mf_stream_type_t;

/* status: 0 (connect, handshake), bytes (> 0 for reads; the whole iovec
 * for writes), or a negative MF_E* code. */
typedef void (*mf_stream_cb)(mf_stream_t *stream, ssize_t status, void *data);

/* The default of every timeout (ms). */
#define MF_STREAM_DEFAULT_TIMEOUT_MS 60000

/* A stream that is not connected yet. Never fails (loop memory). */
MF_API mf_stream_t *mf_stream_create(mf_loop_t *loop, mf_stream_type_t type);

/* The timeouts of the operations started after this call (ms, 0: the
 * default). The connect timeout also bounds the TLS handshake. */
MF_API void mf_stream_set_timeouts(mf_stream_t *stream, uint32_t connect_ms,
                                   uint32_t send_ms, uint32_t read_ms);

/* Connects to host:port (a name, a numeric IPv4/IPv6 address, "[v6]"), or
 * to the unix socket of host "unix:/path" (port ignored). Calls back with
 * 0, or MF_EDNS / MF_ECONNREFUSED / MF_ETIMEDOUT / MF_ENOENT ...; MF_EINVAL
 * for a bad host or a stream connected before. */
MF_API void mf_stream_connect(mf_stream_t *stream, const char *host,
                              uint16_t port, mf_stream_cb cb, void *data);

/* TLS over a connected TCP stream. server_name (may be NULL) is sent as
 * SNI and, with verify, matched against the certificate; ca_file NULL: the
 * system's bundle. Calls back with 0 or MF_ETLS (mf_stream_tls_error says
 * why). A stream that has TLS already (taken from the pool) calls back 0
 * at once when its session was made for the same server_name, verify and
 * ca_file, and MF_ETLS otherwise (never a session checked for another
 * name). */
MF_API void mf_stream_handshake(mf_stream_t *stream, const char *server_name,
                                bool verify, const char *ca_file,
                                mf_stream_cb cb, void *data);
/* Why the last handshake failed, "NN: reason" as OpenSSL words a
 * certificate check ("18: self-signed certificate"), or "handshake failed";
 * written into buf (always NUL-terminated); returns buf. */
MF_API char *mf_stream_tls_error(const mf_stream_t *stream, char *buf,
                                 size_t size);
MF_API bool mf_stream_has_tls(const mf_stream_t *stream);

/* Reads what is there now: > 0 bytes, MF_EAGAIN (nothing yet), MF_EOF, or
 * a negative MF_E* code (MF_ENOTCONN before the connect completes). A UDP
 * stream reads one datagram (0 for an empty one), cut to len. */
MF_API ssize_t mf_stream_try_read(mf_stream_t *stream, void *buf, size_t len);
/* Reads at least one byte (or one datagram) into buf, waiting up to the
 * read timeout. */
MF_API void mf_stream_read(mf_stream_t *stream, void *buf, size_t len,
                           mf_stream_cb cb, void *data);
/* As mf_stream_read, for a caller whose mf_stream_try_read just answered
 * MF_EAGAIN: it waits for the socket without reading it again first (one
 * system call fewer per wait). */
MF_API void mf_stream_wait_read(mf_stream_t *stream, void *buf, size_t len,
                                mf_stream_cb cb, void *data);

/* Writes what the socket takes now: bytes written (possibly fewer than
 * asked, possibly 0), or a negative MF_E* code (MF_EPIPE, MF_ECONNRESET,
 * MF_ENOTCONN ...). Never raises SIGPIPE on a plain socket. */
MF_API ssize_t mf_stream_try_writev(mf_stream_t *stream,
                                    const struct iovec *iov, int iovcnt);
/* Writes all of iov, waiting up to the send timeout for room; calls back
 * with the total. iov is advanced in place as bytes go out. */
MF_API void mf_stream_writev(mf_stream_t *stream, struct iovec *iov, int iovcnt,
                             mf_stream_cb cb, void *data);
/* As mf_stream_writev, for a caller whose mf_stream_try_writev just wrote
 * nothing (0: the socket is full): it waits for room without writing
 * again first. */
MF_API void mf_stream_wait_writev(mf_stream_t *stream, struct iovec *iov,
                                  int iovcnt, mf_stream_cb cb, void *data);

/* Closes the socket now; pending operations call back MF_ECANCELED later.
 * The stream is no longer the caller's (see Ownership). */
MF_API void mf_stream_close(mf_stream_t *stream);

/* ---- the keepalive pool ------------------------------------------------ */

/* Puts a connected stream with no pending operation into the loop's pool
 * under key, for idle_ms (0: the default) in a pool of at most pool_size
 * streams (0: 30, OpenResty's default). 0 when pooled; otherwise the stream
 * was closed: MF_EBUSY (an operation is pending), MF_ENOTCONN (not
 * connected), MF_EPROTO (the peer sent something or closed: not reusable),
 * MF_EINVAL (key longer than 511 bytes). Either way the caller's ownership
 * ends. */
MF_API int mf_stream_pool_put(mf_stream_t *stream, const char *key,
                              uint32_t idle_ms, unsigned pool_size);
/* A healthy idle stream of key (the most recently pooled), now the
 * caller's, or NULL. Dead candidates met on the way are closed. */
MF_API mf_stream_t *mf_stream_pool_take(mf_loop_t *loop, const char *key);
/* How many times the stream was taken from the pool (0: a new one). */
MF_API unsigned mf_stream_reused(const mf_stream_t *stream);
/* Idle streams pooled under key now (tests, metrics). */
MF_API size_t mf_stream_pool_count(const mf_loop_t *loop, const char *key);

MF_EXTERN_C_END

#endif /* MOONFLOW_STREAM_H */
