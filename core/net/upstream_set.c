/*
 * upstream_set.c — a group's server set (upstream_int.h): the listed
 * servers split into primaries and backups, each tier with its smooth
 * weighted round robin turn and its ketama ring. A set never changes once
 * built; a change builds another.
 *
 * May call: OpenSSL's MD5 (the ketama placement), libc.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPENSSL_SUPPRESS_DEPRECATED /* MD5_*: see mf__md5 */
#include <openssl/md5.h>

#include "moonflow/error.h"
#include "net/upstream_int.h"

/* libketama: 40 MD5 digests per server for an even share, 4 points each. */
#define MF_KETAMA_DIGESTS_PER_SERVER 40
/* The longest round robin turn (the weights' sum over their gcd). */
#define MF_UPSTREAM_MAX_TURN 65536

/* MD5 through OpenSSL's one-shot digest of the algorithm itself (MD5_Init
 * ... MD5_Final), not the EVP layer: a pick hashes its key per request,
 * and EVP's provider dispatch costs as much again as the digest (EVP_Digest
 * also fetches and allocates each call). Deprecated in OpenSSL 3 but kept
 * there: ketama is defined by MD5, and this is the same implementation
 * EVP ends in. */
static void mf__md5(const char *s, size_t len, unsigned char out[16])
{
    MD5_CTX ctx;
    MD5_Init(&ctx);
    MD5_Update(&ctx, s, len);
    MD5_Final(out, &ctx);
}

static uint32_t mf__le32(const unsigned char *d)
{
    return (uint32_t)d[3] << 24 | (uint32_t)d[2] << 16 | (uint32_t)d[1] << 8 |
           (uint32_t)d[0];
}

uint32_t mf__upstream_ketama_hash(const char *key, size_t len)
{
    unsigned char d[16];
    mf__md5(key, len, d);
    return mf__le32(d);
}

static int mf__point_cmp(const void *a, const void *b)
{
    const mf_upstream_point_t *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->server < y->server ? -1 : x->server > y->server;
}

/* libketama's placement: server i gets floor(40 * n * w_i / W) digests of
 * "address-k", each giving four points. */
static void mf__tier_ring(mf_upstream_tier_t *tier, unsigned total)
{
    size_t npoints = 0;
    for (size_t i = 0; i < tier->n; i++)
        npoints += 4 * (MF_KETAMA_DIGESTS_PER_SERVER * tier->n *
                        atomic_load(&tier->servers[i]->weight) / total);
    tier->ring = mf_xmalloc((npoints ? npoints : 1) * sizeof(*tier->ring));
    size_t p = 0;
    for (size_t i = 0; i < tier->n; i++) {
        const mf_upstream_server_t *s = tier->servers[i];
        size_t digests = MF_KETAMA_DIGESTS_PER_SERVER * tier->n *
                         atomic_load(&s->weight) / total;
        for (size_t k = 0; k < digests; k++) {
            char text[sizeof s->address + 24];
            int len = snprintf(text, sizeof text, "%s-%zu", s->address, k);
            unsigned char d[16];
            mf__md5(text, (size_t)len, d);
            for (int h = 0; h < 4; h++)
                tier->ring[p++] =
                    (mf_upstream_point_t){mf__le32(d + 4 * h), (uint32_t)i};
        }
    }
    tier->npoints = p;
    qsort(tier->ring, p, sizeof(*tier->ring), mf__point_cmp);
}

size_t mf__upstream_ring_find(const mf_upstream_tier_t *tier, uint32_t h)
{
    size_t lo = 0, hi = tier->npoints;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tier->ring[mid].value < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == tier->npoints ? 0 : lo;
}

static unsigned mf__gcd(unsigned a, unsigned b)
{
    while (b) {
        unsigned t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* nginx's smooth weighted round robin, written out for one turn: each
 * step every server gains its weight, the richest is picked and pays the
 * total. Spreads a heavy server's picks instead of bunching them. */
static void mf__tier_sequence(mf_upstream_tier_t *tier, const unsigned *weights,
                              unsigned total)
{
    tier->sequence_len = total;
    tier->sequence = mf_xmalloc(total * sizeof(*tier->sequence));
    long *current = mf_xcalloc(tier->n, sizeof(*current));
    for (unsigned step = 0; step < total; step++) {
        size_t best = 0;
        for (size_t i = 0; i < tier->n; i++) {
            current[i] += weights[i];
            if (current[i] > current[best])
                best = i;
        }
        current[best] -= (long)total;
        tier->sequence[step] = (uint32_t)best;
    }
    free(current);
}

static int mf__tier_build(mf_upstream_tier_t *tier, char *err, size_t cap)
{
    atomic_init(&tier->turn, 0);
    if (!tier->n)
        return 0;
    unsigned total = 0, g = 0;
    for (size_t i = 0; i < tier->n; i++) {
        unsigned w = atomic_load(&tier->servers[i]->weight);
        total += w;
        g = mf__gcd(g, w);
    }
    if (total / g > MF_UPSTREAM_MAX_TURN) {
        snprintf(err, cap,
                 "the weights add up to %u (over %d once divided by their "
                 "greatest common divisor %u)",
                 total, MF_UPSTREAM_MAX_TURN, g);
        return MF_EINVAL;
    }
    mf__tier_ring(tier, total);
    /* The turn of weights divided by their gcd is the same order, shorter. */
    unsigned *scaled = mf_xmalloc(tier->n * sizeof(*scaled));
    for (size_t i = 0; i < tier->n; i++)
        scaled[i] = atomic_load(&tier->servers[i]->weight) / g;
    mf__tier_sequence(tier, scaled, total / g);
    free(scaled);
    return 0;
}

static void mf__tier_free(mf_upstream_tier_t *tier)
{
    free(tier->servers);
    free(tier->sequence);
    free(tier->ring);
}

void mf__upstream_set_free(mf_upstream_set_t *set)
{
    if (!set)
        return;
    mf__tier_free(&set->primary);
    mf__tier_free(&set->backup);
    free(set);
}

mf_upstream_set_t *mf__upstream_set_build(mf_upstream_t *up,
                                          const mf_upstream_conf_t *conf,
                                          char *err, size_t cap)
{
    mf_upstream_set_t *set = mf_xcalloc(1, sizeof(*set));
    set->conf = *conf;
    size_t n = 0;
    for (mf_upstream_server_t *s = up->servers; s; s = s->next)
        n++;
    set->primary.servers = mf_xmalloc((n ? n : 1) * sizeof(void *));
    set->backup.servers = mf_xmalloc((n ? n : 1) * sizeof(void *));
    /* Listed order: records are prepended, so walk them into place. */
    for (mf_upstream_server_t *s = up->servers; s; s = s->next) {
        if (atomic_load(&s->removed))
            continue;
        mf_upstream_tier_t *t =
            atomic_load(&s->backup) ? &set->backup : &set->primary;
        memmove(t->servers + 1, t->servers, t->n * sizeof(void *));
        t->servers[0] = s;
        t->n++;
    }
    if (mf__tier_build(&set->primary, err, cap) < 0 ||
        mf__tier_build(&set->backup, err, cap) < 0) {
        mf__upstream_set_free(set);
        return NULL;
    }
    return set;
}
