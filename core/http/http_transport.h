/*
 * http_transport.h — one accepted connection's bytes, for whichever
 * protocol speaks on it: the socket and TLS, the input buffer, the output
 * queue (written with writev), the read/idle/write deadline, lingering
 * close and write backpressure. It knows no HTTP. Internal.
 *
 * The transport owns mf_transport_t (its body is private to
 * http_transport.c). Its owner (the server) creates and starts it, keeps
 * it in a registry by its link, and learns of its close through closed_cb.
 * One protocol is attached at a time; the transport calls it up through
 * its ops table (mf_transport_ops_t, the protocol interface) and the
 * protocol calls down with the functions below. A protocol switch (an
 * upgrade) is an attach of another protocol: the new one takes over the
 * input and every duty below.
 *
 * The input: mf_transport_input_t is shared. The transport owns its memory
 * (reads into it, grows it, slides it, releases it when empty); the
 * protocol owns its contents: it consumes from `off`, may shorten `len`
 * when it decodes in place, and sets the two limits (`max`, `pinned`).
 *
 * Lifetime: after the close (every close runs ops->on_close once, then
 * closed_cb) the memory stays until the input is unpinned, then both the
 * transport and, through ops->on_free, the protocol are freed on a
 * deferred post, never inside the callback that closed them.
 *
 * Every event runs the same steps: finish a TLS handshake, flush pending
 * output, read and hand input up, flush. The socket is registered for
 * READ|WRITE once, edge-triggered: no epoll_ctl per request. A short plain
 * read proves the socket drained (no second read to see EAGAIN).
 */
#ifndef MF_HTTP_TRANSPORT_H
#define MF_HTTP_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/buf.h"
#include "moonflow/dns.h"
#include "moonflow/loop.h"
#include "net/tls.h"

typedef struct mf_transport mf_transport_t;

/* Output segments: copies coalesce into one buffer; only big bodies and
 * files get a segment of their own. A protocol pauses before the table is
 * full. */
#define MF_TRANSPORT_MAX_SEGS 4

/* The input, shared with the protocol (see above). Bytes not yet consumed
 * are buf.data[off..buf.len). */
typedef struct mf_transport_input {
    mf_buf_t buf; /* memory: the transport's; len may be cut by the protocol */
    size_t off;   /* written by the protocol as it consumes */
    /* Unconsumed bytes past which reading stops (the protocol answers
     * before it needs more): written by the protocol. */
    size_t max;
    /* Something above points into the input (an exchange's request): the
     * buffer must not move or grow (reads go into spare room only), and
     * after a close the memory waits until the protocol unpins it
     * (mf__transport_unpinned). Written by the protocol. */
    bool pinned;
    /* Pinned for its lifetime only: nothing above points into the bytes
     * (an upgraded connection's request was copied out), so the buffer may
     * move, grow (up to `max` unconsumed) and go when empty. Written by
     * the protocol. */
    bool movable;
} mf_transport_input_t;

/* The protocol interface: the transport's calls up. proto is the state
 * given to mf__transport_attach. Each runs on the loop thread from an
 * event; the protocol may call any down-call from inside, close included
 * (the transport checks for it after each call). */
typedef struct mf_transport_ops {
    /* n bytes were appended to the input. */
    void (*on_data)(void *proto, size_t n);
    /* The peer closed its side (a read returned 0); no more reads. */
    void (*on_eof)(void *proto);
    /* The input could not grow (no memory). */
    void (*on_no_room)(void *proto);
    /* Everything queued was written and no end is pending. */
    void (*on_flushed)(void *proto);
    /* After a write, the pending output is below the mark of
     * mf__transport_watch_drain (called once per watch). */
    void (*on_drain)(void *proto);
    /* The deadline (mf__transport_arm) passed; the transport does nothing
     * more about it. */
    void (*on_timeout)(void *proto);
    /* The connection closed (an error, a write failure, a down-call);
     * called once, before closed_cb. No output is queued any more. */
    void (*on_close)(void *proto);
    /* The deferred free, after the close and the unpin: the protocol frees
     * what it owns (the transport frees itself right after). */
    void (*on_free)(void *proto);
    /* For the owner, through the transport: whether the protocol waits
     * for a new request or message, and a graceful stop (finish what is
     * under way, take nothing new, close). */
    bool (*idle)(const void *proto);
    void (*stop)(void *proto);
    /* Optional (NULL: nothing to do): a drain began (a graceful restart),
     * the stop comes at its end; a protocol that can say so ahead (HTTP/2's
     * GOAWAY) tells its client now. */
    void (*draining)(void *proto);
} mf_transport_ops_t;

/* The owner's close notification: t is closed (its link may be unlinked
 * now); it is freed later, by itself. */
typedef void (*mf_transport_closed_cb)(mf_transport_t *t, void *arg);

/* ---- for the owner ------------------------------------------------------- */

/* Takes an accepted, non-blocking socket (closed by the transport from now
 * on); tls: NULL for plain TCP. write_timeout_ms bounds a stalled write.
 * Nothing runs until mf__transport_start. */
mf_transport_t *
mf__transport_create(mf_loop_t *loop, int fd, const mf_sockaddr_t *peer,
                     mf_tls_server_t *tls, uint32_t write_timeout_ms,
                     mf_transport_closed_cb closed_cb, void *arg);
