/*
 * client_open.c — connect to each resolved address in turn, then the TLS
 * handshake: the opening of every client connection (HTTP, Redis).
 */
#include "client_open.h"

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
        if (!*o->ssl)
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
