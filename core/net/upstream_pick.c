/*
 * upstream_pick.c — picking a group's server for an attempt, and what an
 * attempt's end teaches (passive health, the latency EWMA, connections in
 * flight). Lock-free: atomics on the servers, the group's current set
 * read once per pick.
 *
 * A server may serve when it is listed, not draining, healthy by the
 * active checker, not tried by this request, and passively live, or down
 * with its time out over: then the pick that claims it (LIVE/DOWN →
 * PROBING, one compare-and-swap) sends the one probe request.
 *
 * May call: upstream.c's clock and log, libc.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "moonflow/error.h"
#include "moonflow/loop.h"
#include "net/upstream_int.h"

/* The EWMA's weight of a new sample: 1/8 (TCP's smoothed RTT). */
#define MF_EWMA_SHIFT 3

static bool mf__tried(const mf_upstream_try_t *t, const mf_upstream_server_t *s)
{
    unsigned n = t->attempts < MF_UPSTREAM_MAX_TRIES ? t->attempts
                                                     : MF_UPSTREAM_MAX_TRIES;
    for (unsigned i = 0; i < n; i++)
        if (t->tried[i] == s)
            return true;
    return false;
}

/* Whether s may take the attempt, passive state aside from claiming. */
static bool mf__eligible(const mf_upstream_try_t *t,
                         const mf_upstream_server_t *s, uint64_t now)
{
    if (atomic_load_explicit(&s->draining, memory_order_relaxed) ||
        !atomic_load_explicit(&s->healthy, memory_order_relaxed) ||
        mf__tried(t, s))
        return false;
    int st = atomic_load_explicit(&s->pstate, memory_order_relaxed);
    return st == MF_UP_LIVE ||
           now >= atomic_load_explicit(&s->down_until_ms, memory_order_relaxed);
}

/* The picked s becomes the attempt's: a down one is claimed for its one
 * probe (false: another thread claimed it first). */
static bool mf__claim(mf_upstream_server_t *s, uint64_t now)
{
    int st = atomic_load(&s->pstate);
    if (st == MF_UP_LIVE)
        return true;
    if (!atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_PROBING))
        return false;
    uint64_t fail_timeout = atomic_load(&s->up->set)->conf.fail_timeout_ms;
    atomic_store(&s->down_until_ms, now + fail_timeout); /* a lost probe */
    return true;
}

/* ---- a thread's random numbers (xorshift64*, seeded per thread) ---------- */

static thread_local uint64_t mf__rand_state;

