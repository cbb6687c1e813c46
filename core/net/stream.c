/*
 * stream.c — a client connection for protocols moonflow does not speak
 * itself: connect (the dial: DNS, each address in turn; or a unix socket),
 * TLS, reads into caller buffers and writes of iovecs with a timeout each,
 * close. Owns the mf_stream_t record; the keepalive pool (stream_pool.c,
 * the endpoint pool) only links idle streams and closes them through
 * mf__stream_close.
 *
 * May call: the loop (watchers, timers, deferred posts, loop memory), the
 * dial, the endpoint pool (an idle stream's event) and the TLS glue of
 * this folder, libc and OpenSSL.
 */
#include "stream_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/x509.h>

#include "moonflow/error.h"
#include "net.h"

enum { MF_STREAM_T_CONNECT, MF_STREAM_T_SEND, MF_STREAM_T_READ };

static void mf__stream_maybe_free(mf_stream_t *s)
{
    if (s->state == MF_STREAM_CLOSED && !s->rd.posted && !s->wr.posted &&
        !mf__dial_active(&s->dial) && !s->in_callback) {
        if (s->ups) {
            mf_upstream_abandon(s->ups);
            mf_loop_free(s->loop, s->ups, sizeof *s->ups);
        }
        mf_loop_free(s->loop, s, sizeof *s);
    }
}

/* ---- operations: start, complete (deferred), time out ---------------- */

static void mf__stream_op_start(mf_stream_t *s, mf_stream_op_t *op,
                                mf_stream_cb cb, void *data, unsigned which)
{
    op->cb = cb;
    op->data = data;
    op->status = 0;
    op->active = true;
    mf_timer_start(s->loop, &op->timer, s->timeout_ms[which]);
}

/* The operation ended: its callback runs on the loop's next deferred phase
 * (never inside the call that started it). */
static void mf__stream_op_complete(mf_stream_t *s, mf_stream_op_t *op,
                                   ssize_t status)
{
    if (!op->active || op->posted)
        return;
    mf_timer_stop(s->loop, &op->timer);
    op->status = status;
    op->posted = true;
    mf_loop_defer(s->loop, &op->post);
}

static void mf__stream_op_posted(mf_post_t *post)
{
    mf_stream_op_t *op = post->data;
    mf_stream_t *s = op->owner;
    op->posted = false;
    op->active = false;
    s->in_callback++;
    op->cb(s, op->status, op->data);
    s->in_callback--;
    mf__stream_maybe_free(s);
}

static void mf__stream_read_timed_out(mf_timer_t *timer)
{
    mf_stream_t *s = timer->data;
    mf__stream_op_complete(s, &s->rd, MF_ETIMEDOUT);
}

/* A connect or handshake that times out leaves the stream failed (only
 * close is left); a send that times out leaves it as it is. */
static void mf__stream_write_timed_out(mf_timer_t *timer)
{
    mf_stream_t *s = timer->data;
    if (s->state == MF_STREAM_CONNECTING || s->state == MF_STREAM_HANDSHAKING) {
        if (s->ups && s->state == MF_STREAM_CONNECTING)
            mf_upstream_done(s->ups, false, 0); /* its server timed out */
        s->state = MF_STREAM_FAILED;
        mf__dial_cancel(&s->dial); /* a DNS query still calls back */
        mf_io_stop(s->loop, &s->io);
    }
    mf__stream_op_complete(s, &s->wr, MF_ETIMEDOUT);
}

static void mf__stream_op_init(mf_stream_t *s, mf_stream_op_t *op,
                               mf_timer_cb timed_out)
{
    op->owner = s;
    mf_timer_init(&op->timer, timed_out, s);
    mf_post_init(&op->post, mf__stream_op_posted, op);
}

/* ---- reads and writes -------------------------------------------------- */

static ssize_t mf__stream_not_open(const mf_stream_t *s)
{
    return s->state == MF_STREAM_CLOSED ? MF_ECLOSED : MF_ENOTCONN;
}

