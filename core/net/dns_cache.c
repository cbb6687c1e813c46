/*
 * dns_cache.c — the resolver's table of host names: a chained hash table of
 * pending lookups and settled answers, with settled entries also on an age
 * list so the oldest goes first when the table is full.
 *
 * Owns: the bucket array and every entry. Does not own: the queries waiting
 * on pending entries (dns.c moves them out before an entry is settled).
 */
#include <string.h>

#include "dns_cache.h"

/* FNV-1a: short keys, no adversary that can pick bucket collisions cheaply
 * enough to matter for a per-loop table bounded at a few thousand names. */
static uint32_t mf__dns_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

void mf__dns_cache_init(mf_dns_cache_t *cache, size_t max)
{
    size_t nbuckets = 64;
    while (nbuckets < max)
        nbuckets <<= 1;
    cache->buckets = mf_xcalloc(nbuckets, sizeof(*cache->buckets));
    cache->mask = (uint32_t)(nbuckets - 1);
    cache->settled = 0;
    cache->max = max;
    mf_list_init(&cache->age);
}

void mf__dns_cache_close(mf_dns_cache_t *cache)
{
    for (size_t i = 0; i <= cache->mask; i++) {
        mf_dns_entry_t *entry = cache->buckets[i];
        while (entry) {
            mf_dns_entry_t *next = entry->hnext;
            mf_free(entry);
            entry = next;
        }
    }
    mf_free(cache->buckets);
    cache->buckets = NULL;
    cache->settled = 0;
    mf_list_init(&cache->age);
}

mf_dns_entry_t *mf__dns_cache_find(mf_dns_cache_t *cache, const char *host,
                                   size_t len, uint64_t now)
{
    uint32_t hash = mf__dns_hash(host, len);
    mf_dns_entry_t *entry = cache->buckets[hash & cache->mask];
    while (entry && !(entry->hash == hash && entry->hostlen == len &&
                      memcmp(entry->host, host, len) == 0))
        entry = entry->hnext;
    if (entry && !entry->pending && entry->expires <= now) {
        mf__dns_cache_remove(cache, entry);
        return NULL;
    }
    return entry;
}

mf_dns_entry_t *mf__dns_cache_add(mf_dns_cache_t *cache, const char *host,
                                  size_t len)
{
    mf_dns_entry_t *entry = mf_xmalloc(sizeof(*entry) + len + 1);
    memset(entry, 0, sizeof(*entry));
    mf_list_init(&entry->age);
    mf_list_init(&entry->waiters);
    entry->cache = cache;
    entry->hash = mf__dns_hash(host, len);
    entry->pending = true;
    entry->hostlen = len;
    memcpy(entry->host, host, len);
    entry->host[len] = '\0';
    mf_dns_entry_t **head = &cache->buckets[entry->hash & cache->mask];
    entry->hnext = *head;
    *head = entry;
    return entry;
}

void mf__dns_cache_settle(mf_dns_cache_t *cache, mf_dns_entry_t *entry,
                          uint64_t now, uint64_t ttl_ms)
{
    entry->pending = false;
    if (ttl_ms == 0) {
        mf__dns_cache_remove(cache, entry);
        return;
    }
    entry->expires = now + ttl_ms;
    mf_list_push_back(&cache->age, &entry->age);
    cache->settled++;
    while (cache->settled > cache->max) {
        mf_list_t *oldest = cache->age.next;
        mf__dns_cache_remove(cache,
                             mf_container_of(oldest, mf_dns_entry_t, age));
    }
}

void mf__dns_cache_remove(mf_dns_cache_t *cache, mf_dns_entry_t *entry)
{
    mf_dns_entry_t **link = &cache->buckets[entry->hash & cache->mask];
    while (*link != entry)
        link = &(*link)->hnext;
    *link = entry->hnext;
    if (mf_list_linked(&entry->age)) {
        mf_list_remove(&entry->age);
        cache->settled--;
    }
    mf_free(entry);
}

void mf__dns_cache_clear(mf_dns_cache_t *cache)
{
    while (!mf_list_empty(&cache->age)) {
        mf_list_t *oldest = cache->age.next;
        mf__dns_cache_remove(cache,
                             mf_container_of(oldest, mf_dns_entry_t, age));
    }
}
