/*
 * http_transport.c — one connection's bytes: socket and TLS, input, output
 * queue, deadline, lingering close. Owns mf_transport_t, whose body is
 * private to this file; the contract (and who owns what) is in
 * http_transport.h. May call: the attached protocol through its ops table
 * and the owner through closed_cb (both registered from above), the net
 * and engine layers. Nothing here knows HTTP.
 *
 * No allocation per message: the transport and its buffers come from the
 * loop's free lists, and an idle connection gives its buffers back.
 */
#include "http_transport.h"

#include <errno.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/loop_int.h"
#include "http_file_reader.h"
#include "moonflow/pool.h"

#define MF_TRANSPORT_IN_INITIAL 4096
#define MF_TRANSPORT_LINGER_MS 2000
/* The most one sendfile call moves (the kernel's own cap is ~2 GiB). */
#define MF_TRANSPORT_SENDFILE_MAX ((size_t)1 << 30)

/* How the connection ends once its queue is written (mf__transport_end). */
enum { MF_END_NONE, MF_END_CLOSE, MF_END_LINGER };

/* A piece of output: bytes in t->out at [off, off+len), memory that is
 * referenced (owned or not) until written, or a file's bytes (its bit set
 * in t->file_segs: [off, off+len) of the file fd, sent with sendfile, or
 * under TLS through a reader; the transport closes fd once written). The
 * file shares ptr's place: 512-byte transports. */
typedef struct mf_out_seg {
    union {
        const char *ptr; /* memory: NULL when it lives in t->out at off */
        int fd;          /* a file segment's file (plain) */
        mf_file_reader_t *reader; /* a file segment's (TLS) */
    } u;
    size_t off;
    size_t len;
    mf_buf_t owned; /* released once written (a moved response body; a
                       file's chunk read for TLS) */
} mf_out_seg_t;

struct mf_transport {
    mf_io_t io;
    mf_timer_t timer;
    mf_loop_t *loop;
    const mf_transport_ops_t *ops;
    void *proto;
    mf_list_t link; /* the owner's registry */
    SSL *ssl;
    uint64_t deadline; /* loop ms; the timer may fire early (lazy) */
    mf_transport_input_t in;
    mf_buf_t out;
    mf_out_seg_t segs[MF_TRANSPORT_MAX_SEGS];
    size_t seg_done;    /* bytes of segs[0] already written */
    size_t drain_below; /* 0: no drain watch */
    mf_sockaddr_t peer;
    uint32_t write_timeout_ms;
    uint8_t nsegs;
    uint8_t file_segs; /* bit i: segs[i] is a file segment */
    uint8_t end;       /* MF_END_*: set by the protocol */
    bool closed;
    bool handshaking;
    bool eof;       /* read returned 0 */
    bool rdhup;     /* the peer half-closed: read to EOF */
    bool drained;   /* the last read found the socket empty (a short read
                       or EAGAIN): no read is due until an edge */
    bool lingering; /* half-closed, discarding input until the close */
    bool free_posted;
    mf_transport_closed_cb closed_cb;
    void *closed_arg;
    mf_post_t free_post;
};

/* An idle keep-alive connection costs this slab slot plus its protocol's:
 * keep it at 512 bytes (nginx's idle connection costs about as much). */
_Static_assert(sizeof(mf_transport_t) <= 512,
               "mf_transport_t must fit a 512-byte slab slot");

static void mf__transport_on_io(mf_io_t *io, unsigned events);
static void mf__transport_on_timer(mf_timer_t *timer);
static void mf__transport_read(mf_transport_t *t);
static void mf__transport_freed(mf_post_t *post);

/* ---- for the owner --------------------------------------------------------
 */

