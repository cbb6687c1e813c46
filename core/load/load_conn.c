/*
 * load_conn.c — one load connection: connect (and TLS), write a request,
 * read and frame its responses, then the next request, a wait, or a
 * reconnect. The hot path of `moonflow bench`.
 *
 * The socket is registered once per connect for READ and WRITE
 * (edge-triggered) and never re-armed: a request is written straight away
 * and the WRITE edge only matters after a short write. A read that returns
 * less than asked drained the socket (plain TCP): no read to confirm
 * EAGAIN. Per request in steady state: one write, one read, one clock read.
 *
 * May call: the load (load_int.h), the loop, net (sockets, TLS, the
 * endpoint pool: each open socket is counted in its target's endpoint,
 * outside the per-request path) and the HTTP parser. Owns mf_load_conn_t.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "load_int.h"
#include "moonflow/dns.h"
#include "moonflow/error.h"
#include "net/net.h"

static void mf__load_conn_event(mf_io_t *io, unsigned events);
static void mf__load_conn_timer(mf_timer_t *timer);
static void mf__load_conn_next(mf_load_conn_t *c);

/* ---- the endpoint pool's view --------------------------------------------
 */

static mf_load_conn_t *mf__load_conn_of(mf_pconn_t *pc)
{
    return mf_container_of(pc, mf_load_conn_t, pc);
}

static void mf__load_conn_shut(mf_load_conn_t *c);

/* The loop ends with the load alive: its sockets close (the load's
 * destroy closes the rest). */
static void mf__load_conn_pool_close(mf_pconn_t *pc)
{
    mf__load_conn_shut(mf__load_conn_of(pc));
}

/* No open: the load opens its own; never idle in the pool. */
static const mf_endpoint_ops_t mf__load_endpoint_ops = {
    .protocol = "load",
    .close = mf__load_conn_pool_close,
};

/* The target's endpoint, keyed by its address, TLS and SNI host. */
static mf_endpoint_t *mf__load_endpoint(mf_load_t *load, size_t target)
{
    const mf_load_target_t *t = &load->targets[target];
    char addr[64], key[MF_DNS_MAX_HOST + 80];
    mf_sockaddr_format(&t->addr, addr, sizeof addr);
    snprintf(key, sizeof key, "%s %d %.*s", addr, t->tls, MF_DNS_MAX_HOST,
             t->host ? t->host : "");
    return mf_endpoint_get(load->loop, &mf__load_endpoint_ops, key, NULL);
}

/* ---- life ----------------------------------------------------------------
 */

bool mf__load_conn_init(mf_load_conn_t *c, mf_load_t *load, size_t target)
{
    memset(c, 0, sizeof(*c));
    c->load = load;
    c->target = target;
    c->ep = mf__load_endpoint(load, target);
    mf_io_init(&c->io, -1, mf__load_conn_event, c);
    mf_timer_init(&c->timer, mf__load_conn_timer, c);
    c->rbuf = c->rbuf_own = mf_try_malloc(MF_LOAD_READ_BUF);
    c->rcap = MF_LOAD_READ_BUF;
    return c->rbuf != NULL;
}

void mf__load_conn_free(mf_load_conn_t *c)
{
    mf_free(c->rbuf_own);
    mf_free(c->own);
}

static void mf__load_conn_reset_read(mf_load_conn_t *c)
{
    c->rpos = c->rlen = 0;
    c->rstate = MF_LOAD_READ_HEAD;
    c->scanned = c->head_len = c->body_len = 0;
    c->close_after = false;
}

static void mf__load_conn_shut(mf_load_conn_t *c)
{
    mf_loop_t *loop = c->load->loop;
    mf_timer_stop(loop, &c->timer);
    if (c->io.fd >= 0) {
        mf_io_stop(loop, &c->io);
        mf__tls_close(c->ssl);
        c->ssl = NULL;
        close(c->io.fd);
        c->io.fd = -1;
        mf_pconn_remove(&c->pc); /* harmless when the pool closes it */
    }
    c->state = MF_LOAD_CONN_CLOSED;
    c->pending = 0;
    c->want_write = false;
    c->served = 0;
    mf__load_conn_reset_read(c);
}