static uint64_t mf__rand(void)
{
    if (!mf__rand_state)
        mf__rand_state =
            mf_monotonic_ns() ^ (uint64_t)(uintptr_t)&mf__rand_state;
    uint64_t x = mf__rand_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    mf__rand_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- the policies: an eligible index in tier, or -1 ---------------------- */

typedef struct mf_pick_ctx {
    const mf_upstream_try_t *t;
    uint64_t now;
    const char *key;
    size_t key_len;
    const mf_upstream_server_t *skip; /* lost its probe to another thread */
} mf_pick_ctx_t;

static bool mf__ok(const mf_pick_ctx_t *c, const mf_upstream_server_t *s)
{
    return s != c->skip && mf__eligible(c->t, s, c->now);
}

/* A step of the turn that lands on a server out of service takes the
 * next step of the turn (not the next place after it), so the others keep
 * their shares among themselves. */
static long mf__round_robin(mf_upstream_tier_t *tier, const mf_pick_ctx_t *c)
{
    for (size_t i = 0; i < tier->sequence_len; i++) {
        uint64_t turn =
            atomic_fetch_add_explicit(&tier->turn, 1, memory_order_relaxed);
        uint32_t k = tier->sequence[turn % tier->sequence_len];
        if (mf__ok(c, tier->servers[k]))
            return k;
    }
    for (size_t k = 0; k < tier->n; k++) /* other threads took the steps */
        if (mf__ok(c, tier->servers[k]))
            return (long)k;
    return -1;
}

static long mf__random(mf_upstream_tier_t *tier, const mf_pick_ctx_t *c)
{
    uint64_t total = 0;
    for (size_t i = 0; i < tier->n; i++)
        if (mf__ok(c, tier->servers[i]))
            total += atomic_load(&tier->servers[i]->weight);
    if (!total)
        return -1;
    uint64_t r = mf__rand() % total;
    for (size_t i = 0; i < tier->n; i++) {
        if (!mf__ok(c, tier->servers[i]))
            continue;
        uint64_t w = atomic_load(&tier->servers[i]->weight);
        if (r < w)
            return (long)i;
        r -= w;
    }
    return -1;
}

/* The fewest in flight per weight; ties go round from a moving start. */
static long mf__least_conn(mf_upstream_tier_t *tier, const mf_pick_ctx_t *c)
{
    uint64_t start =
        atomic_fetch_add_explicit(&tier->turn, 1, memory_order_relaxed);
    long best = -1;
    uint64_t best_a = 0, best_w = 1;
    for (size_t j = 0; j < tier->n; j++) {
        size_t i = (start + j) % tier->n;
        const mf_upstream_server_t *s = tier->servers[i];
        if (!mf__ok(c, s))
            continue;
        uint64_t a = atomic_load(&s->active), w = atomic_load(&s->weight);
        if (best < 0 || a * best_w < best_a * w) {
            best = (long)i;
            best_a = a;
            best_w = w;
        }
    }
    return best;
}

/* The key's point on the ring, then clockwise to a server that may serve:
 * a server out of service hands only its own keys on. */
static long mf__consistent_hash(mf_upstream_tier_t *tier,
                                const mf_pick_ctx_t *c)
{
    if (!tier->npoints)
        return -1;
    uint32_t h =
        mf__upstream_ketama_hash(c->key ? c->key : "", c->key ? c->key_len : 0);
    size_t p = mf__upstream_ring_find(tier, h);
    for (size_t i = 0; i < tier->npoints; i++) {
        uint32_t k = tier->ring[(p + i) % tier->npoints].server;
        if (mf__ok(c, tier->servers[k]))
            return k;
    }
    return -1;
}

static uint64_t mf__ewma_score(const mf_upstream_server_t *s)
{
    return (atomic_load(&s->ewma_ns) + 1) * (atomic_load(&s->active) + 1);
}

/* Two random choices, the lower latency times load (Mitzenmacher). */
static long mf__ewma(mf_upstream_tier_t *tier, const mf_pick_ctx_t *c)
{
    long ok[MF_UPSTREAM_MAX_SERVERS];
    size_t n = 0;
    for (size_t i = 0; i < tier->n; i++)
        if (mf__ok(c, tier->servers[i]))
            ok[n++] = (long)i;
    if (n < 2)
        return n ? ok[0] : -1;
    size_t a = mf__rand() % n, b = mf__rand() % (n - 1);
    if (b >= a)
        b++;
    return mf__ewma_score(tier->servers[ok[a]]) <=
                   mf__ewma_score(tier->servers[ok[b]])
               ? ok[a]
               : ok[b];
}

/* The key names the server: "host:port", or its 1-based place. */
static long mf__manual(mf_upstream_tier_t *tier, const mf_pick_ctx_t *c,
                       size_t offset)
{
    if (!c->key)
        return -1;
    char buf[32];
    unsigned long place = 0;
    if (c->key_len < sizeof buf) {
        memcpy(buf, c->key, c->key_len);
        buf[c->key_len] = '\0';
        char *end;
        place = strtoul(buf, &end, 10);
        if (*end || c->key_len == 0)
            place = 0;
    }
    for (size_t i = 0; i < tier->n; i++) {
        const mf_upstream_server_t *s = tier->servers[i];
        bool named = place ? place == offset + i + 1
                           : strlen(s->address) == c->key_len &&
                                 memcmp(s->address, c->key, c->key_len) == 0;
        if (named)
            return mf__ok(c, s) ? (long)i : -1;
    }
    return -1;
}

static long mf__policy_pick(const mf_upstream_set_t *set,
                            mf_upstream_tier_t *tier, const mf_pick_ctx_t *c,
                            size_t offset)
{
    switch (set->conf.policy) {
    case MF_UPSTREAM_RANDOM:
        return mf__random(tier, c);
    case MF_UPSTREAM_LEAST_CONN:
        return mf__least_conn(tier, c);
    case MF_UPSTREAM_CONSISTENT_HASH:
        return mf__consistent_hash(tier, c);
    case MF_UPSTREAM_EWMA:
        return mf__ewma(tier, c);
    case MF_UPSTREAM_MANUAL:
        return mf__manual(tier, c, offset);
    default:
        return mf__round_robin(tier, c);
    }
}

const void *mf_upstream_key_home(const mf_upstream_t *up, const char *key,
                                 size_t key_len)
{
    mf_upstream_set_t *set = atomic_load(&((mf_upstream_t *)up)->set);
    const mf_upstream_tier_t *tier = &set->primary;
    if (set->conf.policy != MF_UPSTREAM_CONSISTENT_HASH || !tier->npoints)
        return NULL;
    uint32_t h = mf__upstream_ketama_hash(key ? key : "", key ? key_len : 0);
    return tier->servers[tier->ring[mf__upstream_ring_find(tier, h)].server];
}

/* ---- an attempt --------------------------------------------------------- */

static void mf__attempt_begin(mf_upstream_try_t *t, mf_upstream_server_t *s)
{
    if (t->attempts < MF_UPSTREAM_MAX_TRIES)
        t->tried[t->attempts] = s;
    t->attempts++;
    t->server = s;
    t->host = s->host;
    t->port = s->port;
    t->attempt_ns = mf_monotonic_ns();
    atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
}

bool mf_upstream_may_retry(const mf_upstream_try_t *t)
{
    const mf_upstream_conf_t *conf = &atomic_load(&t->up->set)->conf;
    if (conf->tries && t->attempts >= conf->tries)
        return false;
    if (t->attempts >= MF_UPSTREAM_MAX_TRIES)
        return false;
    return !conf->tries_timeout_ms || !t->started_ns ||
           mf_monotonic_ns() - t->started_ns <
               (uint64_t)conf->tries_timeout_ms * 1000000u;
}

int mf_upstream_pick(mf_upstream_try_t *t, const char *key, size_t key_len)
{
    mf_upstream_set_t *set = atomic_load(&t->up->set);
    if (t->attempts && !mf_upstream_may_retry(t))
        return MF_ENOUPSTREAM;
    if (!t->attempts && set->conf.tries_timeout_ms)
        t->started_ns = mf_monotonic_ns();
    mf_pick_ctx_t c = {t, mf__upstream_now_ms(), key, key_len, NULL};
    /* A lost probe claim skips that server; bounded by the servers. */
    for (size_t round = 0; round <= set->primary.n + set->backup.n; round++) {
        mf_upstream_tier_t *tier = &set->primary;
        long i = mf__policy_pick(set, tier, &c, 0);
        if (i < 0) {
            tier = &set->backup;
            i = mf__policy_pick(set, tier, &c, set->primary.n);
        }
        if (i < 0)
            return MF_ENOUPSTREAM;
        mf_upstream_server_t *s = tier->servers[i];
        if (mf__claim(s, c.now)) {
            mf__attempt_begin(t, s);
            return 0;
        }
        c.skip = s;
    }
    return MF_ENOUPSTREAM;
}

int mf_upstream_pick_address(mf_upstream_try_t *t, const char *host,
                             uint16_t port)
{
    const mf_upstream_set_t *set = atomic_load(&t->up->set);
    const mf_upstream_tier_t *tiers[] = {&set->primary, &set->backup};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < tiers[k]->n; i++) {
            mf_upstream_server_t *s = tiers[k]->servers[i];
            if (s->port == port && strcmp(s->host, host) == 0) {
                if (!mf__claim(s, mf__upstream_now_ms()))
                    return MF_ENOUPSTREAM;
                mf__attempt_begin(t, s);
                return 0;
            }
        }
    /* Not a member: used as it is, with no health to keep. */
    if (t->attempts && !mf_upstream_may_retry(t))
        return MF_ENOUPSTREAM;
    snprintf(t->own_host, sizeof t->own_host, "%s", host);
    t->attempts++;
    t->server = NULL;
    t->host = t->own_host;
    t->port = port;
    t->attempt_ns = mf_monotonic_ns();
    return 0;
}