mf_transport_t *
mf__transport_create(mf_loop_t *loop, int fd, const mf_sockaddr_t *peer,
                     mf_tls_server_t *tls, uint32_t write_timeout_ms,
                     mf_transport_closed_cb closed_cb, void *arg)
{
    mf_transport_t *t = mf_loop_alloc(loop, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->loop = loop;
    t->peer = *peer;
    t->write_timeout_ms = write_timeout_ms;
    t->closed_cb = closed_cb;
    t->closed_arg = arg;
    t->in.max = SIZE_MAX;
    mf_io_init(&t->io, fd, mf__transport_on_io, t);
    mf_timer_init(&t->timer, mf__transport_on_timer, t);
    mf_post_init(&t->free_post, mf__transport_freed, t);
    mf_list_init(&t->link);
    mf__buf_init(&t->in.buf);
    mf__buf_init(&t->out);
    if (tls) {
        t->ssl = mf__tls_server_ssl(tls, fd);
        t->handshaking = true;
    }
    return t;
}

void mf__transport_start(mf_transport_t *t)
{
    if ((t->handshaking && !t->ssl) || /* no TLS session could be made */
        mf_io_start(t->loop, &t->io, MF_IO_READ | MF_IO_WRITE) < 0)
        mf__transport_close(t);
}

mf_list_t *mf__transport_link(mf_transport_t *t)
{
    return &t->link;
}

mf_transport_t *mf__transport_from_link(mf_list_t *link)
{
    return mf_container_of(link, mf_transport_t, link);
}

bool mf__transport_input_waiting(const mf_transport_t *t)
{
    char c;
    return !t->closed && recv(t->io.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

bool mf__transport_idle(const mf_transport_t *t)
{
    return !t->closed && !t->in.buf.len && !t->nsegs && t->ops->idle(t->proto);
}

void mf__transport_stop(mf_transport_t *t)
{
    t->ops->stop(t->proto);
}

void mf__transport_draining(mf_transport_t *t)
{
    if (!t->closed && t->ops->draining)
        t->ops->draining(t->proto);
}

/* ---- for the protocol: input, deadline ------------------------------------
 */

void mf__transport_attach(mf_transport_t *t, const mf_transport_ops_t *ops,
                          void *proto)
{
    t->ops = ops;
    t->proto = proto;
}

mf_transport_input_t *mf__transport_input(mf_transport_t *t)
{
    return &t->in;
}

bool mf__transport_alpn_h2(const mf_transport_t *t)
{
    return mf__tls_alpn_is_h2(t->ssl);
}

const mf_sockaddr_t *mf__transport_peer(const mf_transport_t *t)
{
    return &t->peer;
}

int mf__transport_input_reserve(mf_transport_t *t, size_t n)
{
    return mf__buf_reserve(t->loop, &t->in.buf, n);
}

/* Moving a deadline later costs a store: the timer fires at the old time
 * and re-arms for the rest, so a busy keep-alive connection does not touch
 * the timer heap per request. */
void mf__transport_arm(mf_transport_t *t, uint32_t ms)
{
    uint64_t now = mf_loop_now(t->loop);
    t->deadline = now + ms;
    if (!mf_timer_active(&t->timer) || t->timer._deadline > t->deadline)
        mf_timer_start(t->loop, &t->timer, ms);
}

void mf__transport_disarm(mf_transport_t *t)
{
    t->deadline = 0;
}

static void mf__transport_on_timer(mf_timer_t *timer)
{
    mf_transport_t *t = timer->data;
    uint64_t now = mf_loop_now(t->loop);
    if (!t->deadline)
        return; /* disarmed: the protocol (or its handler) owns the time */
    if (now < t->deadline) {
        mf_timer_start(t->loop, timer, t->deadline - now);
        return;
    }
    if (t->lingering) {
        mf__transport_close(t);
        return;
    }
    t->ops->on_timeout(t->proto);
}

/* ---- closing and freeing ---------------------------------------------------
 */

static void mf__transport_maybe_free(mf_transport_t *t)
{
    if (!t->closed || t->in.pinned || t->free_posted)
        return;
    t->free_posted = true;
    mf_loop_defer(t->loop, &t->free_post);
}

/* The input stays until the free: a pinned request points in. */
static void mf__transport_freed(mf_post_t *post)
{
    mf_transport_t *t = post->data;
    if (t->ops)
        t->ops->on_free(t->proto);
    mf__buf_release(t->loop, &t->in.buf);
    mf_loop_free(t->loop, t, sizeof(*t));
}

static bool mf__seg_is_file(const mf_transport_t *t, int i)
{
    return t->file_segs & (1u << i);
}

/* A written (or dropped) segment lets go of its memory and its file (a
 * reader with a read out goes at the read's completion). */
static void mf__transport_seg_release(mf_transport_t *t, int i)
{
    mf_out_seg_t *seg = &t->segs[i];
    mf__buf_release(t->loop, &seg->owned);
    if (!mf__seg_is_file(t, i))
        return;
    if (!t->ssl)
        close(seg->u.fd);
    else
        mf__file_reader_close(seg->u.reader); /* a read out: at its end */
}

static void mf__transport_release_output(mf_transport_t *t)
{
    for (int i = 0; i < t->nsegs; i++)
        mf__transport_seg_release(t, i);
    t->file_segs = 0;
    t->nsegs = 0;
    mf__buf_release(t->loop, &t->out);
}

void mf__transport_close(mf_transport_t *t)
{
    if (t->closed)
        return;
    t->closed = true;
    mf_io_stop(t->loop, &t->io);
    mf_timer_stop(t->loop, &t->timer);
    mf__transport_release_output(t); /* first: t->ssl tells a file's kind */
    mf__tls_close(t->ssl);
    t->ssl = NULL;
    close(t->io.fd);
    if (t->ops)
        t->ops->on_close(t->proto); /* may unpin: no free before the end */
    t->closed_cb(t, t->closed_arg);
    mf__transport_maybe_free(t);
}

void mf__transport_unpinned(mf_transport_t *t)
{
    mf__transport_maybe_free(t);
}

void mf__transport_end(mf_transport_t *t, bool linger)
{
    uint8_t end = linger ? MF_END_LINGER : MF_END_CLOSE;
    if (t->end < end)
        t->end = end;
}

static void mf__transport_drain_lingering(mf_transport_t *t)
{
    char scratch[4096];
    for (;;) {
        ssize_t n = mf__sock_read(t->io.fd, t->ssl, scratch, sizeof scratch);
        if (n == MF_EAGAIN)
            return;
        if (n <= 0) {
            mf__transport_close(t);
            return;
        }
    }
}

/* The last answer is out: half-close, then read and discard until the
 * peer closes (or the linger timer). */
static void mf__transport_linger(mf_transport_t *t)
{
    shutdown(t->io.fd, SHUT_WR);
    t->lingering = true;
    mf__transport_arm(t, MF_TRANSPORT_LINGER_MS);
    mf__transport_drain_lingering(t);
}

/* ---- output ---------------------------------------------------------------
 */

int mf__transport_queue_pieces(mf_transport_t *t, const mf_piece_t *pieces,
                               size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += pieces[i].len;
    mf_out_seg_t *last = t->nsegs ? &t->segs[t->nsegs - 1] : NULL;
    size_t off = t->out.len;
    bool extend = last && !mf__seg_is_file(t, t->nsegs - 1) && !last->u.ptr &&
                  last->off + last->len == off;
    if (!extend && t->nsegs == MF_TRANSPORT_MAX_SEGS)
        return MF_ENOMEM; /* no room: protocols pause before this happens */
    if (t->out.cap - off < total &&
        mf__buf_reserve(t->loop, &t->out, total) < 0)
        return MF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].len)
            memcpy(t->out.data + t->out.len, pieces[i].data, pieces[i].len);
        t->out.len += pieces[i].len;
    }
    if (extend) {
        last->len += total;
        return 0;
    }
    mf_out_seg_t *seg = &t->segs[t->nsegs++];
    seg->u.ptr = NULL;
    seg->off = off;
    seg->len = total;
    mf__buf_init(&seg->owned);
    return 0;
}