void mf__load_conn_close(mf_load_conn_t *c)
{
    mf__load_conn_shut(c);
}

/* Closes and opens again: at once, or after MF_LOAD_RECONNECT_MS when the
 * connection failed (a server refusing connects is not hammered). */
static void mf__load_conn_reopen(mf_load_conn_t *c, bool failed)
{
    mf__load_conn_shut(c);
    if (c->load->stopping)
        return;
    if (failed)
        mf_timer_start(c->load->loop, &c->timer, MF_LOAD_RECONNECT_MS);
    else
        mf__load_conn_open(c);
}

static void mf__load_conn_fail(mf_load_conn_t *c, uint64_t *error)
{
    mf__load_count_error(c->load, c->target, error);
    mf__load_conn_reopen(c, error == &c->load->stats.errors.connect);
}

void mf__load_conn_open(mf_load_conn_t *c)
{
    mf_load_t *load = c->load;
    int fd = mf__net_connect(&load->targets[c->target].addr);
    c->state_ns = mf__load_now_ns();
    if (fd < 0) {
        mf__load_conn_fail(c, &load->stats.errors.connect);
        return;
    }
    c->io.fd = fd;
    if (mf_io_start(load->loop, &c->io, MF_IO_READ | MF_IO_WRITE) < 0) {
        close(fd);
        c->io.fd = -1;
        mf__load_conn_fail(c, &load->stats.errors.connect);
        return;
    }
    mf_pconn_add(c->ep, &c->pc, NULL); /* never idle: no watcher to unref */
    c->state = MF_LOAD_CONN_CONNECTING;
}

/* ---- the request ----------------------------------------------------------
 */

/* The bytes of the next write: the request hook's (copied), or the
 * target's. false when the run ends (the hook failed or stopped it). */
static bool mf__load_conn_take_request(mf_load_conn_t *c)
{
    mf_load_t *load = c->load;
    if (!load->hooks.request) {
        const mf_load_target_t *t = &load->targets[c->target];
        c->req = t->request;
        c->req_len = t->request_len;
        c->depth = load->target_depth[c->target];
        c->head_mask = load->target_head_mask[c->target];
        return true;
    }
    const char *buf = NULL;
    size_t len = 0;
    int rc = load->hooks.request(load->hooks.user, c->target, &buf, &len);
    if (load->stopping)
        return false;
    if (rc < 0 || !buf) {
        mf__load_fail(load, rc < 0 ? rc : MF_EINVAL);
        return false;
    }
    if (len > c->own_cap) {
        char *p = mf_try_malloc(len);
        if (!p) {
            mf__load_fail(load, MF_ENOMEM);
            return false;
        }
        mf_free(c->own);
        c->own = p;
        c->own_cap = len;
    }
    memcpy(c->own, buf, len);
    c->req = c->own;
    c->req_len = len;
    c->depth = mf__load_scan_requests(c->own, len, &c->head_mask);
    if (!c->depth) {
        mf__load_fail(load, MF_EINVAL); /* not a complete HTTP request */
        return false;
    }
    return true;
}

/* One write of plain TCP as send(MSG_NOSIGNAL), straight through
 * syscall(2) (no cancellation point): a server that closed costs an EPIPE
 * error, never a SIGPIPE the embedding program did not ignore. */
static ssize_t mf__load_conn_send_bytes(mf_load_conn_t *c, const char *buf,
                                        size_t len)
{
    if (c->ssl) {
        struct iovec iov = {(void *)buf, len};
        return mf__sock_writev(c->io.fd, c->ssl, &iov, 1);
    }
    ssize_t n;
    do {
        n = (ssize_t)syscall(SYS_sendto, c->io.fd, buf, len, MSG_NOSIGNAL, NULL,
                             0);
    } while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    return errno == EAGAIN ? MF_EAGAIN : mf_err_from_errno(errno);
}

