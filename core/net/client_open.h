/*
 * client_open.h — opening a client connection once its name is resolved,
 * shared by the HTTP and Redis clients: a non-blocking connect to each
 * resolved address in turn (the next one when a connect fails), then the
 * TLS handshake when the connection wants one. Internal.
 *
 * Ownership: the opener lives in the caller's connection and borrows its
 * watcher, its SSL slot and the DNS answer. The socket and the SSL object it
 * makes belong to that connection, which closes them on failure as on
 * success.
 */
#ifndef MF_CLIENT_OPEN_H
#define MF_CLIENT_OPEN_H

#include <stdbool.h>
#include <stddef.h>

#include "moonflow/dns.h"
#include "moonflow/loop.h"
#include "tls.h"

/* What the TLS layer needs; tls == NULL in mf__client_open_event: plain TCP. */
typedef struct mf_client_tls {
    const char *host; /* SNI and the name verified */
    bool verify;
    const char *ca_file; /* NULL: the system bundle */
} mf_client_tls_t;

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
#endif /* MF_CLIENT_OPEN_H */
