/*
 * metrics.c — the metrics registry (moonflow/metrics.h): families and
 * their series under one mutex, each series' slots in every shard, and the
 * Prometheus text exposition.
 *
 * A shard's slots come from chunks of that shard alone (no two writers
 * share a cache line), handed out by a bump pointer when a series is made
 * and never moved, so a writer's slot pointer stays good and a scrape can
 * read it at any time. A histogram's slots are its buckets (not
 * cumulative: the scrape adds them up), the +Inf bucket, then the sum.
 *
 * May call: libc, libm and pthreads.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moonflow/error.h"
#include "moonflow/metrics.h"

typedef _Atomic double mf_slot_t;

#define MF_CHUNK_SLOTS 4096

typedef struct mf_chunk {
    struct mf_chunk *next;
    size_t used;
    mf_slot_t slots[MF_CHUNK_SLOTS];
} mf_chunk_t;

struct mf_metric {
    mf_metric_family_t *family;
    mf_metric_t *next;      /* the family's series, in creation order */
    mf_metric_t *hash_next; /* the family's hash chain */
    uint64_t hash;
    char *key; /* each value's length (4 bytes) and bytes */
    size_t key_len;
    char *labels;      /* rendered: a="x",b="y" ("" with no label) */
    mf_slot_t *slot[]; /* one run of slots per shard */
};

struct mf_metric_family {
    mf_metrics_t *registry;
    mf_metric_family_t *next;
    char *name;
    char *help;
    mf_metric_type_t type;
    size_t nlabels;
    char *label[MF_METRIC_MAX_LABELS];
    size_t nbuckets;
    double bound[MF_METRIC_MAX_BUCKETS];
    size_t nslots;
    mf_metric_t *first, **tail;
    size_t nseries;
    mf_metric_t **hash; /* hash_cap heads, a power of two */
    size_t hash_cap;
};

struct mf_metrics {
    pthread_mutex_t mu;
    unsigned shards;
    mf_metric_family_t *first, **tail;
    mf_chunk_t **chunks; /* per shard, the newest first */
};

static const double mf__default_buckets[] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* ---- memory: the engine's checked allocator (failures are reported) ---- */

static void *mf__zalloc(size_t n)
{
    void *p = mf_try_malloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}

static char *mf__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = mf_try_malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

/* ---- the registry ------------------------------------------------------ */