/* Writes what is left of the request. false when the connection failed. */
static bool mf__load_conn_write(mf_load_conn_t *c)
{
    while (c->written < c->req_len) {
        ssize_t n = mf__load_conn_send_bytes(c, c->req + c->written,
                                             c->req_len - c->written);
        if (n == MF_EAGAIN) {
            c->want_write = true; /* the WRITE edge comes when it drains */
            return true;
        }
        if (n <= 0) {
            mf__load_conn_fail(c, &c->load->stats.errors.write);
            return false;
        }
        c->written += (size_t)n;
    }
    c->want_write = false;
    return true;
}

/* Sends the next request now; start_ns is its latency origin. */
static void mf__load_conn_send(mf_load_conn_t *c, uint64_t start_ns,
                               uint64_t now_ns)
{
    if (!mf__load_conn_take_request(c))
        return;
    c->state = MF_LOAD_CONN_BUSY;
    c->pending = c->depth;
    c->written = 0;
    c->start_ns = start_ns;
    c->state_ns = now_ns;
    if (c->load->interval_ns)
        c->due_ns += c->load->interval_ns * c->depth;
    mf__load_conn_write(c);
}

/* Constant rate: sends when the next request is due, measured from its
 * due time when late. The loop's timers count whole milliseconds, so a
 * request less than one away goes now, measured from now: what it waits
 * for is then the server alone, and the schedule of due times (the rate)
 * stays as it was. */
static void mf__load_conn_send_due(mf_load_conn_t *c, uint64_t now_ns)
{
    if (c->due_ns <= now_ns + MF_LOAD_EARLY_NS) {
        mf__load_conn_send(c, c->due_ns < now_ns ? c->due_ns : now_ns, now_ns);
        return;
    }
    c->state = MF_LOAD_CONN_IDLE;
    mf_timer_start(c->load->loop, &c->timer, (c->due_ns - now_ns) / 1000000);
}

static void mf__load_conn_next(mf_load_conn_t *c)
{
    uint64_t now = mf__load_now_ns();
    if (c->load->stopping)
        return;
    if (c->load->interval_ns)
        mf__load_conn_send_due(c, now);
    else
        mf__load_conn_send(c, now, now);
}

static void mf__load_conn_timer(mf_timer_t *timer)
{
    mf_load_conn_t *c = timer->data;
    if (c->state == MF_LOAD_CONN_CLOSED)
        mf__load_conn_open(c);
    else if (c->state == MF_LOAD_CONN_IDLE)
        mf__load_conn_next(c);
}

/* All responses of a write came: the next request, after the delay hook's
 * wait, or a new connection. */
static void mf__load_conn_request_done(mf_load_conn_t *c)
{
    mf_load_t *load = c->load;
    if (!load->cfg.keepalive || c->close_after ||
        (load->cfg.requests_per_conn &&
         c->served >= load->cfg.requests_per_conn)) {
        mf__load_conn_reopen(c, false);
        return;
    }
    c->state = MF_LOAD_CONN_IDLE;
    if (load->hooks.delay) {
        uint64_t ms = load->hooks.delay(load->hooks.user);
        if (load->stopping)
            return;
        if (ms) {
            mf_timer_start(load->loop, &c->timer, ms);
            return;
        }
    }
    mf__load_conn_next(c);
}

/* ---- the response ---------------------------------------------------------
 */

/* Whether the response being read answers a HEAD (it has no body). */
static bool mf__load_conn_is_head(const mf_load_conn_t *c)
{
    size_t i = c->depth - c->pending;
    return i < 64 && ((c->head_mask >> i) & 1);
}

/* Parses the head at rpos from len bytes into head (the load's header
 * array): mf_http_parse_response's answer. */
static int mf__load_conn_parse_at(mf_load_conn_t *c, size_t len,
                                  mf_http_response_t *head, size_t *scanned)
{
    mf_load_t *load = c->load;
    mf_http_limits_t limits = {MF_LOAD_MAX_HEAD, MF_LOAD_MAX_HEAD,
                               MF_ARRAY_SIZE(load->headers)};
    *head = (mf_http_response_t){.headers = load->headers,
                                 .num_headers = MF_ARRAY_SIZE(load->headers)};
    return mf_http_parse_response(c->rbuf + c->rpos, len, head,
                                  mf__load_conn_is_head(c), &limits, scanned);
}

