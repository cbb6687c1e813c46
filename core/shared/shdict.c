/*
 * core/shared/shdict.c — the shared dict (moonflow/shdict.h): stripes, each
 * a lock, a fixed hash table, an LRU list and an arena (arena.c) carved
 * from one malloc made at creation.
 *
 * Why stripes and not one lock: two workers doing get/set on different
 * keys take different locks (keys spread over the stripes by a seeded
 * hash), so they rarely wait for each other; on one hot key they share a
 * lock held for a lookup and a copy. The locks are adaptive mutexes (a
 * short spin before sleeping: the critical sections are shorter than a
 * futex round trip), one cache line per stripe.
 *
 * Why a fixed table: the bucket count is set from the stripe's share (one
 * bucket per 128 bytes, a bit more than the smallest entry takes), so a
 * full stripe has a load factor about 1 and the table never grows.
 *
 * Owns: the dict, its stripes and every entry and list item in their
 * arenas. May call: libc and pthreads.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <moonflow/error.h>
#include <moonflow/list.h>
#include <moonflow/shdict.h>

#include "arena.h"

/* How many entries a safe store looks at, from the LRU end, for expired
 * ones to free: it must not walk a whole stripe under the lock. */
#define MF_SHDICT_SAFE_SCAN 64
/* By default a stripe gets 256 KiB at least: 16 stripes are plenty for a
 * few workers, and the biggest value is about one stripe's share. */
#define MF_SHDICT_AUTO_STRIPE_BYTES (256u << 10)
#define MF_SHDICT_AUTO_MAX_STRIPES 16
#define MF_SHDICT_MAX_STRIPES 256
#define MF_SHDICT_BYTES_PER_BUCKET 128
/* flush_all's mark: a time every clock has passed. */
#define MF_SHDICT_EXPIRED_MARK 1

typedef struct mf_shdict_entry {
    struct mf_shdict_entry *next; /* bucket chain */
    mf_list_t lru;                /* stripe->lru, most recent first */
    uint64_t expires;             /* clock ms; 0: never */
    union {
        double number;
        bool boolean;
        mf_list_t items; /* mf_shdict_item_t, left to right */
    } v;
    uint32_t hash; /* low bits of the key's hash */
    uint32_t vlen; /* string bytes after the key */
    uint32_t flags;
    uint32_t nitems;
    uint16_t klen;
    uint8_t type; /* mf_shdict_type_t */
    char data[];  /* the key, then a string value */
} mf_shdict_entry_t;

typedef struct mf_shdict_item {
    mf_list_t link;
    double number;
    uint32_t len;
    uint8_t type; /* MF_SHDICT_STRING or MF_SHDICT_NUMBER */
    char data[];
} mf_shdict_item_t;

typedef struct mf_shdict_stripe {
    pthread_mutex_t lock;
    mf_shdict_entry_t **buckets;
    size_t mask;
    mf_list_t lru;
    mf_arena_t arena;
    void *mem; /* buckets, then the arena */
} __attribute__((aligned(64))) mf_shdict_stripe_t;

struct mf_shdict {
    size_t capacity;
    unsigned nstripes;
    unsigned stripe_shift; /* 64 - log2(nstripes); 64 for one stripe */
    uint64_t seed;
    uint64_t (*clock)(void *ud);
    void *clock_ud;
    mf_shdict_stripe_t stripes[];
};

/* One lookup's key: its bytes and hash. */
typedef struct mf_shdict_key {
    const char *p;
    size_t len;
    uint64_t hash;
} mf_shdict_key_t;

const char *mf_shdict_strerror(int rc)
{
    switch (rc) {
    case MF_SHDICT_OK:
        return "ok";
#define MF_SHDICT_CASE(name, value, msg) \
    case MF_SHDICT_##name:               \
        return msg;
        MF_SHDICT_ERRORS(MF_SHDICT_CASE)
#undef MF_SHDICT_CASE
    }
    return "unknown shared dict error";
}

void mf_shdict_buf_free(mf_shdict_buf_t *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->cap = 0;
}

/* Room for n bytes in buf (under a stripe lock: realloc only when it has
 * to grow, which a reused buffer seldom does). */
static int mf__buf_reserve(mf_shdict_buf_t *buf, size_t n)
{
    if (n <= buf->cap)
        return 0;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < n)
        cap *= 2;
    char *p = realloc(buf->data, cap);
    if (!p)
        return MF_SHDICT_NO_MEMORY;
    buf->data = p;
    buf->cap = cap;
    return 0;
}

