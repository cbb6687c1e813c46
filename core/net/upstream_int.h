/*
 * upstream_int.h — the records behind moonflow/upstream.h. Internal. The
 * files:
 *
 *   upstream.c        the registry: defining, finding, changing, stats
 *   upstream_set.c    a group's immutable server set: tiers, the round
 *                     robin sequence, the ketama ring
 *   upstream_pick.c   picking a server per attempt, passive health
 *   upstream_check.c  the active checker: one thread and loop per process
 *
 * Ownership: the registry owns every group; a group owns every server
 * record it ever had (a removed server stays, marked, until the group is
 * freed, so a try may keep pointing at it) and its sets (the current one
 * and, for a grace period, the ones replaced: a pick holds a set only for
 * the call, never across a loop iteration).
 */
#ifndef MF_UPSTREAM_INT_H
#define MF_UPSTREAM_INT_H

#include <stdatomic.h>

#include "moonflow/upstream.h"
#include "moonflow/stream.h"

/* A server's passive state (mf_upstream_server_t.pstate). */
enum { MF_UP_LIVE, MF_UP_DOWN, MF_UP_PROBING };

struct mf_upstream_server {
    mf_upstream_t *up;
    struct mf_upstream_server *next; /* the group's records */
    char address[MF_UPSTREAM_HOST_MAX + 8];
    char host[MF_UPSTREAM_HOST_MAX + 1];
    uint16_t port;
    /* Shared by every thread: */
    _Atomic unsigned weight;
    _Atomic bool backup;
    _Atomic bool removed;
    _Atomic bool draining;
    _Atomic bool healthy; /* the active checker's verdict (true without) */
    _Atomic int pstate;
    _Atomic unsigned fails;
    _Atomic uint64_t window_ms;     /* the failures' window began */
    _Atomic uint64_t down_until_ms; /* DOWN: until; PROBING: probe's end */
    _Atomic unsigned active;        /* in flight */
    _Atomic uint64_t requests, failures, downs;
    _Atomic uint64_t ewma_ns;
    /* The checker's own (its thread only): */
    unsigned ok_run, fail_run;
    uint64_t next_check_ms;
    bool checking;
};

/* A point of the ketama ring. */
typedef struct mf_upstream_point {
    uint32_t value;
    uint32_t server; /* index in the tier */
} mf_upstream_point_t;

/* The primaries, or the backups, of a set. */
typedef struct mf_upstream_tier {
    mf_upstream_server_t **servers;
    size_t n;
    uint32_t *sequence; /* smooth weighted round robin, one turn */
    size_t sequence_len;
    mf_upstream_point_t *ring; /* sorted by value */
    size_t npoints;
    _Atomic uint64_t turn; /* the round robin's position */
} mf_upstream_tier_t;

/* What a pick reads: swapped whole when servers or the conf change. */
typedef struct mf_upstream_set {
    mf_upstream_conf_t conf;
    mf_upstream_tier_t primary, backup;
    struct mf_upstream_set *retired_next;
    uint64_t retired_ms;
} mf_upstream_set_t;

struct mf_upstream {
    char name[MF_UPSTREAM_NAME_MAX + 1];
    _Atomic(mf_upstream_set_t *) set;
    mf_upstream_set_t *retired;    /* replaced sets, newest first */
    mf_upstream_server_t *servers; /* every record, listed or not */
};

/* upstream.c */
uint64_t mf__upstream_now_ms(void);
/* "upstream 'api' server 10.0.0.1:80 down (3 failures)" on stderr. */
void mf__upstream_log(const mf_upstream_server_t *s, const char *what,
                      const char *why);
/* The groups, for the checker: fn for each under the registry's lock. */
void mf__upstream_walk_locked(void (*fn)(void *ud, mf_upstream_t *up),
                              void *ud);

/* upstream_set.c */
/* A set of conf over the listed (not removed) servers of up; NULL and err
 * when the weights cannot make a sequence. */
mf_upstream_set_t *mf__upstream_set_build(mf_upstream_t *up,
                                          const mf_upstream_conf_t *conf,
                                          char *err, size_t cap);
void mf__upstream_set_free(mf_upstream_set_t *set);
/* libketama's hash of a key: the first four bytes of its MD5, LE. */
uint32_t mf__upstream_ketama_hash(const char *key, size_t len);
/* The first point at or after h, wrapping: its index in tier->ring. */
size_t mf__upstream_ring_find(const mf_upstream_tier_t *tier, uint32_t h);

/* upstream_check.c */
/* Starts the checker (once) when a group asks for active checks. */
void mf__upstream_check_start(void);
void mf__upstream_check_stop(void);

#endif /* MF_UPSTREAM_INT_H */
