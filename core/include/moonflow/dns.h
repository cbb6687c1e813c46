/*
 * moonflow/dns.h — asynchronous name resolution on the loop, with c-ares.
 *
 * One resolver per loop (created on first use, kept in the loop's
 * local storage, destroyed with the loop). c-ares sockets are watched
 * with mf_io_t and its timeouts with an mf_timer_t: no blocking getaddrinfo
 * on a loop thread, ever. /etc/hosts is honoured (c-ares lookups "fb").
 * Answers are cached per loop by host name (case-insensitive; each query
 * gets its own port) for their TTL, capped by config; "does not resolve" is
 * cached briefly (negative TTL). Concurrent queries for one name share one
 * lookup. Numeric addresses ("127.0.0.1", "::1", "[::1]") resolve without
 * a query.
 *
 * Two levels:
 * - mf_dns_query_t: an embeddable request with a C callback, for task kinds
 *   that resolve as one step of their work (the HTTP client).
 * - the dns task (mf_task_dns_create): the same as a task for flows.
 *
 * Threads: loop thread only. Ownership: the caller embeds and owns
 * mf_dns_query_t and keeps it alive until its callback has run. The host
 * string is copied at start. Destroying the loop drops queries still in
 * flight without calling them back (as it drops tasks in flight).
 */
#ifndef MOONFLOW_DNS_H
#define MOONFLOW_DNS_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "task.h"

MF_EXTERN_C_BEGIN

#define MF_DNS_MAX_ADDRS 4
#define MF_DNS_MAX_HOST 255

typedef union mf_sockaddr {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
} mf_sockaddr_t;

typedef struct mf_dns_query mf_dns_query_t;
/* status: 0, or MF_EDNS (name does not resolve), MF_ETIMEDOUT,
 * MF_ECANCELED, MF_EINVAL (bad host string), MF_ENOMEM. Runs on the loop,
 * never inside mf_dns_query_start. */
typedef void (*mf_dns_cb)(mf_dns_query_t *query, int status);

struct mf_dns_query {
    mf_dns_cb cb;
    void *data;
    size_t naddrs;                         /* results, IPv4 first */
    mf_sockaddr_t addrs[MF_DNS_MAX_ADDRS]; /* port already set */
    /* private */
    mf_loop_t *_loop;
    mf_list_t _link;
    void *_pending;
    mf_post_t _post;
    int _status;
    uint16_t _port;
    char _host[MF_DNS_MAX_HOST + 1];
};

/* Without mf_dns_configure a loop uses the defaults below. In a config
 * passed to it, 0 means the default for timeout_ms and tries only. */
typedef struct mf_dns_config {
    uint32_t timeout_ms;      /* per try; default 2000 */
    unsigned tries;           /* default 2 */
    uint32_t max_ttl_ms;      /* cache cap; default 60000; 0 disables cache */
    uint32_t negative_ttl_ms; /* failures; default 1000; capped by max_ttl */
    const char *servers;      /* "127.0.0.1:5353,[::1]:53"; NULL: resolv.conf */
} mf_dns_config_t;

/* Sets the loop's resolver configuration (before its first query; a later
 * call recreates the resolver, failing queries in flight with
 * MF_ECANCELED). Returns 0 or a negative MF_E* code. */
MF_API int mf_dns_configure(mf_loop_t *loop, const mf_dns_config_t *config);

MF_API void mf_dns_query_start(mf_loop_t *loop, mf_dns_query_t *query,
                               const char *host, uint16_t port, mf_dns_cb cb,
                               void *data);
/* For a started query whose callback has not run: the callback still runs
 * once, with MF_ECANCELED, later (never inside this call). After it returns
 * the resolver no longer reads or writes the query; only the loop's posted
 * callback does. No effect once the callback has run. */
MF_API void mf_dns_query_cancel(mf_dns_query_t *query);

MF_API void mf_dns_cache_clear(mf_loop_t *loop);

/* A task resolving host:port. Failure: MF_STATE_DNS_ERROR with the status
 * above as error (timeouts: MF_STATE_TIMEOUT; canceled: MF_STATE_CANCELED). */
MF_API mf_task_t *mf_task_dns_create(mf_loop_t *loop, const char *host,
                                     uint16_t port, mf_task_cb cb, void *user);
/* Results, valid in the task's callback. */
MF_API size_t mf_task_dns_count(const mf_task_t *task);
MF_API const mf_sockaddr_t *mf_task_dns_addr(const mf_task_t *task,
                                             size_t index);

/* Formats an address as "1.2.3.4:80" / "[::1]:80" into buf; returns buf. */
MF_API char *mf_sockaddr_format(const mf_sockaddr_t *addr, char *buf,
                                size_t size);
/* Parses a listen address as the HTTP server reads config->listen:
 * "host:port", "[v6]:port", ":port" or "*:port" (any address), with a
 * numeric host or "localhost" (names are not resolved). 0 or MF_EINVAL: a
 * program checks its flags with it before starting servers. */
MF_API int mf_sockaddr_parse_listen(const char *text, mf_sockaddr_t *addr);
/* The address alone, "1.2.3.4" / "::1" (logs, X-Forwarded-For). */
MF_API char *mf_sockaddr_format_ip(const mf_sockaddr_t *addr, char *buf,
                                   size_t size);

MF_EXTERN_C_END

#endif /* MOONFLOW_DNS_H */