/* ---- keys, time, stripes --------------------------------------------------
 */

static uint64_t mf__hash(uint64_t seed, const char *k, size_t n)
{
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull), w;
    for (; n >= 8; k += 8, n -= 8) {
        memcpy(&w, k, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    /* The last 0-7 bytes in at most two loads, overlapping (a byte-wise
     * copy into w would stall the load of w behind its stores); the length
     * is in the seed already. */
    w = 0;
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, k, 4);
        memcpy(&b, k + n - 4, 4);
        w = (uint64_t)a << 32 | b;
    } else if (n > 0) {
        const unsigned char *u = (const unsigned char *)k;
        w = (uint64_t)u[0] << 16 | (uint64_t)u[n / 2] << 8 | u[n - 1];
    }
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 32);
}

static uint64_t mf__monotonic_ms(void *ud)
{
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t mf__now(const mf_shdict_t *d)
{
    return d->clock(d->clock_ud);
}

/* The time is read at most once per operation, and only when a TTL is
 * involved: the clock costs as much as the rest of a get (a VM's vDSO),
 * and most entries never expire. *now: 0 until read. */
static uint64_t mf__time(const mf_shdict_t *d, uint64_t *now)
{
    if (!*now)
        *now = mf__now(d);
    return *now;
}

static bool mf__expired(const mf_shdict_t *d, const mf_shdict_entry_t *e,
                        uint64_t *now)
{
    return e->expires && e->expires <= mf__time(d, now);
}

static uint64_t mf__deadline(const mf_shdict_t *d, uint64_t *now,
                             uint64_t ttl_ms)
{
    return ttl_ms ? mf__time(d, now) + ttl_ms : 0;
}

static mf_shdict_stripe_t *mf__stripe(mf_shdict_t *d, const mf_shdict_key_t *k)
{
    unsigned i =
        d->stripe_shift < 64 ? (unsigned)(k->hash >> d->stripe_shift) : 0;
    return &d->stripes[i];
}

/* Checks the key and finds its stripe, locked. */
static mf_shdict_stripe_t *mf__lock_key(mf_shdict_t *d, const char *key,
                                        size_t klen, mf_shdict_key_t *k)
{
    if (klen == 0 || klen > MF_SHDICT_MAX_KEY)
        return NULL;
    k->p = key;
    k->len = klen;
    k->hash = mf__hash(d->seed, key, klen);
    mf_shdict_stripe_t *s = mf__stripe(d, k);
    pthread_mutex_lock(&s->lock);
    return s;
}

/* ---- entries ------------------------------------------------------------- */

static mf_shdict_entry_t *mf__find(mf_shdict_stripe_t *s,
                                   const mf_shdict_key_t *k)
{
    mf_shdict_entry_t *e = s->buckets[k->hash & s->mask];
    for (; e; e = e->next)
        if (e->hash == (uint32_t)k->hash && e->klen == k->len &&
            memcmp(e->data, k->p, k->len) == 0)
            return e;
    return NULL;
}

static void mf__touch(mf_shdict_stripe_t *s, mf_shdict_entry_t *e)
{
    mf_list_remove(&e->lru);
    mf_list_push_front(&s->lru, &e->lru);
}

static void mf__free_items(mf_shdict_stripe_t *s, mf_shdict_entry_t *e)
{
    mf_list_t *l;
    while ((l = mf_list_pop_front(&e->v.items)))
        mf_arena_free(&s->arena, mf_container_of(l, mf_shdict_item_t, link));
    e->nitems = 0;
}

static void mf__unlink(mf_shdict_stripe_t *s, mf_shdict_entry_t *e)
{
    mf_shdict_entry_t **link = &s->buckets[e->hash & s->mask];
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    mf_list_remove(&e->lru);
}

static void mf__remove(mf_shdict_stripe_t *s, mf_shdict_entry_t *e)
{
    mf__unlink(s, e);
    if (e->type == MF_SHDICT_LIST)
        mf__free_items(s, e);
    mf_arena_free(&s->arena, e);
}

static void mf__insert(mf_shdict_stripe_t *s, mf_shdict_entry_t *e)
{
    mf_shdict_entry_t **head = &s->buckets[e->hash & s->mask];
    e->next = *head;
    *head = e;
    mf_list_push_front(&s->lru, &e->lru);
}

/* The entry to force out next: the least recently used one; with
 * only_expired, an expired one among the last MF_SHDICT_SAFE_SCAN. */
static mf_shdict_entry_t *mf__victim(const mf_shdict_t *d,
                                     mf_shdict_stripe_t *s, uint64_t *now,
                                     bool only_expired)
{
    int scan = 0;
    for (mf_list_t *l = s->lru.prev; l != &s->lru; l = l->prev) {
        mf_shdict_entry_t *e = mf_container_of(l, mf_shdict_entry_t, lru);
        if (!only_expired || mf__expired(d, e, now))
            return e;
        if (++scan == MF_SHDICT_SAFE_SCAN)
            break;
    }
    return NULL;
}

/* n bytes from the stripe's arena, forcing entries out (least recently
 * used first) until they fit. keep (may be NULL) is never forced out.
 * *forcible is set when a live entry went. NULL: nothing left to evict. */
static void *mf__alloc(mf_shdict_t *d, mf_shdict_stripe_t *s, size_t n,
                       mf_shdict_entry_t *keep, bool evict, bool *forcible)
{
    if (mf_arena_block_size(n) > s->arena.size)
        return NULL;
    void *p = mf_arena_alloc(&s->arena, n);
    if (p)
        return p;
    uint64_t now = 0;
    if (keep)
        mf_list_remove(&keep->lru);
    mf_shdict_entry_t *e;
    while (!p && (e = mf__victim(d, s, &now, !evict))) {
        if (!mf__expired(d, e, &now))
            *forcible = true;
        mf__remove(s, e);
        p = mf_arena_alloc(&s->arena, n);
    }
    if (keep)
        mf_list_push_front(&s->lru, &keep->lru);
    return p;
}

static size_t mf__value_len(const mf_shdict_value_t *v)
{
    return v->type == MF_SHDICT_STRING ? v->len : 0;
}

/* Writes v, ttl and flags into e (its block holds them). */
static void mf__fill(mf_shdict_entry_t *e, const mf_shdict_value_t *v,
                     uint64_t expires, uint32_t flags)
{
    e->type = (uint8_t)v->type;
    e->expires = expires;
    e->flags = flags;
    e->vlen = (uint32_t)mf__value_len(v);
    if (v->type == MF_SHDICT_NUMBER)
        e->v.number = v->number;
    else if (v->type == MF_SHDICT_BOOLEAN)
        e->v.boolean = v->boolean;
    else if (v->type == MF_SHDICT_STRING)
        memcpy(e->data + e->klen, v->str, v->len);
}

/* A new entry for k holding v, linked in; NULL when it does not fit. */
static mf_shdict_entry_t *
mf__create(mf_shdict_t *d, mf_shdict_stripe_t *s, const mf_shdict_key_t *k,
           const mf_shdict_value_t *v, uint64_t expires, uint32_t flags,
           mf_shdict_entry_t *keep, bool evict, bool *forcible)
{
    mf_shdict_entry_t *e = mf__alloc(
        d, s, sizeof(*e) + k->len + mf__value_len(v), keep, evict, forcible);
    if (!e)
        return NULL;
    e->hash = (uint32_t)k->hash;
    e->klen = (uint16_t)k->len;
    e->nitems = 0;
    memcpy(e->data, k->p, k->len);
    mf__fill(e, v, expires, flags);
    if (v->type == MF_SHDICT_LIST)
        mf_list_init(&e->v.items);
    mf__insert(s, e);
    return e;
}

/* ---- creation ------------------------------------------------------------ */

static unsigned mf__auto_stripes(size_t capacity)
{
    unsigned n = 1;
    while (n < MF_SHDICT_AUTO_MAX_STRIPES &&
           capacity / (n * 2) >= MF_SHDICT_AUTO_STRIPE_BYTES)
        n *= 2;
    return n;
}

static int mf__stripe_init(mf_shdict_stripe_t *s, size_t share)
{
    size_t nb = 16;
    while (nb * 2 <= share / MF_SHDICT_BYTES_PER_BUCKET)
        nb *= 2;
    size_t table = nb * sizeof(mf_shdict_entry_t *);
    /* calloc, not malloc and memset: a big stripe comes from mmap, zeroed
     * already, and its pages are touched only once entries use them. */
    s->mem = calloc(1, share);
    if (!s->mem)
        return MF_ENOMEM;
    s->buckets = s->mem;
    s->mask = nb - 1;
    mf_list_init(&s->lru);
    mf_arena_init(&s->arena, (char *)s->mem + table, share - table);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    return 0;
}

static uint64_t mf__seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = mf__monotonic_ms(NULL) * 0x9e3779b97f4a7c15ull;
    return seed;
}