/* ---- what an attempt's end teaches --------------------------------------- */

static void mf__ewma_add(mf_upstream_server_t *s, uint64_t latency_ns)
{
    uint64_t old = atomic_load_explicit(&s->ewma_ns, memory_order_relaxed);
    uint64_t next =
        old ? old - (old >> MF_EWMA_SHIFT) + (latency_ns >> MF_EWMA_SHIFT)
            : latency_ns;
    atomic_store_explicit(&s->ewma_ns, next, memory_order_relaxed);
}

static void mf__went_down(mf_upstream_server_t *s, uint64_t now,
                          const mf_upstream_conf_t *conf, const char *why)
{
    atomic_store(&s->down_until_ms, now + conf->fail_timeout_ms);
    atomic_fetch_add(&s->downs, 1);
    mf__upstream_log(s, "down", why);
}

static void mf__failed(mf_upstream_server_t *s)
{
    const mf_upstream_conf_t *conf = &atomic_load(&s->up->set)->conf;
    atomic_fetch_add(&s->failures, 1);
    if (!conf->max_fails)
        return;
    uint64_t now = mf__upstream_now_ms();
    int st = atomic_load(&s->pstate);
    if (st == MF_UP_PROBING) {
        if (atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_DOWN))
            mf__went_down(s, now, conf, "its probe failed");
        return;
    }
    if (st != MF_UP_LIVE)
        return;
    if (now - atomic_load(&s->window_ms) > conf->fail_timeout_ms) {
        atomic_store(&s->window_ms, now);
        atomic_store(&s->fails, 0);
    }
    unsigned fails = atomic_fetch_add(&s->fails, 1) + 1;
    if (fails >= conf->max_fails &&
        atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_DOWN)) {
        char why[48];
        snprintf(why, sizeof why, "%u failure%s", fails, fails == 1 ? "" : "s");
        mf__went_down(s, now, conf, why);
    }
}

static void mf__succeeded(mf_upstream_server_t *s, uint64_t latency_ns)
{
    mf__ewma_add(s, latency_ns);
    /* A plain load first: a locked compare-and-swap on every success would
     * bounce the server's line between the workers for nothing. */
    int st = MF_UP_PROBING;
    if (atomic_load_explicit(&s->pstate, memory_order_relaxed) ==
            MF_UP_PROBING &&
        atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_LIVE)) {
        atomic_store(&s->fails, 0);
        mf__upstream_log(s, "up", "its probe succeeded");
    }
}

void mf_upstream_abandon(mf_upstream_try_t *t)
{
    if (t->server)
        atomic_fetch_sub_explicit(&t->server->active, 1, memory_order_relaxed);
    t->server = NULL;
}

void mf_upstream_done(mf_upstream_try_t *t, bool ok, uint64_t latency_ns)
{
    mf_upstream_server_t *s = t->server;
    if (!s)
        return;
    t->server = NULL;
    atomic_fetch_sub_explicit(&s->active, 1, memory_order_relaxed);
    if (ok)
        mf__succeeded(s, latency_ns);
    else
        mf__failed(s);
}