int mf__transport_queue_ref(mf_transport_t *t, const char *ptr, size_t len,
                            mf_buf_t *owned)
{
    if (t->nsegs == MF_TRANSPORT_MAX_SEGS)
        return MF_ENOMEM;
    mf_out_seg_t *seg = &t->segs[t->nsegs++];
    seg->u.ptr = ptr;
    seg->off = 0;
    seg->len = len;
    if (owned) {
        seg->owned = *owned; /* the segment takes the buffer */
        mf__buf_init(owned);
    } else {
        mf__buf_init(&seg->owned);
    }
    return 0;
}

/* A file segment's chunk was read (TLS): write on. */
static void mf__transport_file_read(void *arg)
{
    mf__transport_flush(arg);
}

int mf__transport_queue_file(mf_transport_t *t, int fd, uint64_t offset,
                             uint64_t len)
{
    if (t->nsegs == MF_TRANSPORT_MAX_SEGS)
        return MF_ENOMEM;
    if (!len) { /* nothing to send: the file is done with now */
        close(fd);
        return 0;
    }
    t->file_segs |= (uint8_t)(1u << t->nsegs);
    mf_out_seg_t *seg = &t->segs[t->nsegs++];
    if (t->ssl) {
        seg->u.reader = mf__file_reader_new(t->loop, fd, offset, len,
                                            mf__transport_file_read, t);
    } else {
        seg->u.fd = fd;
    }
    seg->off = (size_t)offset;
    seg->len = (size_t)len;
    mf__buf_init(&seg->owned);
    return 0;
}