mf_shdict_t *mf_shdict_create(const mf_shdict_opts_t *opts, int *err)
{
    unsigned n =
        opts->stripes ? opts->stripes : mf__auto_stripes(opts->capacity);
    if (opts->capacity < MF_SHDICT_MIN_CAPACITY ||
        opts->capacity > MF_SHDICT_MAX_CAPACITY || n > MF_SHDICT_MAX_STRIPES ||
        (n & (n - 1)) || opts->capacity / n < 1024) {
        *err = MF_EINVAL;
        return NULL;
    }
    void *mem = NULL;
    size_t size = sizeof(mf_shdict_t) + n * sizeof(mf_shdict_stripe_t);
    if (posix_memalign(&mem, 64, size) != 0) {
        *err = MF_ENOMEM;
        return NULL;
    }
    mf_shdict_t *d = memset(mem, 0, size);
    d->capacity = opts->capacity;
    d->clock = opts->clock ? opts->clock : mf__monotonic_ms;
    d->clock_ud = opts->clock_ud;
    d->seed = mf__seed();
    d->stripe_shift = 64 - (unsigned)__builtin_ctz(n);
    for (; d->nstripes < n; d->nstripes++)
        if (mf__stripe_init(&d->stripes[d->nstripes], opts->capacity / n) < 0) {
            mf_shdict_destroy(d);
            *err = MF_ENOMEM;
            return NULL;
        }
    return d;
}

