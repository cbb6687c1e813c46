/*
 * moonflow/metrics.h — metrics in Prometheus's model: counters, gauges and
 * histograms with labels, written by many threads at once without a lock
 * or an atomic read-modify-write, summed when scraped, and written out in
 * the Prometheus text exposition format (version 0.0.4).
 *
 * Model: a registry holds families (a name, a help text, a type, label
 * names and, for a histogram, its bucket bounds); a family holds series,
 * one per tuple of label values. A registry has a fixed number of shards,
 * one per writing thread (a worker loop): each series has its own slots in
 * every shard, and only the shard's thread writes them (a relaxed load and
 * store: a plain add, no lock prefix). A scrape reads every shard and adds
 * them up, so a gauge is the sum of what each writer set.
 *
 * Threads: families and series are made under the registry's mutex (a
 * series once per label tuple; keep its handle: looking one up is not a
 * hot-path call); mf_metric_add/_set/_observe take no lock and may run on
 * their shard's thread only; mf_metric_value and mf_metrics_text run on any
 * thread (the text holds the mutex while it is written, not the writers).
 *
 * Ownership: the registry owns its families, series and shard memory,
 * freed together by mf_metrics_free after every writer has stopped;
 * handles stay valid until then. Strings given to it are copied.
 */
#ifndef MOONFLOW_METRICS_H
#define MOONFLOW_METRICS_H

#include <stddef.h>

#include "common.h"

MF_EXTERN_C_BEGIN

typedef struct mf_metrics mf_metrics_t;
typedef struct mf_metric_family mf_metric_family_t;
typedef struct mf_metric mf_metric_t; /* one series */

typedef enum mf_metric_type {
    MF_METRIC_COUNTER,
    MF_METRIC_GAUGE,
    MF_METRIC_HISTOGRAM
} mf_metric_type_t;

#define MF_METRIC_MAX_LABELS 8
#define MF_METRIC_MAX_BUCKETS 32
/* Past this many series a family makes no more (MF_ENOSPC): a label whose
 * values are unbounded (a raw path, a user id) would eat the memory. */
#define MF_METRIC_MAX_SERIES 10000

typedef struct mf_metric_spec {
    const char *name; /* [a-zA-Z_:][a-zA-Z0-9_:]* */
    const char *help; /* any text; NULL: none */
    mf_metric_type_t type;
    const char *const *labels; /* [a-zA-Z_][a-zA-Z0-9_]*, no "__" prefix */
    size_t nlabels;
    /* A histogram's upper bounds, finite and increasing (+Inf is added);
     * NULL: Prometheus's defaults, 0.005 to 10 (seconds). */
    const double *buckets;
    size_t nbuckets;
} mf_metric_spec_t;

/* A registry written by `shards` threads (>= 1). NULL: no memory. */
MF_API mf_metrics_t *mf_metrics_create(unsigned shards);
MF_API void mf_metrics_free(mf_metrics_t *m);
MF_API unsigned mf_metrics_shards(const mf_metrics_t *m);

/* The family named spec->name, made on first use; the same name again
 * with the same type, labels and buckets gives the same family (each
 * worker may declare it). 0, or MF_EINVAL with the reason in why (a bad
 * name, label or bucket list; a family of that name with another shape),
 * or MF_ENOMEM. */
MF_API int mf_metrics_family(mf_metrics_t *m, const mf_metric_spec_t *spec,
                             mf_metric_family_t **out, char *why,
                             size_t whylen);
MF_API mf_metric_type_t mf_metric_family_type(const mf_metric_family_t *f);
MF_API size_t mf_metric_family_labels(const mf_metric_family_t *f);

/* The series of family f for the n label values (n == the family's label
 * count), made on first use with every slot 0. 0; MF_EINVAL (a wrong
 * count, a NULL value); MF_ENOSPC (MF_METRIC_MAX_SERIES reached);
 * MF_ENOMEM. */
MF_API int mf_metric_series(mf_metric_family_t *f, const char *const *values,
                            size_t n, mf_metric_t **out);

/* A counter or gauge series: adds v (a counter's caller passes v >= 0). */
MF_API void mf_metric_add(mf_metric_t *s, unsigned shard, double v);
/* This shard's part becomes v: a gauge's, or a counter's whose writer
 * keeps the running total itself (a count read from elsewhere). */
MF_API void mf_metric_set(mf_metric_t *s, unsigned shard, double v);
/* A histogram series: one observation. */
MF_API void mf_metric_observe(mf_metric_t *s, unsigned shard, double v);

/* The sum over the shards: a counter's or gauge's value, a histogram's
 * count (its sum with mf_metric_sum). */
MF_API double mf_metric_value(const mf_metric_t *s);
MF_API double mf_metric_sum(const mf_metric_t *s);

/* Every family with at least one series, in the order they were made, as
 * the text Prometheus scrapes (NUL-terminated, *len bytes; release with
 * mf_free). NULL: no memory. */
MF_API char *mf_metrics_text(mf_metrics_t *m, size_t *len);

MF_EXTERN_C_END

#endif /* MOONFLOW_METRICS_H */