int mf__transport_queue_room(const mf_transport_t *t)
{
    return MF_TRANSPORT_MAX_SEGS - t->nsegs;
}

bool mf__transport_writing(const mf_transport_t *t)
{
    return t->nsegs != 0;
}

size_t mf__transport_pending(const mf_transport_t *t)
{
    size_t total = 0;
    for (int i = 0; i < t->nsegs; i++)
        total += t->segs[i].len;
    return total - t->seg_done;
}

void mf__transport_watch_drain(mf_transport_t *t, size_t below)
{
    t->drain_below = below;
}

/* The memory segments at the front, up to the first file segment. */
static int mf__transport_gather(mf_transport_t *t, struct iovec *iov)
{
    for (int i = 0; i < t->nsegs; i++) {
        mf_out_seg_t *seg = &t->segs[i];
        if (mf__seg_is_file(t, i))
            return i;
        const char *base = seg->u.ptr ? seg->u.ptr : t->out.data + seg->off;
        size_t skip = i == 0 ? t->seg_done : 0;
        iov[i].iov_base = (void *)(base + skip);
        iov[i].iov_len = seg->len - skip;
    }
    return t->nsegs;
}

/* Drops fully written segments from the front. */
static void mf__transport_advance(mf_transport_t *t, size_t written)
{
    int done = 0;
    written += t->seg_done;
    while (done < t->nsegs && written >= t->segs[done].len) {
        written -= t->segs[done].len;
        mf__transport_seg_release(t, done);
        done++;
    }
    t->seg_done = written;
    if (done) {
        memmove(t->segs, t->segs + done,
                (size_t)(t->nsegs - done) * sizeof(t->segs[0]));
        t->nsegs = (uint8_t)(t->nsegs - done);
        t->file_segs = (uint8_t)(t->file_segs >> done);
    }
    if (!t->nsegs) {
        t->out.len = 0;
        t->seg_done = 0;
    }
}

/* A writer waits for room: tell the protocol once the queue is low. */
static void mf__transport_maybe_drained(mf_transport_t *t)
{
    if (!t->drain_below || t->closed ||
        mf__transport_pending(t) >= t->drain_below)
        return;
    t->drain_below = 0;
    t->ops->on_drain(t->proto);
}

static void mf__transport_output_done(mf_transport_t *t)
{
    if (t->end == MF_END_LINGER) {
        mf__transport_linger(t);
        return;
    }
    if (t->end == MF_END_CLOSE) {
        mf__transport_close(t);
        return;
    }
    if ((!t->in.pinned || t->in.movable) && t->in.buf.len == 0)
        mf__buf_release(t->loop, &t->out); /* idle: keep small */
    t->ops->on_flushed(t->proto);
}

