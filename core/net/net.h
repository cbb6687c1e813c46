/*
 * net.h — socket helpers shared by the HTTP server and client: address
 * parsing, listening sockets, non-blocking connects. Internal.
 */
#ifndef MF_NET_H
#define MF_NET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "moonflow/dns.h"

/* Parses "host:port", "[v6]:port" or ":port" (host empty → 0.0.0.0) into a
 * numeric address. 0 or MF_EINVAL (names are not resolved here). */
int mf__net_parse_listen(const char *text, mf_sockaddr_t *addr);
socklen_t mf__net_addr_len(const mf_sockaddr_t *addr);
/* socket + SO_REUSEADDR + SO_REUSEPORT + bind + listen, non-blocking.
 * Returns the fd or a negative MF_E* code. */
int mf__net_listen(const mf_sockaddr_t *addr, int backlog);
/* 0 when nothing is bound to addr but sockets in TIME_WAIT: a bind without
 * SO_REUSEPORT, closed at once, which fails with MF_EADDRINUSE even against
 * SO_REUSEPORT listeners of the same user. */
int mf__net_check_free(const mf_sockaddr_t *addr);
/* "127.0.0.1:8080" or "[::1]:8080", numeric. */
void mf__net_addr_text(const mf_sockaddr_t *addr, char *buf, size_t len);
/* Non-blocking connect; returns the fd (connection may be in progress) or a
 * negative MF_E* code. */
int mf__net_connect(const mf_sockaddr_t *addr);
/* The pending error of a connecting socket (0 when connected). */
int mf__net_socket_error(int fd);
uint16_t mf__net_port(const mf_sockaddr_t *addr);
/* Whether s[0..n) is a port, 1 to 65535 in decimal; sets *port if so. */
bool mf__net_parse_port(const char *s, size_t n, uint16_t *port);
/* The "host[:port]" of a URL's authority, n bytes (host may be "[v6]"):
 * host gets the name, NUL-terminated; *port is set when one is given (1 to
 * 65535) and left alone otherwise (the scheme's default). 0 or MF_EINVAL. */
int mf__net_parse_hostport(const char *s, size_t n,
                           char host[MF_DNS_MAX_HOST + 1], uint16_t *port);
/* A %-decoded, NUL-terminated copy of a URL piece s[0..n) (mf_xmalloc'd,
 * the caller frees it), or NULL for a bad escape, or for an escaped NUL
 * unless nul_ok (the piece goes where C strings go). */
char *mf__net_pct_decode(const char *s, size_t n, bool nul_ok);
/* s[0..n) as 1 to 10 decimal digits of a value up to max. */
bool mf__net_parse_decimal(const char *s, size_t n, uint64_t max, uint64_t *v);

/* dns.c: the loop's resolver, NULL until a lookup needed c-ares (tests). */
const void *mf__dns_resolver_of(const mf_loop_t *loop);

#endif /* MF_NET_H */
