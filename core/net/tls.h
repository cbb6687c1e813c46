/*
 * tls.h — OpenSSL 3 glue for servers (certificates and SNI from an
 * mf_tls_server_config_t) and clients (verification), and the socket
 * read/write calls that go through TLS when a connection has an SSL.
 * Internal; knows no protocol above TCP.
 *
 * Ownership: mf__tls_server_create returns a context the server owns and
 * frees with mf__tls_server_free. The client context is one per loop and per
 * verification mode, kept under the loop's TLS key (tls.c) and freed with
 * the loop. SSL objects belong to their connection.
 */
#ifndef MF_TLS_H
#define MF_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "moonflow/loop.h"
#include "moonflow/tls.h"

typedef struct mf_tls_server mf_tls_server_t;

/* Loads the default certificate/key and the SNI ones. 0, or MF_ETLS after
 * writing OpenSSL's reason to stderr. */
int mf__tls_server_create(const mf_tls_server_config_t *config,
                          mf_tls_server_t **out);
void mf__tls_server_free(mf_tls_server_t *tls);
SSL *mf__tls_server_ssl(mf_tls_server_t *tls, int fd);
/* Whether the handshake chose "h2" by ALPN (a server's config.alpn_h2, a
 * client's mf__tls_client_offer_h2), either side. NULL: no. */
bool mf__tls_alpn_is_h2(const SSL *ssl);

/* Client SSL for fd with SNI = host; verify on: chain against ca_file (NULL:
 * system bundle) and host name match. host NULL: no SNI, and the chain
 * alone is verified. */
SSL *mf__tls_client_ssl(mf_loop_t *loop, int fd, const char *host, bool verify,
                        const char *ca_file);

/* Client ALPN: offers "h2" then "http/1.1" (0, or MF_ETLS); after the
 * handshake, mf__tls_alpn_is_h2 says whether the server chose "h2". */
int mf__tls_client_offer_h2(SSL *ssl);

/* 0 when done, MF_EAGAIN to wait for I/O (either way: edge-triggered
 * watchers are registered for both), MF_ETLS on failure. */
int mf__tls_handshake(SSL *ssl);

/* >0 bytes, 0 EOF, MF_EAGAIN, or a negative MF_E* code (MF_ETLS). */
ssize_t mf__sock_read(int fd, SSL *ssl, void *buf, size_t len);
/* >=0 bytes written, MF_EAGAIN, or a negative MF_E* code. */
ssize_t mf__sock_writev(int fd, SSL *ssl, const struct iovec *iov, int n);

/* Shuts TLS down without waiting (close_notify best effort) and frees. */
void mf__tls_close(SSL *ssl);

#endif /* MF_TLS_H */