/* The file segment at the front, on a plain socket: the kernel copies
 * from the page cache to the socket, no byte passes through here. A file
 * that ends before its segment (cut while queued) fails the connection:
 * the answer cannot be completed. */
static ssize_t mf__transport_sendfile(mf_transport_t *t, mf_out_seg_t *seg)
{
    off_t pos = (off_t)(seg->off + t->seg_done);
    size_t n = seg->len - t->seg_done;
    if (n > MF_TRANSPORT_SENDFILE_MAX)
        n = MF_TRANSPORT_SENDFILE_MAX;
    ssize_t w;
    do {
        w = sendfile(t->io.fd, seg->u.fd, &pos, n);
    } while (w < 0 && errno == EINTR);
    if (w > 0)
        return w;
    if (w == 0)
        return MF_EIO; /* the file is shorter than the answer said */
    return errno == EAGAIN ? MF_EAGAIN : mf_err_from_errno(errno);
}

/* The file segment at the front, over TLS: the chunk read last is written
 * (kept until written whole: TLS retries a write with the same bytes);
 * once it is out, the next is read off the loop (http_file_reader.h), and
 * the write waits for it (MF_EAGAIN; the read's completion flushes
 * again). */
static ssize_t mf__transport_file_tls(mf_transport_t *t, mf_out_seg_t *seg)
{
    const char *data;
    ssize_t n = mf__file_reader_peek(seg->u.reader, &data);
    if (n == 0)
        return MF_EIO; /* cannot be: the segment ends with its range */
    if (n < 0)
        return n;
    struct iovec iov = {(void *)data, (size_t)n};
    ssize_t w = mf__sock_writev(t->io.fd, t->ssl, &iov, 1);
    if (w > 0)
        mf__file_reader_take(seg->u.reader, (size_t)w);
    return w;
}

/* The memory in front of a file segment on a plain socket (a head before
 * its body): MSG_MORE holds it back until the sendfile that follows, so
 * both leave in the same packets (nginx's tcp_nopush). */