/* The response hook: the head parsed again (its pointers into rbuf as it
 * is now) and the kept body. false when the run ends. */
static bool mf__load_conn_hook(mf_load_conn_t *c)
{
    mf_load_t *load = c->load;
    mf_http_response_t head;
    (void)mf__load_conn_parse_at(c, c->head_len, &head, NULL);
    int rc = load->hooks.response(load->hooks.user, c->target, &head,
                                  c->rbuf + c->rpos + c->head_len, c->body_len);
    if (load->stopping)
        return false;
    if (rc < 0) {
        mf__load_fail(load, rc);
        return false;
    }
    return true;
}

/* One response came whole. false when the connection can read no more
 * (closed, reopened, or the run ends). */
static bool mf__load_conn_response_done(mf_load_conn_t *c, uint64_t now_ns)
{
    mf_load_t *load = c->load;
    mf__load_record(load, c, now_ns);
    if (load->hooks.response && !mf__load_conn_hook(c))
        return false;
    c->rpos += c->head_len + c->body_len;
    c->head_len = c->body_len = 0;
    c->scanned = 0;
    c->rstate = MF_LOAD_READ_HEAD;
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    c->served++;
    if (--c->pending)
        return true;
    mf__load_conn_request_done(c);
    /* Reopened (CONNECTING, CLOSED) or stopped: nothing more to read. */
    return !c->load->stopping &&
           (c->state == MF_LOAD_CONN_BUSY || c->state == MF_LOAD_CONN_IDLE);
}

/* The head at rpos: 1 parsed (body framing set), 0 need more, -1 bad. */
static int mf__load_conn_parse_head(mf_load_conn_t *c)
{
    mf_load_t *load = c->load;
    mf_http_response_t head;
    int rc = mf__load_conn_parse_at(c, c->rlen - c->rpos, &head, &c->scanned);
    if (rc == MF_HTTP_INCOMPLETE)
        return 0;
    if (rc < 0)
        return -1;
    c->status = head.status;
    c->close_after = !head.keep_alive;
    c->remaining = head.content_length;
    if (load->hooks.response)
        c->head_len = (size_t)rc; /* kept for the hook */
    else
        c->rpos += (size_t)rc;
    static const int next[] = {[MF_HTTP_BODY_NONE] = MF_LOAD_READ_HEAD,
                               [MF_HTTP_BODY_LENGTH] = MF_LOAD_READ_LENGTH,
                               [MF_HTTP_BODY_CHUNKED] = MF_LOAD_READ_CHUNKED,
                               [MF_HTTP_BODY_UNTIL_CLOSE] = MF_LOAD_READ_CLOSE};
    c->rstate = next[head.body];
    if (c->rstate == MF_LOAD_READ_CHUNKED)
        mf_http_chunked_init(&c->chunked, 0);
    return 1;
}

/* Body bytes at cur: kept for the hook, or dropped. */
static void mf__load_conn_take_body(mf_load_conn_t *c, size_t n)
{
    if (c->load->hooks.response)
        c->body_len += n;
    else
        c->rpos += n;
}

/* The chunked body at cur, decoded in place: 1 complete, 0 need more, -1
 * bad. Without the hook the decoded bytes are dropped. */
static int mf__load_conn_chunked(mf_load_conn_t *c)
{
    size_t cur = c->rpos + c->head_len + c->body_len;
    size_t n = c->rlen - cur;
    ssize_t rc = mf_http_chunked_decode(&c->chunked, c->rbuf + cur, &n);
    if (rc == MF_HTTP_ERROR)
        return -1;
    size_t after = rc >= 0 ? (size_t)rc : 0;
    if (c->load->hooks.response) {
        c->body_len += n;
    } else if (after) {
        memmove(c->rbuf + cur, c->rbuf + cur + n, after);
        n = 0;
    } else {
        n = 0;
    }
    c->rlen = cur + n + after;
    return rc >= 0 ? 1 : 0;
}

/* Frames what rbuf holds into responses. false when the connection can
 * read no more. */
