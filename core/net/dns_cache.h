/*
 * dns_cache.h — the resolver's table of host names (internal to dns.c).
 *
 * One table per loop resolver. An entry is either pending (a c-ares lookup
 * is in flight; queries for the same name wait on it, so concurrent queries
 * share one lookup — nginx's resolver node works the same way) or settled
 * (an answer or a failure, kept until it expires). Keys are lowercase host
 * names; the port is applied per query when results are copied out, so
 * host:80 and host:443 share one entry and one lookup.
 *
 * Settled entries are bounded: past `max`, the oldest settled entry goes.
 * Pending entries are not counted; the lookups in flight bound them.
 *
 * Threads: the owning loop's thread only.
 * Ownership: the table owns its entries (mf_xmalloc; freed on remove, on
 * settle with a zero TTL, by clear and by close). The queries linked on an
 * entry's waiters list belong to their callers; the table never touches
 * them.
 */
#ifndef MF_DNS_CACHE_H
#define MF_DNS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moonflow/dns.h"
#include "moonflow/list.h"

typedef struct mf_dns_cache mf_dns_cache_t;

typedef struct mf_dns_entry {
    struct mf_dns_entry *hnext; /* hash chain */
    mf_list_t age;              /* settled entries, oldest first */
    mf_list_t waiters;          /* mf_dns_query_t._link, while pending */
    mf_dns_cache_t *cache;      /* the table holding the entry */
    uint64_t expires;           /* loop time (ms), once settled */
    uint32_t hash;
    bool pending;
    int status; /* 0 or MF_E*, once settled */
    size_t naddrs;
    mf_sockaddr_t addrs[MF_DNS_MAX_ADDRS]; /* IPv4 first, port 0 */
    size_t hostlen;
    char host[]; /* lowercase, NUL-terminated */
} mf_dns_entry_t;

struct mf_dns_cache {
    mf_dns_entry_t **buckets;
    uint32_t mask;
    size_t settled;
    size_t max;
    mf_list_t age; /* mf_dns_entry_t.age */
};

void mf__dns_cache_init(mf_dns_cache_t *cache, size_t max);
/* Frees every entry, pending ones included, and the buckets. */
void mf__dns_cache_close(mf_dns_cache_t *cache);

/* The entry for host (pending, or settled and fresh at `now`), or NULL. An
 * expired entry found on the way is freed. */
mf_dns_entry_t *mf__dns_cache_find(mf_dns_cache_t *cache, const char *host,
                                   size_t len, uint64_t now);
/* Adds a pending entry for a host that has none. */
mf_dns_entry_t *mf__dns_cache_add(mf_dns_cache_t *cache, const char *host,
                                  size_t len);
/* Marks a pending entry settled (the caller filled status and addrs) and
 * keeps it ttl_ms; with ttl_ms 0 the entry is freed at once. */
void mf__dns_cache_settle(mf_dns_cache_t *cache, mf_dns_entry_t *entry,
                          uint64_t now, uint64_t ttl_ms);
void mf__dns_cache_remove(mf_dns_cache_t *cache, mf_dns_entry_t *entry);
/* Frees every settled entry; lookups in flight go on. */
void mf__dns_cache_clear(mf_dns_cache_t *cache);

#endif /* MF_DNS_CACHE_H */