mf_metrics_t *mf_metrics_create(unsigned shards)
{
    if (shards == 0)
        return NULL;
    mf_metrics_t *m = mf__zalloc(sizeof *m);
    if (!m)
        return NULL;
    m->chunks = mf__zalloc(shards * sizeof *m->chunks);
    if (!m->chunks) {
        mf_free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    m->shards = shards;
    m->tail = &m->first;
    return m;
}

static void mf__family_free(mf_metric_family_t *f)
{
    for (mf_metric_t *s = f->first, *next; s; s = next) {
        next = s->next;
        mf_free(s->key);
        mf_free(s->labels);
        mf_free(s);
    }
    for (size_t i = 0; i < f->nlabels; i++)
        mf_free(f->label[i]);
    mf_free(f->hash);
    mf_free(f->name);
    mf_free(f->help);
    mf_free(f);
}

void mf_metrics_free(mf_metrics_t *m)
{
    if (!m)
        return;
    for (mf_metric_family_t *f = m->first, *next; f; f = next) {
        next = f->next;
        mf__family_free(f);
    }
    for (unsigned i = 0; i < m->shards; i++) {
        for (mf_chunk_t *c = m->chunks[i], *next; c; c = next) {
            next = c->next;
            mf_free(c);
        }
    }
    mf_free(m->chunks);
    pthread_mutex_destroy(&m->mu);
    mf_free(m);
}

unsigned mf_metrics_shards(const mf_metrics_t *m)
{
    return m->shards;
}

/* n zeroed slots of one shard (n <= MF_CHUNK_SLOTS), or NULL. */
static mf_slot_t *mf__slots(mf_metrics_t *m, unsigned shard, size_t n)
{
    mf_chunk_t *c = m->chunks[shard];
    if (!c || c->used + n > MF_CHUNK_SLOTS) {
        c = mf__zalloc(sizeof *c);
        if (!c)
            return NULL;
        c->next = m->chunks[shard];
        m->chunks[shard] = c;
    }
    mf_slot_t *p = &c->slots[c->used];
    c->used += n;
    return p;
}

/* ---- families ---------------------------------------------------------- */

static int mf__why(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int mf__why(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return MF_EINVAL;
}

static bool mf__name_ok(const char *s, bool colon)
{
    if (!s || !*s)
        return false;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  c == '_' || (colon && c == ':') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static int mf__check_labels(const mf_metric_spec_t *spec, char *why, size_t len)
{
    if (spec->nlabels > MF_METRIC_MAX_LABELS)
        return mf__why(why, len, "%s: at most %d labels", spec->name,
                       MF_METRIC_MAX_LABELS);
    for (size_t i = 0; i < spec->nlabels; i++) {
        const char *l = spec->labels[i];
        if (!mf__name_ok(l, false) || strncmp(l, "__", 2) == 0)
            return mf__why(why, len,
                           "%s: label \"%s\": [a-zA-Z_][a-zA-Z0-9_]* "
                           "expected, not starting with __",
                           spec->name, l ? l : "(null)");
        if (spec->type == MF_METRIC_HISTOGRAM && strcmp(l, "le") == 0)
            return mf__why(why, len,
                           "%s: label \"le\" is a histogram's own (its "
                           "buckets)",
                           spec->name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(l, spec->labels[j]) == 0)
                return mf__why(why, len, "%s: label \"%s\" given twice",
                               spec->name, l);
    }
    return 0;
}

static int mf__check_buckets(const mf_metric_spec_t *spec, char *why,
                             size_t len)
{
    if (spec->type != MF_METRIC_HISTOGRAM || !spec->buckets)
        return 0;
    if (spec->nbuckets == 0 || spec->nbuckets > MF_METRIC_MAX_BUCKETS)
        return mf__why(why, len, "%s: 1 to %d buckets expected, got %zu",
                       spec->name, MF_METRIC_MAX_BUCKETS, spec->nbuckets);
    for (size_t i = 0; i < spec->nbuckets; i++) {
        double b = spec->buckets[i];
        if (!isfinite(b) || (i > 0 && b <= spec->buckets[i - 1]))
            return mf__why(why, len,
                           "%s: buckets: finite bounds in increasing order "
                           "expected (bucket %zu)",
                           spec->name, i + 1);
    }
    return 0;
}

static const char *mf__type_name(mf_metric_type_t t)
{
    return t == MF_METRIC_COUNTER ? "counter"
           : t == MF_METRIC_GAUGE ? "gauge"
                                  : "histogram";
}

/* Whether f has spec's type, labels and buckets. */
static bool mf__same_shape(const mf_metric_family_t *f,
                           const mf_metric_spec_t *spec, const double *bounds,
                           size_t nbounds)
{
    if (f->type != spec->type || f->nlabels != spec->nlabels)
        return false;
    for (size_t i = 0; i < f->nlabels; i++)
        if (strcmp(f->label[i], spec->labels[i]) != 0)
            return false;
    if (f->type != MF_METRIC_HISTOGRAM)
        return true;
    return f->nbuckets == nbounds &&
           memcmp(f->bound, bounds, nbounds * sizeof *bounds) == 0;
}

static mf_metric_family_t *mf__family_new(mf_metrics_t *m,
                                          const mf_metric_spec_t *spec,
                                          const double *bounds, size_t nbounds)
{
    mf_metric_family_t *f = mf__zalloc(sizeof *f);
    if (!f)
        return NULL;
    f->registry = m;
    f->type = spec->type;
    f->tail = &f->first;
    f->name = mf__strdup(spec->name);
    f->help = mf__strdup(spec->help ? spec->help : "");
    bool ok = f->name && f->help;
    for (size_t i = 0; i < spec->nlabels && ok; i++, f->nlabels++)
        ok = (f->label[i] = mf__strdup(spec->labels[i])) != NULL;
    if (spec->type == MF_METRIC_HISTOGRAM) {
        f->nbuckets = nbounds;
        memcpy(f->bound, bounds, nbounds * sizeof *bounds);
        f->nslots = nbounds + 2; /* the buckets, +Inf, the sum */
    } else {
        f->nslots = 1;
    }
    if (!ok) {
        mf__family_free(f);
        return NULL;
    }
    return f;
}

int mf_metrics_family(mf_metrics_t *m, const mf_metric_spec_t *spec,
                      mf_metric_family_t **out, char *why, size_t whylen)
{
    if (!mf__name_ok(spec->name, true))
        return mf__why(why, whylen,
                       "metric name \"%s\": [a-zA-Z_:][a-zA-Z0-9_:]* expected",
                       spec->name ? spec->name : "(null)");
    if ((unsigned)spec->type > MF_METRIC_HISTOGRAM)
        return mf__why(why, whylen, "%s: unknown type", spec->name);
    int rc = mf__check_labels(spec, why, whylen);
    if (rc == 0)
        rc = mf__check_buckets(spec, why, whylen);
    if (rc)
        return rc;
    const double *bounds = spec->buckets ? spec->buckets : mf__default_buckets;
    size_t nbounds = spec->buckets ? spec->nbuckets
                                   : sizeof mf__default_buckets /
                                         sizeof mf__default_buckets[0];
    pthread_mutex_lock(&m->mu);
    mf_metric_family_t *f = m->first;
    while (f && strcmp(f->name, spec->name) != 0)
        f = f->next;
    if (f && !mf__same_shape(f, spec, bounds, nbounds)) {
        rc = mf__why(why, whylen,
                     "%s: already declared as a %s with %zu label(s) of "
                     "other names, types or buckets",
                     spec->name, mf__type_name(f->type), f->nlabels);
    } else if (!f) {
        f = mf__family_new(m, spec, bounds, nbounds);
        if (f) {
            *m->tail = f;
            m->tail = &f->next;
        } else {
            rc = MF_ENOMEM;
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (rc == 0)
        *out = f;
    return rc;
}

mf_metric_type_t mf_metric_family_type(const mf_metric_family_t *f)
{
    return f->type;
}

size_t mf_metric_family_labels(const mf_metric_family_t *f)
{
    return f->nlabels;
}

/* ---- series ------------------------------------------------------------ */

/* A growable text; failed once an allocation did not succeed. */
typedef struct mf_text {
    char *p;
    size_t len, cap;
    bool failed;
} mf_text_t;

static void mf__put(mf_text_t *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = mf_try_malloc(cap);
        if (!p) {
            t->failed = true;
            return;
        }
        if (t->p)
            memcpy(p, t->p, t->len + 1);
        mf_free(t->p);
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void mf__puts(mf_text_t *t, const char *s)
{
    mf__put(t, s, strlen(s));
}

/* A label value or help text as the format wants it: \ and newline
 * escaped, and " too in a label value. */
static void mf__put_escaped(mf_text_t *t, const char *s, bool quote)
{
    for (const char *run = s;; s++) {
        const char *esc = *s == '\\'             ? "\\\\"
                          : *s == '\n'           ? "\\n"
                          : (quote && *s == '"') ? "\\\""
                                                 : NULL;
        if (!esc && *s)
            continue;
        mf__put(t, run, (size_t)(s - run));
        if (!*s)
            return;
        mf__puts(t, esc);
        run = s + 1;
    }
}

static uint64_t mf__hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

/* The key of a label tuple: each value's length in 4 bytes, then it. */
static char *mf__key(const char *const *values, size_t n, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += 4 + strlen(values[i]);
    char *key = mf_try_malloc(total);
    if (!key)
        return NULL;
    char *p = key;
    for (size_t i = 0; i < n; i++) {
        uint32_t l = (uint32_t)strlen(values[i]);
        memcpy(p, &l, 4);
        memcpy(p + 4, values[i], l);
        p += 4 + l;
    }
    *len = total;
    return key;
}

static mf_metric_t *mf__find(const mf_metric_family_t *f, uint64_t hash,
                             const char *key, size_t len)
{
    if (!f->hash)
        return NULL;
    mf_metric_t *s = f->hash[hash & (f->hash_cap - 1)];
    while (s && (s->hash != hash || s->key_len != len ||
                 memcmp(s->key, key, len) != 0))
        s = s->hash_next;
    return s;
}

/* Keeps the chains short: doubles the heads at a load of 1. */
static int mf__hash_add(mf_metric_family_t *f, mf_metric_t *s)
{
    if (f->nseries + 1 > f->hash_cap) {
        size_t cap = f->hash_cap ? f->hash_cap * 2 : 16;
        mf_metric_t **heads = mf__zalloc(cap * sizeof *heads);
        if (!heads)
            return MF_ENOMEM;
        for (mf_metric_t *o = f->first; o; o = o->next) {
            o->hash_next = heads[o->hash & (cap - 1)];
            heads[o->hash & (cap - 1)] = o;
        }
        mf_free(f->hash);
        f->hash = heads;
        f->hash_cap = cap;
    }
    s->hash_next = f->hash[s->hash & (f->hash_cap - 1)];
    f->hash[s->hash & (f->hash_cap - 1)] = s;
    return 0;
}

static char *mf__render_labels(const mf_metric_family_t *f,
                               const char *const *values)
{
    mf_text_t t = {0};
    mf__put(&t, "", 0);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i)
            mf__put(&t, ",", 1);
        mf__puts(&t, f->label[i]);
        mf__put(&t, "=\"", 2);
        mf__put_escaped(&t, values[i], true);
        mf__put(&t, "\"", 1);
    }
    if (t.failed) {
        mf_free(t.p);
        return NULL;
    }
    return t.p;
}

/* Under the mutex: a new series with its slots in every shard. */
static int mf__series_new(mf_metric_family_t *f, const char *const *values,
                          char *key, size_t len, uint64_t hash,
                          mf_metric_t **out)
{
    mf_metrics_t *m = f->registry;
    mf_metric_t *s = mf__zalloc(sizeof *s + m->shards * sizeof s->slot[0]);
    if (!s)
        return MF_ENOMEM;
    s->family = f;
    s->key = key;
    s->key_len = len;
    s->hash = hash;
    s->labels = mf__render_labels(f, values);
    bool ok = s->labels != NULL;
    for (unsigned i = 0; i < m->shards && ok; i++)
        ok = (s->slot[i] = mf__slots(m, i, f->nslots)) != NULL;
    if (!ok || mf__hash_add(f, s) != 0) {
        mf_free(s->labels);
        mf_free(s);
        return MF_ENOMEM; /* slots taken stay in their chunk, zero */
    }
    *f->tail = s;
    f->tail = &s->next;
    f->nseries++;
    *out = s;
    return 0;
}

int mf_metric_series(mf_metric_family_t *f, const char *const *values, size_t n,
                     mf_metric_t **out)
{
    if (n != f->nlabels)
        return MF_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!values[i])
            return MF_EINVAL;
    size_t len;
    char *key = mf__key(values, n, &len);
    if (!key)
        return MF_ENOMEM;
    uint64_t hash = mf__hash(key, len);
    pthread_mutex_lock(&f->registry->mu);
    int rc = 0;
    mf_metric_t *s = mf__find(f, hash, key, len);
    if (s)
        *out = s;
    else if (f->nseries >= MF_METRIC_MAX_SERIES)
        rc = MF_ENOSPC;
    else if ((rc = mf__series_new(f, values, key, len, hash, out)) == 0)
        key = NULL; /* the series keeps it */
    pthread_mutex_unlock(&f->registry->mu);
    mf_free(key);
    return rc;
}

/* ---- writes and reads -------------------------------------------------- */

/* Only the shard's thread writes its slots: a plain add, made of relaxed
 * accesses so that a scrape on another thread may read them. */
static inline void mf__slot_add(mf_slot_t *p, double v)
{
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

void mf_metric_add(mf_metric_t *s, unsigned shard, double v)
{
    mf__slot_add(s->slot[shard], v);
}

void mf_metric_set(mf_metric_t *s, unsigned shard, double v)
{
    atomic_store_explicit(s->slot[shard], v, memory_order_relaxed);
}

void mf_metric_observe(mf_metric_t *s, unsigned shard, double v)
{
    const mf_metric_family_t *f = s->family;
    size_t b = 0;
    while (b < f->nbuckets && !(v <= f->bound[b]))
        b++; /* NaN falls through to +Inf, as Prometheus's clients put it */
    mf_slot_t *slots = s->slot[shard];
    mf__slot_add(&slots[b], 1);
    mf__slot_add(&slots[f->nbuckets + 1], v);
}

static double mf__sum_slot(const mf_metric_t *s, size_t i)
{
    unsigned shards = s->family->registry->shards;
    double sum = 0;
    for (unsigned k = 0; k < shards; k++)
        sum += atomic_load_explicit(&s->slot[k][i], memory_order_relaxed);
    return sum;
}

double mf_metric_value(const mf_metric_t *s)
{
    const mf_metric_family_t *f = s->family;
    if (f->type != MF_METRIC_HISTOGRAM)
        return mf__sum_slot(s, 0);
    double count = 0;
    for (size_t b = 0; b <= f->nbuckets; b++)
        count += mf__sum_slot(s, b);
    return count;
}

double mf_metric_sum(const mf_metric_t *s)
{
    const mf_metric_family_t *f = s->family;
    return f->type == MF_METRIC_HISTOGRAM ? mf__sum_slot(s, f->nbuckets + 1)
                                          : mf__sum_slot(s, 0);
}

/* ---- the exposition ---------------------------------------------------- */

/* Integers in full, other numbers in the fewest digits that read back the
 * same; the format's own words for infinities and NaN. */
static void mf__put_number(mf_text_t *t, double v)
{
    char buf[40];
    if (isnan(v)) {
        mf__puts(t, "NaN");
        return;
    }
    if (isinf(v)) {
        mf__puts(t, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(buf, sizeof buf, "%.0f", v);
    } else {
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
    mf__puts(t, buf);
}

/* name[suffix]{labels[,extra]} value\n */
static void mf__put_sample(mf_text_t *t, const mf_metric_t *s,
                           const char *suffix, const char *extra, double v)
{
    mf__puts(t, s->family->name);
    mf__puts(t, suffix);
    bool any = s->labels[0] || extra;
    if (any)
        mf__put(t, "{", 1);
    mf__puts(t, s->labels);
    if (extra) {
        if (s->labels[0])
            mf__put(t, ",", 1);
        mf__puts(t, extra);
    }
    if (any)
        mf__put(t, "}", 1);
    mf__put(t, " ", 1);
    mf__put_number(t, v);
    mf__put(t, "\n", 1);
}

static void mf__put_histogram(mf_text_t *t, const mf_metric_t *s)
{
    const mf_metric_family_t *f = s->family;
    double cumulative = 0;
    char le[64];
    for (size_t b = 0; b <= f->nbuckets; b++) {
        cumulative += mf__sum_slot(s, b);
        mf_text_t bound = {0};
        if (b < f->nbuckets)
            mf__put_number(&bound, f->bound[b]);
        snprintf(le, sizeof le, "le=\"%s\"",
                 b < f->nbuckets ? (bound.p ? bound.p : "") : "+Inf");
        t->failed |= b < f->nbuckets && bound.failed;
        mf_free(bound.p);
        mf__put_sample(t, s, "_bucket", le, cumulative);
    }
    mf__put_sample(t, s, "_sum", NULL, mf__sum_slot(s, f->nbuckets + 1));
    mf__put_sample(t, s, "_count", NULL, cumulative);
}

static void mf__put_family(mf_text_t *t, const mf_metric_family_t *f)
{
    if (!f->first)
        return;
    mf__puts(t, "# HELP ");
    mf__puts(t, f->name);
    mf__put(t, " ", 1);
    mf__put_escaped(t, f->help, false);
    mf__puts(t, "\n# TYPE ");
    mf__puts(t, f->name);
    mf__put(t, " ", 1);
    mf__puts(t, mf__type_name(f->type));
    mf__put(t, "\n", 1);
    for (const mf_metric_t *s = f->first; s; s = s->next) {
        if (f->type == MF_METRIC_HISTOGRAM)
            mf__put_histogram(t, s);
        else
            mf__put_sample(t, s, "", NULL, mf__sum_slot(s, 0));
    }
}

char *mf_metrics_text(mf_metrics_t *m, size_t *len)
{
    mf_text_t t = {0};
    mf__put(&t, "", 0);
    pthread_mutex_lock(&m->mu);
    for (const mf_metric_family_t *f = m->first; f; f = f->next)
        mf__put_family(&t, f);
    pthread_mutex_unlock(&m->mu);
    if (t.failed) {
        mf_free(t.p);
        return NULL;
    }
    *len = t.len;
    return t.p;
}