ssize_t mf_stream_try_read(mf_stream_t *s, void *buf, size_t len)
{
    if (s->state != MF_STREAM_OPEN)
        return mf__stream_not_open(s);
    if (s->type == MF_STREAM_UDP) {
        ssize_t n;
        do {
            n = recv(s->io.fd, buf, len, 0);
        } while (n < 0 && errno == EINTR);
        return n >= 0 ? n : mf_err_from_errno(errno);
    }
    ssize_t n = mf__sock_read(s->io.fd, s->ssl, buf, len);
    return n == 0 && len ? MF_EOF : n;
}

ssize_t mf_stream_try_writev(mf_stream_t *s, const struct iovec *iov,
                             int iovcnt)
{
    if (s->state != MF_STREAM_OPEN)
        return mf__stream_not_open(s);
    ssize_t n;
    if (s->ssl) {
        n = mf__sock_writev(s->io.fd, s->ssl, iov, iovcnt);
        return n == MF_EAGAIN ? 0 : n;
    }
    /* sendmsg for MSG_NOSIGNAL: a peer gone is MF_EPIPE, not a signal. */
    struct msghdr msg = {.msg_iov = (struct iovec *)iov,
                         .msg_iovlen = (size_t)iovcnt};
    do {
        n = sendmsg(s->io.fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    return errno == EAGAIN ? 0 : mf_err_from_errno(errno);
}

static void mf__stream_do_read(mf_stream_t *s)
{
    ssize_t n = mf_stream_try_read(s, s->rbuf, s->rlen);
    if (n != MF_EAGAIN)
        mf__stream_op_complete(s, &s->rd, n);
}

/* Drops the first n written bytes from the front of the iovec. */
static void mf__stream_advance(mf_stream_t *s, size_t n)
{
    while (s->wcnt > 0 && n >= s->wiov->iov_len) {
        n -= s->wiov->iov_len;
        s->wiov++;
        s->wcnt--;
    }
    if (s->wcnt > 0) {
        s->wiov->iov_base = (char *)s->wiov->iov_base + n;
        s->wiov->iov_len -= n;
    }
}

static void mf__stream_do_write(mf_stream_t *s)
{
    for (;;) {
        while (s->wcnt > 0 && s->wiov->iov_len == 0) {
            s->wiov++;
            s->wcnt--;
        }
        if (s->wcnt == 0) {
            mf__stream_op_complete(s, &s->wr, (ssize_t)s->written);
            return;
        }
        ssize_t n = mf_stream_try_writev(s, s->wiov, s->wcnt);
        if (n < 0) {
            mf__stream_op_complete(s, &s->wr, n);
            return;
        }
        if (n == 0)
            return; /* the next WRITE edge goes on */
        s->written += (size_t)n;
        mf__stream_advance(s, (size_t)n);
    }
}

/* The waits alone: the socket is watched edge-triggered for both
 * directions all along, so a caller whose try just found it empty (or
 * full) loses no edge by not trying again. */
void mf_stream_wait_read(mf_stream_t *s, void *buf, size_t len, mf_stream_cb cb,
                         void *data)
{
    s->rbuf = buf;
    s->rlen = len;
    mf__stream_op_start(s, &s->rd, cb, data, MF_STREAM_T_READ);
    if (s->state != MF_STREAM_OPEN)
        mf__stream_op_complete(s, &s->rd, mf__stream_not_open(s));
}

void mf_stream_read(mf_stream_t *s, void *buf, size_t len, mf_stream_cb cb,
                    void *data)
{
    mf_stream_wait_read(s, buf, len, cb, data);
    mf__stream_do_read(s);
}

void mf_stream_wait_writev(mf_stream_t *s, struct iovec *iov, int iovcnt,
                           mf_stream_cb cb, void *data)
{
    s->wiov = iov;
    s->wcnt = iovcnt;
    s->written = 0;
    mf__stream_op_start(s, &s->wr, cb, data, MF_STREAM_T_SEND);
    if (s->state != MF_STREAM_OPEN)
        mf__stream_op_complete(s, &s->wr, mf__stream_not_open(s));
}

void mf_stream_writev(mf_stream_t *s, struct iovec *iov, int iovcnt,
                      mf_stream_cb cb, void *data)
{
    mf_stream_wait_writev(s, iov, iovcnt, cb, data);
    if (s->state == MF_STREAM_OPEN)
        mf__stream_do_write(s);
}

/* ---- TLS ---------------------------------------------------------------- */

static void mf__stream_handshake_step(mf_stream_t *s)
{
    int rc = mf__tls_handshake(s->ssl);
    if (rc == MF_EAGAIN)
        return;
    if (rc == 0) {
        s->state = MF_STREAM_OPEN;
        mf__stream_op_complete(s, &s->wr, 0);
        return;
    }
    s->verify_result = SSL_get_verify_result(s->ssl);
    SSL_free(s->ssl); /* no close_notify for a session that never began */
    s->ssl = NULL;
    s->state = MF_STREAM_FAILED;
    mf_io_stop(s->loop, &s->io);
    mf__stream_op_complete(s, &s->wr, MF_ETLS);
}

/* What a TLS session was made for: the name, the check and the CA file,
 * hashed (FNV-1a), so a pooled session serves only the same request. */
static uint64_t mf__stream_tls_identity(const char *name, bool verify,
                                        const char *ca_file)
{
    uint64_t h = 1469598103934665603ULL;
    const char *parts[2] = {name ? name : "", ca_file ? ca_file : ""};
    for (int i = 0; i < 2; i++) {
        for (const char *p = parts[i]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xffu) * 1099511628211ULL; /* a separator */
    }
    return (h ^ (verify ? 1u : 0u)) * 1099511628211ULL;
}

void mf_stream_handshake(mf_stream_t *s, const char *server_name, bool verify,
                         const char *ca_file, mf_stream_cb cb, void *data)
{
    mf__stream_op_start(s, &s->wr, cb, data, MF_STREAM_T_CONNECT);
    s->verify_result = X509_V_OK;
    s->tls_other = false;
    uint64_t identity = mf__stream_tls_identity(server_name, verify, ca_file);
    if (s->state != MF_STREAM_OPEN || s->type != MF_STREAM_TCP) {
        mf__stream_op_complete(
            s, &s->wr,
            s->state == MF_STREAM_OPEN ? MF_EINVAL : mf__stream_not_open(s));
        return;
    }
    if (s->ssl) { /* a pooled stream keeps its session: for the same use */
        s->tls_other = identity != s->tls_identity;
        mf__stream_op_complete(s, &s->wr, s->tls_other ? MF_ETLS : 0);
        return;
    }
    s->tls_identity = identity;
    s->ssl =
        mf__tls_client_ssl(s->loop, s->io.fd, server_name, verify, ca_file);
    if (!s->ssl) {
        mf__stream_op_complete(s, &s->wr, MF_ETLS);
        return;
    }
    /* A peer that closes without close_notify ends the stream (MF_EOF),
     * as nginx takes it: the protocol above frames its own messages. */
    SSL_set_options(s->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
    s->state = MF_STREAM_HANDSHAKING;
    mf__stream_handshake_step(s);
}

char *mf_stream_tls_error(const mf_stream_t *s, char *buf, size_t size)
{
    if (s->verify_result != X509_V_OK)
        snprintf(buf, size, "%ld: %s", s->verify_result,
                 X509_verify_cert_error_string(s->verify_result));
    else if (s->tls_other)
        snprintf(buf, size,
                 "the connection's TLS session was made for "
                 "another server name or trust");
    else
        snprintf(buf, size, "handshake failed");
    return buf;
}

bool mf_stream_has_tls(const mf_stream_t *s)
{
    return s->ssl != NULL;
}

/* ---- connecting ---------------------------------------------------------- */

static void mf__stream_io_event(mf_io_t *io, unsigned events)
{
    mf_stream_t *s = io->data;
    switch (s->state) {
    case MF_STREAM_CONNECTING:
        mf__dial_event(&s->dial, events);
        return;
    case MF_STREAM_HANDSHAKING:
        mf__stream_handshake_step(s);
        return;
    case MF_STREAM_POOLED:
        /* room to write again is no news; bytes or an end of file are */
        mf_pconn_idle_fired(&s->pc); /* the pool asks healthy() */
        return;
    case MF_STREAM_OPEN:
        if (s->rd.active && !s->rd.posted)
            mf__stream_do_read(s);
        if (s->wr.active && !s->wr.posted && s->state == MF_STREAM_OPEN)
            mf__stream_do_write(s);
        return;
    default:
        return;
    }
}

/* A unix socket, connected at once: watched from now on. */
static int mf__stream_dial(mf_stream_t *s, const struct sockaddr *addr,
                           socklen_t len)
{
    int type = s->type == MF_STREAM_UDP ? SOCK_DGRAM : SOCK_STREAM;
    int fd = socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mf_err_from_errno(errno);
    if (connect(fd, addr, len) < 0) {
        /* a unix listener with a full backlog is refused, not waited on */
        int err = errno == EAGAIN ? MF_ECONNREFUSED : mf_err_from_errno(errno);
        close(fd);
        return err;
    }
    s->io.fd = fd;
    int rc = mf_io_start(s->loop, &s->io, MF_IO_READ | MF_IO_WRITE);
    if (rc < 0) {
        close(fd);
        s->io.fd = -1;
        return rc;
    }
    s->state = MF_STREAM_OPEN;
    return 0;
}

static int mf__stream_dial_unix(mf_stream_t *s, const char *path)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof un.sun_path)
        return MF_EINVAL;
    memcpy(un.sun_path, path, n + 1);
    return mf__stream_dial(s, (struct sockaddr *)&un, sizeof un);
}

/* The dial ended: open (a TCP connection, or a connected UDP socket), or
 * failed with the resolver's or the last connect's code. */
static void mf__stream_dial_group(mf_stream_t *s);

/* A failed connect to a group's server: the socket made for it goes, and
 * the next server is dialed (true), unless the group has none left. */
static bool mf__stream_next_server(mf_stream_t *s, int state)
{
    mf_upstream_done(s->ups, false, 0);
    if (state == MF_STATE_CANCELED || !mf_upstream_may_retry(s->ups))
        return false;
    if (s->io.fd >= 0) {
        mf_io_stop(s->loop, &s->io);
        close(s->io.fd);
        s->io.fd = -1;
    }
    mf__stream_dial_group(s);
    return true;
}

static void mf__stream_dialed(mf_dial_t *d, int state, int error)
{
    mf_stream_t *s = d->data;
    if (s->state != MF_STREAM_CONNECTING) { /* timed out or closed */
        if (s->ups)
            mf_upstream_abandon(s->ups);
        mf__stream_maybe_free(s);
        return;
    }
    if (s->ups && state != MF_STATE_SUCCESS && mf__stream_next_server(s, state))
        return;
    if (s->ups && state == MF_STATE_SUCCESS) /* a stream's request: its open */
        mf_upstream_done(s->ups, true, mf_monotonic_ns() - s->ups->attempt_ns);
    s->state = state == MF_STATE_SUCCESS ? MF_STREAM_OPEN : MF_STREAM_FAILED;
    mf__stream_op_complete(s, &s->wr, error);
}

/* The next server of the stream's group, dialed; none left: the connect
 * fails with the last attempt's error, or MF_ENOUPSTREAM. */
static void mf__stream_dial_group(mf_stream_t *s)
{
    int rc = mf_upstream_balance(s->loop, s->ups, NULL, 0);
    if (rc < 0) {
        s->state = MF_STREAM_FAILED;
        mf__stream_op_complete(s, &s->wr,
                               s->ups->attempts ? MF_ECONNREFUSED : rc);
        return;
    }
    mf_dial_opts_t opts = {.datagram = s->type == MF_STREAM_UDP};
    mf__dial_start(&s->dial, s->ups->host, s->ups->port, &opts);
}

void mf_stream_connect(mf_stream_t *s, const char *host, uint16_t port,
                       mf_stream_cb cb, void *data)
{
    mf__stream_op_start(s, &s->wr, cb, data, MF_STREAM_T_CONNECT);
    if (s->state != MF_STREAM_NEW || !host || !*host) {
        mf__stream_op_complete(s, &s->wr, MF_EINVAL);
        return;
    }
    if (strncmp(host, "unix:", 5) == 0) {
        int rc = mf__stream_dial_unix(s, host + 5);
        if (rc < 0)
            s->state = MF_STREAM_FAILED;
        mf__stream_op_complete(s, &s->wr, rc);
        return;
    }
    if (strlen(host) > MF_DNS_MAX_HOST) {
        s->state = MF_STREAM_FAILED;
        mf__stream_op_complete(s, &s->wr, MF_EINVAL);
        return;
    }
    s->state = MF_STREAM_CONNECTING;
    mf_upstream_t *up = mf_upstream_find(host, MF_UPSTREAM_NUL);
    if (MF_UNLIKELY(up != NULL)) { /* the port is the group's servers' */
        s->ups = mf_loop_alloc(s->loop, sizeof *s->ups);
        mf_upstream_try_init(s->ups, up);
        mf__stream_dial_group(s);
        return;
    }
    mf_dial_opts_t opts = {.datagram = s->type == MF_STREAM_UDP};
    mf__dial_start(&s->dial, host, port, &opts);
}

/* ---- life ------------------------------------------------------------- */

mf_stream_t *mf_stream_create(mf_loop_t *loop, mf_stream_type_t type)
{
    mf_stream_t *s = mf_loop_alloc(loop, sizeof *s);
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->type = type;
    s->state = MF_STREAM_NEW;
    for (int i = 0; i < 3; i++)
        s->timeout_ms[i] = MF_STREAM_DEFAULT_TIMEOUT_MS;
    mf_io_init(&s->io, -1, mf__stream_io_event, s);
    mf__stream_op_init(s, &s->rd, mf__stream_read_timed_out);
    mf__stream_op_init(s, &s->wr, mf__stream_write_timed_out);
    mf__dial_init(&s->dial, loop, &s->io, &s->ssl, mf__stream_dialed, s);
    return s;
}

void mf_stream_set_timeouts(mf_stream_t *s, uint32_t connect_ms,
                            uint32_t send_ms, uint32_t read_ms)
{
    uint32_t t[3] = {connect_ms, send_ms, read_ms};
    for (int i = 0; i < 3; i++)
        s->timeout_ms[i] = t[i] ? t[i] : MF_STREAM_DEFAULT_TIMEOUT_MS;
}

unsigned mf_stream_reused(const mf_stream_t *s)
{
    return s->reused;
}

bool mf__stream_healthy(const mf_stream_t *s)
{
    char c;
    if (s->io.fd < 0 || (s->ssl && SSL_pending(s->ssl) > 0))
        return false;
    ssize_t n = recv(s->io.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* A pending operation ends with MF_ECANCELED; one whose completion is
 * already queued is told the same (its buffer may be gone). */
static void mf__stream_cancel_op(mf_stream_t *s, mf_stream_op_t *op)
{
    if (op->posted)
        op->status = MF_ECANCELED;
    else
        mf__stream_op_complete(s, op, MF_ECANCELED);
}

void mf__stream_close(mf_stream_t *s)
{
    mf__dial_cancel(&s->dial); /* a DNS query still calls back */
    mf_pconn_detach(&s->pc);   /* in no endpoint when the pool closes it */
    s->state = MF_STREAM_CLOSED;
    if (s->io.fd >= 0) {
        mf_io_stop(s->loop, &s->io);
        if (s->ssl)
            mf__tls_close(s->ssl);
        close(s->io.fd);
        s->io.fd = -1;
    } else if (s->ssl) {
        SSL_free(s->ssl);
    }
    s->ssl = NULL;
    mf__stream_cancel_op(s, &s->rd);
    mf__stream_cancel_op(s, &s->wr);
    mf__stream_maybe_free(s);
}

void mf_stream_close(mf_stream_t *s)
{
    /* twice, or after handing it to the pool: not the caller's any more */
    if (s->state == MF_STREAM_CLOSED || s->state == MF_STREAM_POOLED)
        return;
    mf__stream_close(s);
}