/* Starts watching the socket (after the attach). On failure it is closed
 * (on_close, closed_cb) before this returns. */
void mf__transport_start(mf_transport_t *t);
/* The owner's registry entry (the owner links and unlinks it). */
mf_list_t *mf__transport_link(mf_transport_t *t);
mf_transport_t *mf__transport_from_link(mf_list_t *link);
/* Nothing in, nothing out, and the protocol idle. */
bool mf__transport_idle(const mf_transport_t *t);
/* Whether bytes have arrived on the socket that were not read yet (a
 * request sent as the server began to stop: not an idle connection). */
bool mf__transport_input_waiting(const mf_transport_t *t);
/* Asks the protocol to stop gracefully (ops->stop). */
void mf__transport_stop(mf_transport_t *t);
/* Tells the protocol a drain began (ops->draining, if it has one). */
void mf__transport_draining(mf_transport_t *t);

/* ---- for the protocol ---------------------------------------------------- */

/* Attaches the protocol: from now on the transport calls ops with proto. */
void mf__transport_attach(mf_transport_t *t, const mf_transport_ops_t *ops,
                          void *proto);
/* The shared input (valid for the transport's life). */
mf_transport_input_t *mf__transport_input(mf_transport_t *t);
const mf_sockaddr_t *mf__transport_peer(const mf_transport_t *t);
/* Whether TLS chose HTTP/2 by ALPN (false on plain TCP). */
bool mf__transport_alpn_h2(const mf_transport_t *t);
/* Grows the input so that n more bytes fit after its end. 0 or MF_ENOMEM. */
int mf__transport_input_reserve(mf_transport_t *t, size_t n);

/* The deadline: on_timeout after ms (a later deadline costs a store: the
 * timer fires at the old time and re-arms for the rest). Disarm: none. */
void mf__transport_arm(mf_transport_t *t, uint32_t ms);
void mf__transport_disarm(mf_transport_t *t);

typedef struct mf_piece {
    const void *data;
    size_t len;
} mf_piece_t;

/* Queues n pieces as one copy (one reservation, one segment update). All
 * or nothing: 0, or MF_ENOMEM with nothing queued. */
int mf__transport_queue_pieces(mf_transport_t *t, const mf_piece_t *pieces,
                               size_t n);

static inline int mf__transport_queue_copy(mf_transport_t *t, const void *data,
                                           size_t len)
{
    mf_piece_t piece = {data, len};
    return mf__transport_queue_pieces(t, &piece, 1);
}

/* Queues len bytes at ptr, written from there: ptr stays valid until
 * written, or, with owned, the transport takes the buffer (owned is left
 * empty) and releases it once written. 0 or MF_ENOMEM (nothing queued). */
int mf__transport_queue_ref(mf_transport_t *t, const char *ptr, size_t len,
                            mf_buf_t *owned);
/* Queues bytes [offset, offset+len) of the file fd (a regular file,
 * opened for reading), written from the file: sendfile(2) on a plain
 * socket; under TLS a chunk at a time, read on the loop's compute pool
 * (on the loop's thread when it has none) into a buffer. The transport
 * takes fd when this returns 0 and closes it once written or at the close
 * (len 0: closed at once); a file found shorter than len when it is
 * written closes the connection. 0 or MF_ENOMEM (no free segment; fd
 * stays the caller's). */
int mf__transport_queue_file(mf_transport_t *t, int fd, uint64_t offset,
                             uint64_t len);
/* Free output segments: a protocol stops taking requests before it has
 * none left for their answers. */
int mf__transport_queue_room(const mf_transport_t *t);
/* Whether anything is queued; the bytes queued and not yet written. */
bool mf__transport_writing(const mf_transport_t *t);
size_t mf__transport_pending(const mf_transport_t *t);
/* One on_drain once the pending output is below `below` after a write. */
void mf__transport_watch_drain(mf_transport_t *t, size_t below);

/* Writes what is queued: 0 when all is written or the socket is full (the
 * rest goes on the next write event, under the write timeout), a negative
 * code after closing on a write error (or MF_ECLOSED when closed). */
int mf__transport_flush(mf_transport_t *t);
/* Reads what may wait unread (a read stopped for lack of room, TLS may
 * hold bytes, the peer half-closed), then flushes: for a protocol that
 * takes input again after holding it. */
void mf__transport_resume(mf_transport_t *t);

/* Ends the connection once the queue is written: closes, or with linger
 * half-closes, reads and discards what the peer still sends until it
 * closes (or 2 s), then closes, so that closing with unread input does not
 * reset the connection under the last answer. No flush by itself. */
void mf__transport_end(mf_transport_t *t, bool linger);
/* Closes now (on_close, closed_cb). Idempotent. */
void mf__transport_close(mf_transport_t *t);
/* The protocol consumed the whole input (off == len): a movable or
 * unpinned input lets its memory go until the next read. */
void mf__transport_input_emptied(mf_transport_t *t);
/* After a close, the protocol unpinned the input: the memory may go. */
void mf__transport_unpinned(mf_transport_t *t);

#endif /* MF_HTTP_TRANSPORT_H */