static bool mf__load_conn_parse(mf_load_conn_t *c, uint64_t *now_ns)
{
    while (c->pending) {
        size_t cur = c->rpos + c->head_len + c->body_len;
        int done = 0;
        if (c->rstate == MF_LOAD_READ_HEAD) {
            int rc = mf__load_conn_parse_head(c);
            if (rc <= 0) {
                if (rc < 0)
                    mf__load_conn_fail(c, &c->load->stats.errors.read);
                return rc == 0;
            }
            if (c->rstate != MF_LOAD_READ_HEAD)
                continue; /* to the body */
            done = 1;
        } else if (c->rstate == MF_LOAD_READ_LENGTH) {
            size_t take = c->rlen - cur;
            if (take > c->remaining)
                take = (size_t)c->remaining;
            mf__load_conn_take_body(c, take);
            c->remaining -= take;
            done = c->remaining == 0;
        } else if (c->rstate == MF_LOAD_READ_CHUNKED) {
            done = mf__load_conn_chunked(c);
            if (done < 0) {
                mf__load_conn_fail(c, &c->load->stats.errors.read);
                return false;
            }
        } else {
            mf__load_conn_take_body(c, c->rlen - cur); /* until the close */
            if (!c->load->hooks.response)
                c->rpos = c->rlen = 0;
        }
        if (!done)
            return true;
        if (!*now_ns)
            *now_ns = mf__load_now_ns();
        if (!mf__load_conn_response_done(c, *now_ns))
            return false;
    }
    return true;
}

/* Room to read into: compacts, then grows (kept bodies, long heads). */
static bool mf__load_conn_make_room(mf_load_conn_t *c)
{
    if (c->rlen < c->rcap)
        return true;
    if (c->rpos) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
        return true;
    }
    if (!c->load->hooks.response && c->rcap >= MF_LOAD_MAX_HEAD)
        return false; /* a head longer than any we take */
    char *p = mf_try_malloc(c->rcap * 2);
    if (!p)
        return false;
    memcpy(p, c->rbuf, c->rlen);
    mf_free(c->rbuf_own);
    c->rbuf = c->rbuf_own = p;
    c->rcap *= 2;
    return true;
}

/* The peer closed: the end of a body that runs until the close, or a
 * response cut short (a read error when one was expected). */
static void mf__load_conn_eof(mf_load_conn_t *c)
{
    if (c->pending && c->rstate == MF_LOAD_READ_CLOSE) {
        c->close_after = true;
        if (!mf__load_conn_response_done(c, mf__load_now_ns()))
            return;
    }
    if (c->pending)
        mf__load_conn_fail(c, &c->load->stats.errors.read);
    else
        mf__load_conn_reopen(c, false);
}

/* Back to the connection's own buffer after a read into the shared one,
 * with what is left of a partial response. */
static void mf__load_conn_settle(mf_load_conn_t *c)
{
    if (c->rbuf == c->rbuf_own)
        return;
    size_t keep = c->rlen - c->rpos;
    memcpy(c->rbuf_own, c->rbuf + c->rpos, keep);
    c->rbuf = c->rbuf_own;
    c->rpos = 0;
    c->rlen = keep;
}

/* One read into rbuf, or into the shared buffer when nothing partial is
 * held. n as mf__sock_read; *want: what was asked. */
static ssize_t mf__load_conn_read_some(mf_load_conn_t *c, size_t *want)
{
    mf_load_t *load = c->load;
    if (!c->rlen && !load->hooks.response && c->rcap == MF_LOAD_READ_BUF)
        c->rbuf = load->rbuf_shared;
    *want = c->rcap - c->rlen;
    ssize_t n = mf__sock_read(c->io.fd, c->ssl, c->rbuf + c->rlen, *want);
    if (n > 0) {
        if (load->measuring)
            load->stats.bytes += (uint64_t)n;
        c->rlen += (size_t)n;
    }
    return n;
}

/* Reads and frames until the socket is drained. false when the connection
 * can read no more. */
