/*
 * client_open.c — the opening of every client connection: the dial
 * (resolve, then the opener) and the opener (connect to each resolved
 * address in turn, then the TLS handshake).
 *
 * May call: the loop (watchers, the clock), the resolver, the socket and
 * TLS helpers of this folder.
 */
#include "client_open.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "moonflow/error.h"
#include "net.h"

void mf__client_open_init(mf_client_open_t *o, mf_loop_t *loop, mf_io_t *io,
                          SSL **ssl)
{
    o->loop = loop;
    o->io = io;
    o->ssl = ssl;
    o->dns = NULL;
    o->next = 0;
    o->connecting = false;
    o->handshaking = false;
}

/* Tries the addresses from o->next on; the last error when none is left. */
static int mf__client_open_connect_next(mf_client_open_t *o)
{
    int err = MF_ECONNREFUSED;
    while (o->next < o->dns->naddrs) {
        int fd = mf__net_connect(&o->dns->addrs[o->next++]);
        if (fd < 0) {
            err = fd;
            continue;
        }
        o->io->fd = fd;
        if (mf_io_start(o->loop, o->io, MF_IO_READ | MF_IO_WRITE) < 0) {
            close(fd);
            o->io->fd = -1;
            continue;
        }
        o->connecting = true;
        return 0; /* the WRITE edge says connected (or failed) */
    }
    return err;
}

int mf__client_open_start(mf_client_open_t *o, const mf_dns_query_t *dns)
{
    o->dns = dns;
    o->next = 0;
    return mf__client_open_connect_next(o);
}

/* The connect ended: MF_EAGAIN when it failed and the next address is
 * being tried, 0 when connected (and TLS set up), < 0 on a final error. */
static int mf__client_open_connected(mf_client_open_t *o,
                                     const mf_client_tls_t *tls)
{
    o->connecting = false;
    if (mf__net_socket_error(o->io->fd) < 0) {
        mf_io_stop(o->loop, o->io);
        close(o->io->fd);
        o->io->fd = -1;
        int rc = mf__client_open_connect_next(o);
        return rc == 0 ? MF_EAGAIN : rc;
    }
    if (tls) {
        *o->ssl = mf__tls_client_ssl(o->loop, o->io->fd, tls->host, tls->verify,
                                     tls->ca_file);
        if (!*o->ssl || (tls->offer_h2 && mf__tls_client_offer_h2(*o->ssl) < 0))
            return MF_ETLS;
        o->handshaking = true;
    }
    return 0;
}

int mf__client_open_event(mf_client_open_t *o, unsigned events,
                          const mf_client_tls_t *tls)
{
    if (o->connecting) {
        /* A non-blocking connect ends with a WRITE edge (or an error). */
        if (!(events & (MF_IO_WRITE | MF_IO_ERROR | MF_IO_HUP)))
            return MF_EAGAIN;
        int rc = mf__client_open_connected(o, tls);
        if (rc < 0)
            return rc;
    }
    if (o->handshaking) {
        int rc = mf__tls_handshake(*o->ssl);
        if (rc == MF_EAGAIN)
            return MF_EAGAIN;
        if (rc < 0)
            return MF_ETLS;
        o->handshaking = false;
    }
    return 0;
}

/* ---- the dial ----------------------------------------------------------- */

static void mf__dial_stamp(const mf_dial_t *d, uint64_t *at)
{
    if (MF_UNLIKELY(d->traced))
        *at = mf_monotonic_ns();
}

void mf__dial_init(mf_dial_t *d, mf_loop_t *loop, mf_io_t *io, SSL **ssl,
                   mf_dial_cb cb, void *data)
{
    mf__client_open_init(&d->open, loop, io, ssl);
    d->use_tls = d->datagram = d->traced = false;
    d->resolving = d->opening = d->canceled = false;
    d->times = (mf_dial_times_t){0, 0, 0};
    d->cb = cb;
    d->data = data;
}

/* The callback runs last: it may close and free the connection. */
static void mf__dial_done(mf_dial_t *d, int state, int error)
{
    d->opening = false;
    d->cb(d, state, error);
}

/* A connected datagram socket to the first address: no wait. */
static int mf__dial_datagram(mf_dial_t *d)
{
    const mf_sockaddr_t *addr = &d->dns.addrs[0];
    int fd = socket(addr->sa.sa_family,
                    SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mf_err_from_errno(errno);
    if (connect(fd, &addr->sa, mf__net_addr_len(addr)) < 0) {
        int err = mf_err_from_errno(errno);
        close(fd);
        return err;
    }
    d->open.io->fd = fd;
    int rc = mf_io_start(d->open.loop, d->open.io, MF_IO_READ | MF_IO_WRITE);
    if (rc < 0) {
        close(fd);
        d->open.io->fd = -1;
    }
    return rc;
}

static void mf__dial_resolved(mf_dns_query_t *q, int status)
{
    mf_dial_t *d = q->data;
    d->resolving = false;
    if (d->canceled || status == MF_ECANCELED) {
        mf__dial_done(d, MF_STATE_CANCELED, MF_ECANCELED);
        return;
    }
    if (status < 0) {
        mf__dial_done(
            d, status == MF_ETIMEDOUT ? MF_STATE_TIMEOUT : MF_STATE_DNS_ERROR,
            status);
        return;
    }
    mf__dial_stamp(d, &d->times.resolved);
    if (d->datagram) {
        int rc = mf__dial_datagram(d);
        mf__dial_done(d, rc < 0 ? MF_STATE_SYS_ERROR : MF_STATE_SUCCESS, rc);
        return;
    }
    d->opening = true;
    int rc = mf__client_open_start(&d->open, &d->dns);
    if (rc < 0)
        mf__dial_done(d, MF_STATE_SYS_ERROR, rc);
}

void mf__dial_start(mf_dial_t *d, const char *host, uint16_t port,
                    const mf_dial_opts_t *opts)
{
    d->use_tls = opts->tls != NULL;
    if (opts->tls)
        d->tls = *opts->tls;
    d->datagram = opts->datagram;
    d->traced = opts->traced;
    d->canceled = false;
    d->opening = false;
    d->times = (mf_dial_times_t){0, 0, 0};
    d->resolving = true;
    mf_dns_query_start(d->open.loop, &d->dns, host, port, mf__dial_resolved, d);
}

void mf__dial_event(mf_dial_t *d, unsigned events)
{
    if (!d->opening)
        return;
    mf_client_open_t *o = &d->open;
    bool was_connecting = o->connecting;
    int rc = mf__client_open_event(o, events, d->use_tls ? &d->tls : NULL);
    /* The connect ended well: open now, or its TLS handshake under way
     * (a failed address goes on connecting to the next one). */
    if (was_connecting && !o->connecting && (rc >= 0 || o->handshaking))
        mf__dial_stamp(d, &d->times.connected);
    if (rc == MF_EAGAIN)
        return;
    if (rc < 0) {
        mf__dial_done(
            d, rc == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR, rc);
        return;
    }
    if (d->use_tls)
        mf__dial_stamp(d, &d->times.opened);
    else /* nothing between: the same moment */
        d->times.opened = d->times.connected;
    mf__dial_done(d, MF_STATE_SUCCESS, 0);
}

bool mf__dial_cancel(mf_dial_t *d)
{
    d->opening = false;
    if (!d->resolving)
        return false;
    if (!d->canceled) {
        d->canceled = true;
        mf_dns_query_cancel(&d->dns);
    }
    return true;
}