static ssize_t mf__transport_write_more(mf_transport_t *t, struct iovec *iov,
                                        int n)
{
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w;
    do {
        w = sendmsg(t->io.fd, &msg, MSG_MORE | MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w >= 0)
        return w;
    return errno == EAGAIN ? MF_EAGAIN : mf_err_from_errno(errno);
}

/* One write of what is at the front of the queue. */
static ssize_t mf__transport_write_front(mf_transport_t *t)
{
    struct iovec iov[MF_TRANSPORT_MAX_SEGS];
    mf_out_seg_t *front = &t->segs[0];
    if (mf__seg_is_file(t, 0))
        return t->ssl ? mf__transport_file_tls(t, front)
                      : mf__transport_sendfile(t, front);
    int n = mf__transport_gather(t, iov);
    if (!t->ssl && n < t->nsegs)
        return mf__transport_write_more(t, iov, n);
    return mf__sock_writev(t->io.fd, t->ssl, iov, n);
}

int mf__transport_flush(mf_transport_t *t)
{
    /* Only a flush that empties the queue (or a pending end) moves the
     * connection on: an event with nothing to write must not push the
     * protocol's deadline (slowloris) further out. */
    if (!t->nsegs && !t->end)
        return 0;
    while (t->nsegs && !t->closed && !t->handshaking) {
        ssize_t w = mf__transport_write_front(t);
        if (w == MF_EAGAIN) {
            mf__transport_arm(t, t->write_timeout_ms);
            mf__transport_maybe_drained(t);
            return 0;
        }
        if (w < 0) {
            mf__transport_close(t);
            return (int)w;
        }
        mf__transport_advance(t, (size_t)w);
    }
    mf__transport_maybe_drained(t);
    if (t->closed)
        return MF_ECLOSED;
    if (!t->nsegs)
        mf__transport_output_done(t);
    return 0;
}

/* ---- input ----------------------------------------------------------------
 */

/* Gets room to read into. A pinned input must not move: read only into
 * spare room. */
static int mf__transport_input_room(mf_transport_t *t)
{
    mf_transport_input_t *in = &t->in;
    if (in->buf.cap - in->buf.len > 0)
        return 0;
    if (in->pinned && !in->movable)
        return MF_EAGAIN;
    if (in->buf.len - in->off > in->max)
        return MF_EAGAIN; /* the protocol answers first */
    if (in->off) {        /* slide the unconsumed tail to the front */
        memmove(in->buf.data, in->buf.data + in->off, in->buf.len - in->off);
        in->buf.len -= in->off;
        in->off = 0;
        if (in->buf.cap > in->buf.len)
            return 0;
    }
    return mf__buf_reserve(t->loop, &in->buf,
                           in->buf.cap ? in->buf.cap : MF_TRANSPORT_IN_INITIAL);
}

static void mf__transport_read(mf_transport_t *t)
{
    mf_transport_input_t *in = &t->in;
    while (!t->closed && !t->eof) {
        if (t->end == MF_END_LINGER) {
            if (!t->nsegs) /* else: the flush ends in mf__transport_linger */
                mf__transport_drain_lingering(t);
            return;
        }
        int rc = mf__transport_input_room(t);
        if (rc == MF_EAGAIN) {
            t->drained = false; /* bytes may wait in the socket */
            return;
        }
        if (rc < 0) {
            t->ops->on_no_room(t->proto);
            return;
        }
        size_t room = in->buf.cap - in->buf.len;
        ssize_t n =
            mf__sock_read(t->io.fd, t->ssl, in->buf.data + in->buf.len, room);
        t->drained = n == MF_EAGAIN || (n > 0 && (size_t)n < room);
        if (n == MF_EAGAIN)
            break;
        if (n <= 0) {
            if (n == 0) {
                t->eof = true;
                t->ops->on_eof(t->proto);
            } else {
                mf__transport_close(t);
            }
            return;
        }
        in->buf.len += (size_t)n;
        t->ops->on_data(t->proto, (size_t)n);
        /* A short plain read emptied the socket (the next arrival raises a
         * new edge), unless the peer also closed: then read on to the EOF,
         * which raises no further edge. TLS may hold decrypted bytes. */
        if ((size_t)n < room && !t->ssl && !t->rdhup)
            break;
    }
    if (!t->closed && (!in->pinned || in->movable) &&
        t->end != MF_END_LINGER && in->buf.len == 0)
        mf__buf_release(t->loop, &in->buf);
}

void mf__transport_input_emptied(mf_transport_t *t)
{
    mf_transport_input_t *in = &t->in;
    if (t->closed || (in->pinned && !in->movable) || in->off != in->buf.len)
        return;
    in->off = in->buf.len = 0;
    if (t->end != MF_END_LINGER)
        mf__buf_release(t->loop, &in->buf);
}

void mf__transport_resume(mf_transport_t *t)
{
    /* What arrived while the input was held was read then (into spare
     * room) at its edge; a read is due only if one stopped for lack of
     * room, or TLS may hold bytes, or the peer half-closed (no edge). */
    if (!t->drained || t->ssl || t->rdhup)
        mf__transport_read(t);
    mf__transport_flush(t);
}

static void mf__transport_on_io(mf_io_t *io, unsigned events)
{
    mf_transport_t *t = io->data;
    if (events & MF_IO_RDHUP)
        t->rdhup = true;
    if (t->handshaking) {
        int rc = mf__tls_handshake(t->ssl);
        if (rc == MF_EAGAIN)
            return;
        if (rc < 0) {
            mf__transport_close(t);
            return;
        }
        t->handshaking = false;
    }
    if ((events & MF_IO_WRITE) && t->nsegs)
        mf__transport_flush(t);
    if (t->closed)
        return;
    if (events & (MF_IO_READ | MF_IO_HUP | MF_IO_ERROR))
        mf__transport_read(t);
    if (!t->closed)
        mf__transport_flush(t);
}