static bool mf__load_conn_read_frames(mf_load_conn_t *c)
{
    for (;;) {
        mf__load_conn_settle(c);
        if (!mf__load_conn_make_room(c)) {
            mf__load_conn_fail(c, &c->load->stats.errors.read);
            return false;
        }
        size_t want;
        ssize_t n = mf__load_conn_read_some(c, &want);
        if (n == MF_EAGAIN)
            return true;
        if (n <= 0) {
            if (n == 0)
                mf__load_conn_eof(c);
            else
                mf__load_conn_fail(c, &c->load->stats.errors.read);
            return false;
        }
        uint64_t now = 0;
        if (!mf__load_conn_parse(c, &now))
            return false;
        if (!c->pending && c->rlen > c->rpos && c->state == MF_LOAD_CONN_IDLE) {
            mf__load_conn_fail(c, &c->load->stats.errors.read); /* unasked */
            return false;
        }
        /* A short read drained the socket: the next edge says when more
         * comes (TLS may hold a decrypted record back: read to EAGAIN). */
        if ((size_t)n < want && !c->ssl)
            return true;
    }
}

static void mf__load_conn_read(mf_load_conn_t *c)
{
    (void)mf__load_conn_read_frames(c);
    mf__load_conn_settle(c);
}

/* ---- opening ---------------------------------------------------------------
 */

static void mf__load_conn_opened(mf_load_conn_t *c)
{
    c->state = MF_LOAD_CONN_IDLE;
    if (c->load->interval_ns && !c->due_ns)
        c->due_ns = c->load->start_ns + (uint64_t)(c - c->load->conns) *
                                            c->load->interval_ns /
                                            c->load->cfg.connections;
    mf__load_conn_next(c);
}

static void mf__load_conn_handshake(mf_load_conn_t *c)
{
    int rc = mf__tls_handshake(c->ssl);
    if (rc == MF_EAGAIN)
        return;
    if (rc < 0) {
        mf__load_conn_fail(c, &c->load->stats.errors.connect);
        return;
    }
    mf__load_conn_opened(c);
}

static void mf__load_conn_connected(mf_load_conn_t *c, unsigned events)
{
    mf_load_t *load = c->load;
    if (!(events & (MF_IO_WRITE | MF_IO_ERROR | MF_IO_HUP)))
        return;
    if (mf__net_socket_error(c->io.fd) < 0) {
        mf__load_conn_fail(c, &load->stats.errors.connect);
        return;
    }
    const mf_load_target_t *t = &load->targets[c->target];
    if (!t->tls) {
        mf__load_conn_opened(c);
        return;
    }
    c->ssl = mf__tls_client_ssl(load->loop, c->io.fd, t->host, false, NULL);
    if (!c->ssl) {
        mf__load_conn_fail(c, &load->stats.errors.connect);
        return;
    }
    c->state = MF_LOAD_CONN_HANDSHAKE;
    mf__load_conn_handshake(c);
}

static void mf__load_conn_event(mf_io_t *io, unsigned events)
{
    mf_load_conn_t *c = io->data;
    if (c->state == MF_LOAD_CONN_CONNECTING) {
        mf__load_conn_connected(c, events);
        return;
    }
    if (c->state == MF_LOAD_CONN_HANDSHAKE) {
        mf__load_conn_handshake(c);
        return;
    }
    int fd = io->fd;
    if (c->want_write && (events & MF_IO_WRITE) && !mf__load_conn_write(c))
        return;
    if (c->io.fd == fd && (events & (MF_IO_READ | MF_IO_ERROR | MF_IO_HUP)))
        mf__load_conn_read(c);
}

void mf__load_conn_check_timeout(mf_load_conn_t *c, uint64_t now_ns,
                                 uint64_t timeout_ns)
{
    if (now_ns < c->state_ns + timeout_ns)
        return;
    if (c->state == MF_LOAD_CONN_BUSY)
        mf__load_conn_fail(c, &c->load->stats.errors.timeout);
    else if (c->state == MF_LOAD_CONN_CONNECTING ||
             c->state == MF_LOAD_CONN_HANDSHAKE)
        mf__load_conn_fail(c, &c->load->stats.errors.connect);
}
