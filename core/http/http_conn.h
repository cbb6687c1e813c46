/*
 * http_conn.h — the interface of a server connection (http_conn.c), the
 * only way other files reach one. Internal.
 *
 * The connection owns mf_http_conn_t (its body is private to http_conn.c):
 * the socket and TLS state, input and output buffers, timeouts, and the
 * parsing of requests. For each complete request it creates and runs an
 * exchange (http_exchange_int.h), which answers through the calls below and
 * then releases the connection. Neither side reads the other's fields.
 *
 * Callers: the server (accept, stop) and the exchange (everything else).
 */
#ifndef MF_HTTP_CONN_H
#define MF_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/buf.h"
#include "moonflow/http_server.h"

typedef struct mf_http_conn mf_http_conn_t;

/* ---- for the server ------------------------------------------------------ */

/* Takes over an accepted, non-blocking socket. */
void mf__http_conn_accept(mf_http_server_t *srv, int fd,
                          const mf_sockaddr_t *peer);
/* The connection whose server-list entry is link. */
mf_http_conn_t *mf__http_conn_from_link(mf_list_t *link);
/* Waiting for the next request of a keep-alive connection, nothing to
 * write. */
bool mf__http_conn_idle(const mf_http_conn_t *conn);
/* The server is stopping: an idle connection closes now (after its
 * pending output); a busy one answers with Connection: close. */
void mf__http_conn_stop(mf_http_conn_t *conn);

/* ---- for the exchange: queries ------------------------------------------ */

mf_http_server_t *mf__http_conn_server(const mf_http_conn_t *conn);
mf_loop_t *mf__http_conn_loop(const mf_http_conn_t *conn);
const mf_sockaddr_t *mf__http_conn_peer(const mf_http_conn_t *conn);
/* Bytes queued and not yet written. */
size_t mf__http_conn_pending(const mf_http_conn_t *conn);
/* Whether the response being built may leave the connection open (the
 * request allows it, the client has not half-closed, the server is not
 * stopping). Decides for good: asked once, when the head is built. */
bool mf__http_conn_keep_alive(mf_http_conn_t *conn);
/* The current response ends the connection (an HTTP/1.0 stream, whose end
 * is the close; an error answer). */
void mf__http_conn_close_when_done(mf_http_conn_t *conn);

/* ---- for the exchange: output -------------------------------------------- */

typedef struct mf_piece {
    const void *data;
    size_t len;
} mf_piece_t;

/* Queues n pieces as one copy (one reservation, one segment update): a
 * response head is several pieces. All or nothing: 0, or MF_ENOMEM with
 * nothing queued. */
int mf__http_conn_queue_pieces(mf_http_conn_t *conn, const mf_piece_t *pieces,
                               size_t n);

static inline int mf__http_conn_queue_copy(mf_http_conn_t *conn,
                                           const void *data, size_t len)
{
    mf_piece_t piece = {data, len};
    return mf__http_conn_queue_pieces(conn, &piece, 1);
}

/* Queues len bytes at ptr, written from there: ptr stays valid until
 * written, or, with owned, the connection takes the buffer (owned is left
 * empty) and releases it once written. 0 or MF_ENOMEM (nothing queued). */
int mf__http_conn_queue_ref(mf_http_conn_t *conn, const char *ptr, size_t len,
                            mf_buf_t *owned);

/* Writes what is queued: 0 when all is written or the socket is full (the
 * rest goes on the next write event), a negative code after closing on a
 * write error. */
int mf__http_conn_flush(mf_http_conn_t *conn);

/* Closes the connection now: the response cannot be completed, and a cut
 * stream is the only honest end left. The exchange is told (lost) first. */
void mf__http_conn_abort(mf_http_conn_t *conn);

/* The exchange is done with the connection: its response is fully queued
 * (or the connection is gone) and it touches the connection no more. The
 * connection goes on with the next request, or is freed when closed. May
 * destroy the exchange before returning: the caller must not use it after. */
void mf__http_conn_release(mf_http_conn_t *conn);

#endif /* MF_HTTP_CONN_H */