void mf_shdict_destroy(mf_shdict_t *d)
{
    if (!d)
        return;
    for (unsigned i = 0; i < d->nstripes; i++) {
        pthread_mutex_destroy(&d->stripes[i].lock);
        free(d->stripes[i].mem);
    }
    free(d);
}

size_t mf_shdict_capacity(const mf_shdict_t *d)
{
    return d->capacity;
}

unsigned mf_shdict_stripes(const mf_shdict_t *d)
{
    return d->nstripes;
}

size_t mf_shdict_free_space(mf_shdict_t *d)
{
    size_t sum = 0;
    for (unsigned i = 0; i < d->nstripes; i++) {
        mf_shdict_stripe_t *s = &d->stripes[i];
        pthread_mutex_lock(&s->lock);
        sum += s->arena.free_bytes;
        pthread_mutex_unlock(&s->lock);
    }
    return sum;
}

/* ---- reads --------------------------------------------------------------- */

/* Copies e's value out (a string into buf). */
static int mf__copy_value(const mf_shdict_entry_t *e, mf_shdict_value_t *out,
                          mf_shdict_buf_t *buf)
{
    memset(out, 0, sizeof(*out));
    out->type = (mf_shdict_type_t)e->type;
    if (e->type == MF_SHDICT_NUMBER)
        out->number = e->v.number;
    else if (e->type == MF_SHDICT_BOOLEAN)
        out->boolean = e->v.boolean;
    else if (e->type == MF_SHDICT_STRING) {
        if (mf__buf_reserve(buf, e->vlen ? e->vlen : 1) < 0)
            return MF_SHDICT_NO_MEMORY;
        memcpy(buf->data, e->data + e->klen, e->vlen);
        out->str = buf->data;
        out->len = e->vlen;
    }
    return 0;
}

