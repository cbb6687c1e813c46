/*
 * moonflow/shdict.h — a dictionary shared by every thread of the process,
 * with OpenResty's ngx.shared.DICT semantics: string, number and boolean
 * values with a 32-bit user flags word and an optional time to live,
 * atomic increments, lists, and LRU eviction when full.
 *
 * Memory: the capacity is fixed at creation and split evenly into stripes;
 * each stripe is one block from malloc holding its hash buckets and an
 * arena its entries are carved from, so no operation calls malloc (only a
 * caller's mf_shdict_buf_t may grow, see below) and a full dict evicts
 * instead of growing. An entry costs its key, its value and about 90 bytes
 * (entry header and block tags, rounded to 16); a list item about 60 bytes
 * and its value.
 *
 * Threads: keys hash to a stripe; each stripe has its own lock, table, LRU
 * list and share of the capacity: eviction is per stripe (a full stripe
 * forces out its own least recently used entries even when another stripe
 * has room), and the biggest entry that fits is the stripe's share less
 * its hash table (1/16 of it): 240 KiB in a dict of 1 MiB or more (by
 * default stripes get 256 KiB each, up to 16 of them).
 * A lock is held for one operation on one entry (a hash lookup and a copy:
 * microseconds), never across a callback; mf_shdict_flush_all,
 * flush_expired and keys take the stripes one after the other, so they see
 * no single instant of the whole dict. Every function may be called from
 * any thread; destroy only when no other thread uses the dict.
 *
 * Time: TTLs are in milliseconds of a monotonic clock (CLOCK_MONOTONIC, or
 * opts.clock for tests). An expired entry is invisible to every read but
 * stays until it is touched, flushed or its memory is needed (it is
 * evicted before any live entry of its stripe).
 *
 * Ownership: keys and values passed in are copied; strings handed out are
 * copied into the caller's mf_shdict_buf_t, valid until the next call with
 * that buffer.
 */
#ifndef MOONFLOW_SHDICT_H
#define MOONFLOW_SHDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

MF_EXTERN_C_BEGIN

typedef struct mf_shdict mf_shdict_t;

/* The smallest and largest capacities mf_shdict_create accepts, and the
 * longest key (OpenResty's). */
#define MF_SHDICT_MIN_CAPACITY 8192
#define MF_SHDICT_MAX_CAPACITY ((size_t)1 << 36)
#define MF_SHDICT_MAX_KEY 65535

/* The dict's answers, OpenResty's words (mf_shdict_strerror). */
#define MF_SHDICT_ERRORS(XX)                                        \
    XX(NOT_FOUND, -1, "not found")                                  \
    XX(EXISTS, -2, "exists")                                        \
    XX(NO_MEMORY, -3, "no memory")                                  \
    XX(NOT_A_NUMBER, -4, "not a number")                            \
    XX(NOT_A_LIST, -5, "value not a list")                          \
    XX(IS_A_LIST, -6, "value is a list")                            \
    XX(BAD_KEY, -7, "bad key (empty or over 65535 bytes)")          \
    XX(BAD_VALUE, -8, "bad value (lists hold strings and numbers)") \
    XX(REJECTED, -9, "rejected")

typedef enum mf_shdict_error {
    MF_SHDICT_OK = 0,
#define MF_SHDICT_ENUM(name, value, msg) MF_SHDICT_##name = value,
    MF_SHDICT_ERRORS(MF_SHDICT_ENUM)
#undef MF_SHDICT_ENUM
} mf_shdict_error_t;

MF_API const char *mf_shdict_strerror(int rc);

typedef enum mf_shdict_type {
    MF_SHDICT_NIL = 0, /* in a store: delete the key */
    MF_SHDICT_BOOLEAN,
    MF_SHDICT_NUMBER,
    MF_SHDICT_STRING,
    MF_SHDICT_LIST /* only read back: made by push */
} mf_shdict_type_t;

typedef struct mf_shdict_value {
    mf_shdict_type_t type;
    bool boolean;
    double number;
    const char *str; /* MF_SHDICT_STRING: len bytes (not NUL-terminated) */
    size_t len;
} mf_shdict_value_t;

/* A caller's buffer for what a read copies out: start it zeroed; the dict
 * grows it (realloc) when a value does not fit, so a thread that keeps its
 * buffer reads without allocating once it is big enough. Growing may fail:
 * MF_SHDICT_NO_MEMORY. Free with mf_shdict_buf_free. */
typedef struct mf_shdict_buf {
    char *data;
    size_t cap;
} mf_shdict_buf_t;

MF_API void mf_shdict_buf_free(mf_shdict_buf_t *buf);

typedef struct mf_shdict_opts {
    size_t capacity;  /* bytes, MF_SHDICT_MIN_CAPACITY to _MAX_CAPACITY */
    unsigned stripes; /* a power of two up to 256; 0: one per 256 KiB, 1-16 */
    /* ms; NULL: CLOCK_MONOTONIC. Called under a stripe's lock. */
    uint64_t (*clock)(void *clock_ud);
    void *clock_ud;
} mf_shdict_opts_t;

/* NULL with *err = MF_EINVAL (a capacity or stripes out of range) or
 * MF_ENOMEM. */
MF_API mf_shdict_t *mf_shdict_create(const mf_shdict_opts_t *opts, int *err);
MF_API void mf_shdict_destroy(mf_shdict_t *d);

MF_API size_t mf_shdict_capacity(const mf_shdict_t *d);
/* Bytes of free blocks over every stripe (one entry may need them in one
 * piece, in its own stripe). */
