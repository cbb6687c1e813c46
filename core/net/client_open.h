/*
 * client_open.h — opening a client connection: the dial (resolve the name,
 * connect to each address in turn, TLS) that every client uses, and under
 * it the opener (the connect and TLS steps alone, once the name is
 * resolved). Internal.
 *
 * The dial, for a protocol's connection (HTTP, streams; Redis and MySQL
 * next):
 *
 *   struct my_conn { mf_io_t io; SSL *ssl; mf_dial_t dial; ... };
 *
 *   mf_io_init(&c->io, -1, my_conn_on_io, c);
 *   mf__dial_init(&c->dial, loop, &c->io, &c->ssl, my_conn_dialed, c);
 *   mf_dial_opts_t o = {.tls = want_tls ? &tls : NULL, .traced = traced};
 *   mf__dial_start(&c->dial, host, port, &o);   // never calls back inside
 *
 *   my_conn_on_io(io, events):
 *       if (mf__dial_active(&c->dial)) { mf__dial_event(&c->dial, events);
 *                                        return; }
 *       ... the protocol's own I/O ...
 *
 *   my_conn_dialed(d, state, error):  exactly once per start
 *       MF_STATE_SUCCESS / 0      open: c->io.fd connected and watched (READ
 *                                 | WRITE, edge-triggered), *ssl set and its
 *                                 handshake done when opts.tls was given
 *       MF_STATE_DNS_ERROR / e    the name did not resolve (MF_EDNS ...)
 *       MF_STATE_TIMEOUT / MF_ETIMEDOUT   the resolver timed out
 *       MF_STATE_SYS_ERROR / e    no address took a connect (the last error)
 *       MF_STATE_TLS_ERROR / MF_ETLS      TLS setup or handshake failed
 *       MF_STATE_CANCELED / MF_ECANCELED  mf__dial_cancel while resolving
 *   On a failure the socket and SSL object made so far are still in c->io
 *   and *ssl: the connection closes them, as it does after success.
 *
 * Canceling: mf__dial_cancel(d) stops a dial at once. While the name was
 * resolving, the callback still runs once (with MF_STATE_CANCELED), later:
 * the dial's memory must live until then, so it returns true and the
 * connection frees itself from that callback (or after it). Otherwise it
 * returns false and nothing more is called.
 *
 * Timeouts: the dial has none of its own beyond the resolver's; the
 * protocol's connect timer cancels it.
 *
 * Times: with opts.traced the dial stamps (CLOCK_MONOTONIC ns) the name
 * resolved, the connect done and the connection open (TLS done; the same
 * moment as connected without TLS) in d->times, for the protocol's traces;
 * untraced, it reads no clock and leaves them 0.
 *
 * Ownership: the dial lives in the caller's connection and borrows its
 * watcher, its SSL slot and, until the callback, the strings of opts.tls.
 * The socket and the SSL object it makes belong to that connection. The
 * host is copied (the DNS query holds it).
 */
#ifndef MF_CLIENT_OPEN_H
#define MF_CLIENT_OPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moonflow/dns.h"
#include "moonflow/loop.h"
#include "tls.h"

/* What the TLS layer needs; tls == NULL in mf__client_open_event: plain TCP. */
typedef struct mf_client_tls {
    const char *host; /* SNI and the name verified */
    bool verify;
    const char *ca_file; /* NULL: the system bundle */
    bool offer_h2;       /* ALPN "h2", "http/1.1" (mf__tls_alpn_is_h2) */
} mf_client_tls_t;

/* ---- the opener: connect each resolved address in turn, then TLS ------- */

typedef struct mf_client_open {
    mf_loop_t *loop;
    mf_io_t *io; /* fd -1 until a connect starts */
    SSL **ssl;
    const mf_dns_query_t *dns;
    size_t next; /* the next address to try */
    bool connecting;
    bool handshaking;
} mf_client_open_t;

void mf__client_open_init(mf_client_open_t *o, mf_loop_t *loop, mf_io_t *io,
                          SSL **ssl);
/* Connects to the first address of dns that takes a connect. 0: a connect
 * is under way (the watcher runs); < 0: none could start (the last error). */
int mf__client_open_start(mf_client_open_t *o, const mf_dns_query_t *dns);
/* A watcher event while opening. MF_EAGAIN: not open yet; 0: open (TLS
 * done when tls is given); MF_ETLS: TLS setup or handshake failed; another
 * negative code: no address is left to try (the last connect error). */
int mf__client_open_event(mf_client_open_t *o, unsigned events,
                          const mf_client_tls_t *tls);

/* ---- the dial: resolve, then the opener -------------------------------- */

typedef struct mf_dial mf_dial_t;
/* The dial ended (see the top of this header). */
typedef void (*mf_dial_cb)(mf_dial_t *d, int state, int error);

typedef struct mf_dial_opts {
    const mf_client_tls_t *tls; /* NULL: plain TCP; copied, strings not */
    bool datagram; /* UDP: a connected datagram socket to the first address
                      (no connect wait, no TLS) */
    bool traced;   /* stamp d->times */
} mf_dial_opts_t;

typedef struct mf_dial_times {
    uint64_t resolved;  /* the name resolved (DNS, or its cache) */
    uint64_t connected; /* the TCP connection established */
    uint64_t opened;    /* open: TLS done (== connected without TLS) */
} mf_dial_times_t;

struct mf_dial {
    mf_client_open_t open;
    mf_dns_query_t dns;
    mf_client_tls_t tls;
    bool use_tls;
    bool datagram;
    bool traced;
    bool resolving; /* the DNS query's callback has not run */
    bool opening;   /* connecting or in the TLS handshake */
    bool canceled;
    mf_dial_times_t times;
    mf_dial_cb cb;
    void *data; /* the caller's */
};

void mf__dial_init(mf_dial_t *d, mf_loop_t *loop, mf_io_t *io, SSL **ssl,
                   mf_dial_cb cb, void *data);
/* Resolves host:port and opens a connection to it; cb runs once, later. */
void mf__dial_start(mf_dial_t *d, const char *host, uint16_t port,
                    const mf_dial_opts_t *opts);
/* The watcher's event while mf__dial_active: the connect's end, the TLS
 * handshake's progress. */
void mf__dial_event(mf_dial_t *d, unsigned events);
/* Stops the dial; true when its callback is still due (with
 * MF_STATE_CANCELED): keep d alive until it has run. */
bool mf__dial_cancel(mf_dial_t *d);
/* Resolving, connecting or in the handshake: the callback has not run. */
static inline bool mf__dial_active(const mf_dial_t *d)
{
    return d->resolving || d->opening;
}

#endif /* MF_CLIENT_OPEN_H */