int mf_shdict_get(mf_shdict_t *d, const char *key, size_t klen, bool stale_ok,
                  mf_shdict_value_t *out, uint32_t *flags, bool *stale,
                  mf_shdict_buf_t *buf)
{
    mf_shdict_key_t k;
    mf_shdict_stripe_t *s = mf__lock_key(d, key, klen, &k);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = MF_SHDICT_NOT_FOUND;
    mf_shdict_entry_t *e = mf__find(s, &k);
    uint64_t now = 0;
    bool expired = e && mf__expired(d, e, &now);
    if (e && (!expired || stale_ok)) {
        rc = e->type == MF_SHDICT_LIST ? MF_SHDICT_IS_A_LIST
                                       : mf__copy_value(e, out, buf);
        *flags = e->flags;
        if (stale)
            *stale = expired;
        if (!expired)
            mf__touch(s, e);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- stores -------------------------------------------------------------- */

/* Puts v in e's own block when it fits there (no allocation: a set of an
 * existing key of about the same size never allocates). */
static bool mf__store_in_place(mf_shdict_stripe_t *s, mf_shdict_entry_t *e,
                               const mf_shdict_value_t *v, uint64_t expires,
                               uint32_t flags)
{
    size_t need = sizeof(*e) + e->klen + mf__value_len(v);
    if (e->type == MF_SHDICT_LIST || need > mf_arena_usable(e))
        return false;
    mf__fill(e, v, expires, flags);
    mf_arena_shrink(&s->arena, e, need);
    mf__touch(s, e);
    return true;
}

/* v goes into a new entry that replaces old (NULL: none). A stripe too
 * full even with everything else forced out takes old too, unless the
 * store may not evict. */
static int mf__store_new(mf_shdict_t *d, mf_shdict_stripe_t *s,
                         const mf_shdict_key_t *k, mf_shdict_entry_t *old,
                         const mf_shdict_value_t *v, uint64_t expires,
                         uint32_t flags, bool evict, bool *forcible)
{
    mf_shdict_entry_t *e =
        mf__create(d, s, k, v, expires, flags, old, evict, forcible);
    if (!e && old && evict) {
        uint64_t now = 0;
        if (!mf__expired(d, old, &now))
            *forcible = true;
        mf__remove(s, old);
        old = NULL;
        e = mf__create(d, s, k, v, expires, flags, NULL, evict, forcible);
    }
    if (!e)
        return MF_SHDICT_NO_MEMORY;
    if (old)
        mf__remove(s, old);
    return 0;
}

static int mf__store_locked(mf_shdict_t *d, mf_shdict_stripe_t *s,
                            const mf_shdict_key_t *k,
                            const mf_shdict_value_t *v, uint64_t ttl_ms,
                            uint32_t flags, unsigned mode, bool *forcible)
{
    uint64_t now = 0;
    mf_shdict_entry_t *e = mf__find(s, k);
    bool live = e && !mf__expired(d, e, &now);
    if ((mode & MF_SHDICT_STORE_ADD) && live)
        return MF_SHDICT_EXISTS;
    if ((mode & MF_SHDICT_STORE_REPLACE) && !live)
        return MF_SHDICT_NOT_FOUND;
    if (v->type == MF_SHDICT_NIL) {
        if (e)
            mf__remove(s, e);
        return 0;
    }
    uint64_t expires = mf__deadline(d, &now, ttl_ms);
    if (e && mf__store_in_place(s, e, v, expires, flags))
        return 0;
    return mf__store_new(d, s, k, e, v, expires, flags,
                         !(mode & MF_SHDICT_STORE_NO_EVICT), forcible);
}

int mf_shdict_store(mf_shdict_t *d, const char *key, size_t klen,
                    const mf_shdict_value_t *v, uint64_t ttl_ms, uint32_t flags,
                    unsigned mode, bool *forcible)
{
    *forcible = false;
    if (v->type >= MF_SHDICT_LIST ||
        (v->type == MF_SHDICT_STRING && v->len > UINT32_MAX))
        return MF_SHDICT_BAD_VALUE;
    mf_shdict_key_t k;
    mf_shdict_stripe_t *s = mf__lock_key(d, key, klen, &k);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = mf__store_locked(d, s, &k, v, ttl_ms, flags, mode, forcible);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int mf__incr_locked(mf_shdict_t *d, mf_shdict_stripe_t *s,
                           const mf_shdict_key_t *k, double by,
                           const double *init, uint64_t init_ttl_ms,
                           double *out, bool *forcible)
{
    uint64_t now = 0;
    mf_shdict_entry_t *e = mf__find(s, k);
    if (e && !mf__expired(d, e, &now)) {
        if (e->type != MF_SHDICT_NUMBER)
            return MF_SHDICT_NOT_A_NUMBER;
        *out = e->v.number += by;
        mf__touch(s, e);
        return 0;
    }
    if (!init)
        return MF_SHDICT_NOT_FOUND;
    mf_shdict_value_t v = {.type = MF_SHDICT_NUMBER, .number = *init + by};
    uint64_t expires = mf__deadline(d, &now, init_ttl_ms);
    *out = v.number;
    if (e && mf__store_in_place(s, e, &v, expires, 0))
        return 0;
    return mf__store_new(d, s, k, e, &v, expires, 0, true, forcible);
}

int mf_shdict_incr(mf_shdict_t *d, const char *key, size_t klen, double by,
                   const double *init, uint64_t init_ttl_ms, double *out,
                   bool *forcible)
{
    *forcible = false;
    mf_shdict_key_t k;
    mf_shdict_stripe_t *s = mf__lock_key(d, key, klen, &k);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = mf__incr_locked(d, s, &k, by, init, init_ttl_ms, out, forcible);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- leaky buckets ------------------------------------------------------ */

/* A bucket's state, stored as a 16-byte string value. */
typedef struct mf_shdict_bucket {
    double excess;  /* requests still in the bucket after the last one */
    double last_ms; /* when the last accepted request came */
} mf_shdict_bucket_t;

/* The bucket of e (a fresh one when e is NULL); false when e holds
 * something else. */
static bool mf__bucket_read(const mf_shdict_entry_t *e, mf_shdict_bucket_t *b,
                            double now_ms)
{
    b->excess = 0;
    b->last_ms = now_ms;
    if (!e)
        return true;
    if (e->type != MF_SHDICT_STRING || e->vlen != sizeof(*b))
        return false;
    memcpy(b, e->data + e->klen, sizeof(*b));
    return true;
}

/* The excess once a new request is in: what is left of b's after leaking
 * at rate since its last request, plus this one (a clock that went back
 * leaks nothing). A request on schedule finds 0, as in nginx. */
static double mf__bucket_next(const mf_shdict_bucket_t *b, double rate,
                              double now_ms)
{
    double elapsed = now_ms > b->last_ms ? now_ms - b->last_ms : 0;
    double left = b->excess - rate * elapsed / 1000 + 1;
    return left > 0 ? left : 0;
}

static int mf__bucket_write(mf_shdict_t *d, mf_shdict_stripe_t *s,
                            const mf_shdict_key_t *k, mf_shdict_entry_t *e,
                            const mf_shdict_bucket_t *b, uint64_t ttl_ms)
{
    mf_shdict_value_t v = {
        .type = MF_SHDICT_STRING, .str = (const char *)b, .len = sizeof(*b)};
    uint64_t now = 0;
    uint64_t expires = mf__deadline(d, &now, ttl_ms);
    bool forcible = false;
    if (e && mf__store_in_place(s, e, &v, expires, 0))
        return 0;
    return mf__store_new(d, s, k, e, &v, expires, 0, true, &forcible);
}

static int mf__leaky_locked(mf_shdict_t *d, mf_shdict_stripe_t *s,
                            const mf_shdict_key_t *k,
                            const mf_shdict_leaky_t *in, double *excess)
{
    uint64_t clock = 0;
    bool own_clock = in->now_ms < 0;
    double now_ms = own_clock ? (double)mf__time(d, &clock) : in->now_ms;
    mf_shdict_entry_t *e = mf__find(s, k);
    if (e && mf__expired(d, e, &clock)) {
        mf__remove(s, e);
        e = NULL;
    }
    mf_shdict_bucket_t b;
    if (!mf__bucket_read(e, &b, now_ms))
        return MF_SHDICT_BAD_VALUE;
    if (in->mode == MF_SHDICT_LEAKY_UNCOMMIT) {
        b.excess = b.excess > 1 ? b.excess - 1 : 0;
        *excess = b.excess;
    } else {
        /* A fresh bucket takes its first request at no cost (nginx's). */
        double left = e ? mf__bucket_next(&b, in->rate, now_ms) : 0;
        if (left > in->burst)
            return MF_SHDICT_REJECTED;
        *excess = left;
        if (in->mode == MF_SHDICT_LEAKY_CHECK)
            return 0;
        b.excess = left;
        b.last_ms = now_ms;
    }
    if (!e && in->mode == MF_SHDICT_LEAKY_UNCOMMIT)
        return 0;
    /* On the dict's clock the entry goes once a request would find it
     * empty: then it answers as a fresh one, so dropping it is safe. */
    uint64_t ttl =
        own_clock ? (uint64_t)ceil((b.excess + 1) * 1000 / in->rate) : 0;
    return mf__bucket_write(d, s, k, e, &b, ttl);
}

int mf_shdict_leaky(mf_shdict_t *d, const char *key, size_t klen,
                    const mf_shdict_leaky_t *in, double *excess)
{
    *excess = 0;
    if (!(in->rate > 0) || !(in->burst >= 0))
        return MF_SHDICT_BAD_VALUE;
    mf_shdict_key_t k;
    mf_shdict_stripe_t *s = mf__lock_key(d, key, klen, &k);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = mf__leaky_locked(d, s, &k, in, excess);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- time to live -------------------------------------------------------- */

/* The live entry of key in its locked stripe (*sp), or NULL. */
static mf_shdict_entry_t *mf__lock_live(mf_shdict_t *d, const char *key,
                                        size_t klen, mf_shdict_stripe_t **sp,
                                        uint64_t *now)
{
    mf_shdict_key_t k;
    *sp = mf__lock_key(d, key, klen, &k);
    if (!*sp)
        return NULL;
    *now = 0;
    mf_shdict_entry_t *e = mf__find(*sp, &k);
    return e && !mf__expired(d, e, now) ? e : NULL;
}

int mf_shdict_ttl(mf_shdict_t *d, const char *key, size_t klen,
                  uint64_t *ttl_ms)
{
    mf_shdict_stripe_t *s;
    uint64_t now;
    mf_shdict_entry_t *e = mf__lock_live(d, key, klen, &s, &now);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    if (e)
        *ttl_ms = e->expires ? e->expires - mf__time(d, &now) : 0;
    pthread_mutex_unlock(&s->lock);
    return e ? 0 : MF_SHDICT_NOT_FOUND;
}

int mf_shdict_expire(mf_shdict_t *d, const char *key, size_t klen,
                     uint64_t ttl_ms)
{
    mf_shdict_stripe_t *s;
    uint64_t now;
    mf_shdict_entry_t *e = mf__lock_live(d, key, klen, &s, &now);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    if (e)
        e->expires = mf__deadline(d, &now, ttl_ms);
    pthread_mutex_unlock(&s->lock);
    return e ? 0 : MF_SHDICT_NOT_FOUND;
}

/* ---- the whole dict, stripe by stripe ------------------------------------ */

void mf_shdict_flush_all(mf_shdict_t *d)
{
    for (unsigned i = 0; i < d->nstripes; i++) {
        mf_shdict_stripe_t *s = &d->stripes[i];
        mf_list_t *l;
        pthread_mutex_lock(&s->lock);
        mf_list_foreach(l, &s->lru)
        {
            mf_container_of(l, mf_shdict_entry_t, lru)->expires =
                MF_SHDICT_EXPIRED_MARK;
        }
        pthread_mutex_unlock(&s->lock);
    }
}

/* Frees the expired entries of s, up to max (0: all); how many. */
static size_t mf__flush_stripe(mf_shdict_t *d, mf_shdict_stripe_t *s,
                               size_t max)
{
    size_t n = 0;
    uint64_t now = 0;
    mf_list_t *l = s->lru.prev;
    while (l != &s->lru && (!max || n < max)) {
        mf_shdict_entry_t *e = mf_container_of(l, mf_shdict_entry_t, lru);
        l = l->prev;
        if (mf__expired(d, e, &now)) {
            mf__remove(s, e);
            n++;
        }
    }
    return n;
}

size_t mf_shdict_flush_expired(mf_shdict_t *d, size_t max)
{
    size_t n = 0;
    for (unsigned i = 0; i < d->nstripes && (!max || n < max); i++) {
        mf_shdict_stripe_t *s = &d->stripes[i];
        pthread_mutex_lock(&s->lock);
        n += mf__flush_stripe(d, s, max ? max - n : 0);
        pthread_mutex_unlock(&s->lock);
    }
    return n;
}

/* Appends the live keys of s to buf at *off, up to max in all. */
static int mf__keys_stripe(mf_shdict_t *d, mf_shdict_stripe_t *s, size_t max,
                           mf_shdict_buf_t *buf, size_t *off, size_t *n)
{
    uint64_t now = 0;
    mf_list_t *l;
    mf_list_foreach(l, &s->lru)
    {
        mf_shdict_entry_t *e = mf_container_of(l, mf_shdict_entry_t, lru);
        if (max && *n >= max)
            break;
        if (mf__expired(d, e, &now))
            continue;
        if (mf__buf_reserve(buf, *off + 2 + e->klen) < 0)
            return MF_SHDICT_NO_MEMORY;
        uint16_t len = e->klen;
        memcpy(buf->data + *off, &len, 2);
        memcpy(buf->data + *off + 2, e->data, e->klen);
        *off += 2 + (size_t)e->klen;
        (*n)++;
    }
    return 0;
}

int mf_shdict_keys(mf_shdict_t *d, size_t max, mf_shdict_buf_t *buf, size_t *n)
{
    size_t off = 0;
    int rc = 0;
    *n = 0;
    for (unsigned i = 0; rc == 0 && i < d->nstripes && (!max || *n < max);
         i++) {
        mf_shdict_stripe_t *s = &d->stripes[i];
        pthread_mutex_lock(&s->lock);
        rc = mf__keys_stripe(d, s, max, buf, &off, n);
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

/* ---- lists --------------------------------------------------------------- */

/* The list entry of k: found, or made empty (a missing or expired key). */
static int mf__list_for_push(mf_shdict_t *d, mf_shdict_stripe_t *s,
                             const mf_shdict_key_t *k, mf_shdict_entry_t **out,
                             bool *made)
{
    mf_shdict_entry_t *e = mf__find(s, k);
    *made = false;
    uint64_t now = 0;
    if (e && mf__expired(d, e, &now)) {
        mf__remove(s, e);
        e = NULL;
    }
    if (e) {
        *out = e;
        return e->type == MF_SHDICT_LIST ? 0 : MF_SHDICT_NOT_A_LIST;
    }
    static const mf_shdict_value_t list = {.type = MF_SHDICT_LIST};
    bool forcible = false;
    *out = mf__create(d, s, k, &list, 0, 0, NULL, true, &forcible);
    *made = true;
    return *out ? 0 : MF_SHDICT_NO_MEMORY;
}

static int mf__push_locked(mf_shdict_t *d, mf_shdict_stripe_t *s,
                           const mf_shdict_key_t *k, bool left,
                           const mf_shdict_value_t *v, size_t *len)
{
    mf_shdict_entry_t *e;
    bool made, forcible = false;
    int rc = mf__list_for_push(d, s, k, &e, &made);
    if (rc < 0)
        return rc;
    size_t vlen = mf__value_len(v);
    mf_shdict_item_t *it =
        mf__alloc(d, s, sizeof(*it) + vlen, e, true, &forcible);
    if (!it) {
        if (made)
            mf__remove(s, e);
        return MF_SHDICT_NO_MEMORY;
    }
    it->type = (uint8_t)v->type;
    it->number = v->number;
    it->len = (uint32_t)vlen;
    if (vlen)
        memcpy(it->data, v->str, vlen);
    if (left)
        mf_list_push_front(&e->v.items, &it->link);
    else
        mf_list_push_back(&e->v.items, &it->link);
    *len = ++e->nitems;
    mf__touch(s, e);
    return 0;
}

int mf_shdict_push(mf_shdict_t *d, const char *key, size_t klen, bool left,
                   const mf_shdict_value_t *v, size_t *len)
{
    if (v->type != MF_SHDICT_STRING && v->type != MF_SHDICT_NUMBER)
        return MF_SHDICT_BAD_VALUE;
    if (v->type == MF_SHDICT_STRING && v->len > UINT32_MAX)
        return MF_SHDICT_BAD_VALUE;
    mf_shdict_key_t k;
    mf_shdict_stripe_t *s = mf__lock_key(d, key, klen, &k);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = mf__push_locked(d, s, &k, left, v, len);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int mf__pop_locked(mf_shdict_stripe_t *s, mf_shdict_entry_t *e,
                          bool left, mf_shdict_value_t *out,
                          mf_shdict_buf_t *buf)
{
    if (e->type != MF_SHDICT_LIST)
        return MF_SHDICT_NOT_A_LIST;
    mf_list_t *l = left ? e->v.items.next : e->v.items.prev;
    mf_shdict_item_t *it = mf_container_of(l, mf_shdict_item_t, link);
    memset(out, 0, sizeof(*out));
    out->type = (mf_shdict_type_t)it->type;
    out->number = it->number;
    if (it->type == MF_SHDICT_STRING) {
        if (mf__buf_reserve(buf, it->len ? it->len : 1) < 0)
            return MF_SHDICT_NO_MEMORY;
        memcpy(buf->data, it->data, it->len);
        out->str = buf->data;
        out->len = it->len;
    }
    mf_list_remove(l);
    mf_arena_free(&s->arena, it);
    if (--e->nitems == 0)
        mf__remove(s, e);
    else
        mf__touch(s, e);
    return 0;
}

int mf_shdict_pop(mf_shdict_t *d, const char *key, size_t klen, bool left,
                  mf_shdict_value_t *out, mf_shdict_buf_t *buf)
{
    mf_shdict_stripe_t *s;
    uint64_t now;
    mf_shdict_entry_t *e = mf__lock_live(d, key, klen, &s, &now);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = e ? mf__pop_locked(s, e, left, out, buf) : MF_SHDICT_NOT_FOUND;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int mf_shdict_llen(mf_shdict_t *d, const char *key, size_t klen, size_t *len)
{
    mf_shdict_stripe_t *s;
    uint64_t now;
    mf_shdict_entry_t *e = mf__lock_live(d, key, klen, &s, &now);
    if (!s)
        return MF_SHDICT_BAD_KEY;
    int rc = e && e->type != MF_SHDICT_LIST ? MF_SHDICT_NOT_A_LIST : 0;
    *len = e && rc == 0 ? e->nitems : 0;
    pthread_mutex_unlock(&s->lock);
    return rc;
}