MF_API size_t mf_shdict_free_space(mf_shdict_t *d);
MF_API unsigned mf_shdict_stripes(const mf_shdict_t *d);

/* The value of key (its strings copied into buf), its flags, and whether
 * it had expired. An expired key is MF_SHDICT_NOT_FOUND unless stale_ok;
 * a list is MF_SHDICT_IS_A_LIST. stale may be NULL. */
MF_API int mf_shdict_get(mf_shdict_t *d, const char *key, size_t klen,
                         bool stale_ok, mf_shdict_value_t *out, uint32_t *flags,
                         bool *stale, mf_shdict_buf_t *buf);

/* How mf_shdict_store treats an existing key and a full stripe. */
enum {
    MF_SHDICT_STORE_SET = 0,      /* whatever is there */
    MF_SHDICT_STORE_ADD = 1,      /* MF_SHDICT_EXISTS if a live one is */
    MF_SHDICT_STORE_REPLACE = 2,  /* MF_SHDICT_NOT_FOUND unless one is */
    MF_SHDICT_STORE_NO_EVICT = 4, /* safe_*: never force a live entry out */
};

/* Stores v (MF_SHDICT_NIL deletes) with a TTL (0: none) and flags.
 * *forcible is set when live entries were evicted to make room. A refused
 * store (MF_SHDICT_NO_MEMORY) leaves the old value, unless the new one
 * could only fit once the old one was gone too (then the key is gone:
 * OpenResty's behaviour). */
MF_API int mf_shdict_store(mf_shdict_t *d, const char *key, size_t klen,
                           const mf_shdict_value_t *v, uint64_t ttl_ms,
                           uint32_t flags, unsigned mode, bool *forcible);

/* *out = the number at key + by. A missing or expired key is
 * MF_SHDICT_NOT_FOUND unless init is given: then it becomes *init + by,
 * with init_ttl_ms (0: none) and flags 0. */
MF_API int mf_shdict_incr(mf_shdict_t *d, const char *key, size_t klen,
                          double by, const double *init, uint64_t init_ttl_ms,
                          double *out, bool *forcible);

/* The time key has left in ms (0: it never expires). */
MF_API int mf_shdict_ttl(mf_shdict_t *d, const char *key, size_t klen,
                         uint64_t *ttl_ms);
/* Sets key's TTL (0: never expires). */
MF_API int mf_shdict_expire(mf_shdict_t *d, const char *key, size_t klen,
                            uint64_t ttl_ms);

/* Marks every entry expired (their memory goes at need, and get_stale
 * still sees them, as in OpenResty). */
MF_API void mf_shdict_flush_all(mf_shdict_t *d);
/* Frees up to max expired entries (0: all); how many. */
MF_API size_t mf_shdict_flush_expired(mf_shdict_t *d, size_t max);

/* Copies up to max live keys (0: all) into buf as a 2-byte length (host
 * order) and the bytes, one after the other; *n: how many. */
MF_API int mf_shdict_keys(mf_shdict_t *d, size_t max, mf_shdict_buf_t *buf,
                          size_t *n);

/* Lists: v is a string or a number. push makes the list when the key is
 * missing or expired; MF_SHDICT_NOT_A_LIST on another value. *len: the
 * length after it. */
MF_API int mf_shdict_push(mf_shdict_t *d, const char *key, size_t klen,
                          bool left, const mf_shdict_value_t *v, size_t *len);
/* Takes the first (left) or last item; MF_SHDICT_NOT_FOUND when there is
 * none. The key goes with its last item. */
MF_API int mf_shdict_pop(mf_shdict_t *d, const char *key, size_t klen,
                         bool left, mf_shdict_value_t *out,
                         mf_shdict_buf_t *buf);
/* The length (0 for a missing key). */
MF_API int mf_shdict_llen(mf_shdict_t *d, const char *key, size_t klen,
                          size_t *len);

/* A leaky bucket (nginx's limit_req, lua-resty-limit-traffic's
 * resty.limit.req): requests drain at rate a second; one that finds more
 * than burst requests' worth still in the bucket is refused. The bucket's
 * state (the excess and the time of the last accepted request) is one
 * entry of 16 bytes, read, updated and written under the stripe's lock, so
 * workers sharing the dict count every request exactly once. */
typedef enum mf_shdict_leaky_mode {
    MF_SHDICT_LEAKY_CHECK = 0,   /* say what a request would get; no change */
    MF_SHDICT_LEAKY_COMMIT = 1,  /* and count the request when accepted */
    MF_SHDICT_LEAKY_UNCOMMIT = 2 /* take one counted request back */
} mf_shdict_leaky_mode_t;

typedef struct mf_shdict_leaky {
    double rate;   /* requests a second, > 0 */
    double burst;  /* requests over the rate held back (delayed), >= 0 */
    double now_ms; /* the caller's time in ms; < 0: the dict's clock */
    mf_shdict_leaky_mode_t mode;
} mf_shdict_leaky_t;

/* *excess: the requests waiting in the bucket once this one is in (its
 * delay is *excess / rate seconds). MF_SHDICT_REJECTED when the bucket
 * would hold more than burst (nothing is stored); MF_SHDICT_BAD_VALUE when
 * key holds something else. On the dict's clock a bucket expires once it
 * has drained (a fresh one is the same); on the caller's it stays until
 * evicted. UNCOMMIT gives *excess after the request is taken back. */
MF_API int mf_shdict_leaky(mf_shdict_t *d, const char *key, size_t klen,
                           const mf_shdict_leaky_t *in, double *excess);

MF_EXTERN_C_END

#endif /* MOONFLOW_SHDICT_H */
