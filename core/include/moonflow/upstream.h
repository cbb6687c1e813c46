/*
 * moonflow/upstream.h — named upstream groups: several servers behind one
 * name, a balancing policy, passive and active health, retries that move
 * to another server. Every client resolves a host through it: a URL whose
 * host is a group's name (http://api/path, redis://cache/0, a stream's
 * connect) asks the group for a server per attempt, then connects to that
 * server's own endpoint in the loop's pool (moonflow/endpoint.h).
 *
 *   mf_upstream_conf_t conf;
 *   mf_upstream_conf_init(&conf);
 *   conf.policy = MF_UPSTREAM_CONSISTENT_HASH;
 *   mf_upstream_server_conf_t servers[] = {{"10.0.0.1:80", 5, false},
 *                                          {"10.0.0.2:80", 1, true}};
 *   mf_upstream_define("api", &conf, servers, 2, err, sizeof err);
 *
 *   mf_upstream_t *up = mf_upstream_find("api");     // NULL: not a group
 *   mf_upstream_try_t t;
 *   mf_upstream_try_init(&t, up);
 *   if (mf_upstream_pick(&t, key, key_len) == 0)      // t.host, t.port
 *       ... connect ...; mf_upstream_done(&t, ok, latency_ns);
 *   // failed: mf_upstream_pick(&t, ...) again picks another server
 *
 * Policies: weighted round robin (nginx's smooth sequence), weighted
 * random, least connections (in flight over weight), consistent hashing
 * on a ketama ring (libketama's placement: 40 * servers * weight share MD5
 * digests of "host:port-i", four points each; a key hashes to the first
 * four bytes of its MD5, little-endian; the first point at or after it
 * wins), EWMA of latency (two random choices, the lower latency times
 * connections in flight), manual (the key names the server: "host:port"
 * or its 1-based position). Backup servers serve only when no primary is
 * live.
 *
 * Health. Passive: max_fails failures within fail_timeout take a server
 * out for fail_timeout; then one request probes it (a success takes it
 * back, a failure out again). Active (conf.health.type): one checker
 * thread per process probes every server of every group each interval
 * (an HTTP request with expected statuses, a TCP connect, Redis PING, the
 * MySQL server's greeting), rise successes take a server back, fall
 * failures take it out. Each change is logged to stderr and counted.
 *
 * Threads: groups are process-wide; every call may be made from any
 * thread. Picking takes no lock (atomics, and an immutable set of servers
 * swapped whole when servers change); defining and changing take the
 * registry's lock. Ownership: the registry owns the groups and their
 * servers until mf_upstream_shutdown (at exit); a server's strings live as
 * long as its group. A try belongs to its caller.
 */
#ifndef MOONFLOW_UPSTREAM_H
#define MOONFLOW_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "loop.h"

MF_EXTERN_C_BEGIN

#define MF_UPSTREAM_NAME_MAX 63
#define MF_UPSTREAM_HOST_MAX 255
#define MF_UPSTREAM_MAX_SERVERS 256
#define MF_UPSTREAM_MAX_TRIES 32
#define MF_UPSTREAM_MAX_STATUSES 8

typedef enum mf_upstream_policy {
    MF_UPSTREAM_ROUND_ROBIN, /* weighted */
    MF_UPSTREAM_RANDOM,      /* weighted */
    MF_UPSTREAM_LEAST_CONN,
    MF_UPSTREAM_CONSISTENT_HASH,
    MF_UPSTREAM_EWMA,
    MF_UPSTREAM_MANUAL
} mf_upstream_policy_t;

typedef enum mf_upstream_check {
    MF_UPSTREAM_CHECK_NONE,
    MF_UPSTREAM_CHECK_TCP,   /* a connect */
    MF_UPSTREAM_CHECK_HTTP,  /* GET path, an expected status */
    MF_UPSTREAM_CHECK_REDIS, /* PING → +PONG (or -NOAUTH: it answers) */
    MF_UPSTREAM_CHECK_MYSQL  /* the server's greeting, not an error packet */
} mf_upstream_check_t;

typedef struct mf_upstream_health_conf {
    mf_upstream_check_t type;
    uint32_t interval_ms; /* between probes of one server */
    uint32_t timeout_ms;  /* one probe */
    unsigned rise;        /* successes in a row that take a server back */
    unsigned fall;        /* failures in a row that take it out */
    char path[256];       /* HTTP: the request's target */
    char host[MF_UPSTREAM_HOST_MAX + 1]; /* HTTP: Host ("": the server's) */
    /* HTTP: statuses that mean healthy; none: 200-399 */
    int statuses[MF_UPSTREAM_MAX_STATUSES];
    unsigned nstatuses;
} mf_upstream_health_conf_t;

typedef struct mf_upstream_conf {
    mf_upstream_policy_t policy;
    unsigned max_fails;       /* 0: no passive health */
    uint32_t fail_timeout_ms; /* the window, and the time out */
    unsigned tries; /* attempts per request, each on another server; 0: one
                       per server (nginx's proxy_next_upstream_tries 0) */
    uint32_t tries_timeout_ms; /* all attempts of a request; 0: none */
    mf_upstream_health_conf_t health;
} mf_upstream_conf_t;

typedef struct mf_upstream_server_conf {
    const char *address; /* "host:port", "[v6]:port" */
    unsigned weight;     /* 0: 1 */
    bool backup;
} mf_upstream_server_conf_t;

typedef struct mf_upstream mf_upstream_t;
typedef struct mf_upstream_server mf_upstream_server_t;

/* One request's attempts: which servers it tried, where it is now. */
typedef struct mf_upstream_try {
    mf_upstream_t *up;
    mf_upstream_server_t *server; /* the current attempt's; NULL before */
    const char *host;             /* the current attempt's server */
    uint16_t port;
    unsigned attempts;
    mf_upstream_server_t *tried[MF_UPSTREAM_MAX_TRIES];
    uint64_t started_ns; /* the first pick (for tries_timeout_ms) */
    uint64_t attempt_ns; /* the current attempt's pick (its latency) */
    char own_host[MF_UPSTREAM_HOST_MAX + 1]; /* a balancer's non-member */
} mf_upstream_try_t;

/* A loop's balancer for a group (OpenResty's balancer_by_lua): picks the
 * attempt's server with mf_upstream_pick_address (any address) or
 * mf_upstream_pick (the policy). 0, or a negative MF_E* code the request
 * fails with. Runs on the loop's thread, once per attempt. */
typedef int (*mf_upstream_balancer_fn)(void *ud, mf_upstream_try_t *t,
                                       const char *key, size_t key_len);

typedef struct mf_upstream_server_stats {
    const char *group;
    const char *address;
    const char *state; /* "up", "down" (passive), "unhealthy" (active),
                          "probing", "draining" */
    unsigned weight;
    bool backup;
    unsigned fails;    /* in the current window */
    unsigned active;   /* requests in flight, every thread */
    uint64_t requests; /* picked */
    uint64_t failures; /* reported failed */
    uint64_t downs;    /* times taken out */
    double latency_ms; /* the EWMA of reported latencies */
} mf_upstream_server_stats_t;
typedef void (*mf_upstream_stats_fn)(void *ud,
                                     const mf_upstream_server_stats_t *st);

/* nginx's defaults: round robin, max_fails 1, fail_timeout 10 s, no
 * active check (its defaults when asked: every 2 s, 1 s timeout, rise 2,
 * fall 3, GET /). Inline: a config reader needs no registry. */
static inline void mf_upstream_conf_init(mf_upstream_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf)); /* padding too: definitions compare */
    conf->policy = MF_UPSTREAM_ROUND_ROBIN;
    conf->max_fails = 1;
    conf->fail_timeout_ms = 10000;
    conf->health.interval_ms = 2000;
    conf->health.timeout_ms = 1000;
    conf->health.rise = 2;
    conf->health.fall = 3;
    conf->health.path[0] = '/';
}
/* Defines name, or redefines it (same servers keep their state; a server
 * no longer listed leaves). 0, or MF_EINVAL with why in err (a bad
 * address, weight, policy or name). Safe to call from every worker with
 * the same arguments: an unchanged definition changes nothing. */
MF_API int mf_upstream_define(const char *name, const mf_upstream_conf_t *conf,
                              const mf_upstream_server_conf_t *servers,
                              size_t nservers, char *err, size_t cap);
/* The group of that name, or NULL: no lock, one atomic load when no group
 * exists (a client's cost for an ordinary host). len: the name's length,
 * or MF_UPSTREAM_NUL for a NUL-terminated name. */
#define MF_UPSTREAM_NUL ((size_t)-1)
MF_API mf_upstream_t *mf_upstream_find(const char *name, size_t len);
MF_API const char *mf_upstream_name(const mf_upstream_t *up);
MF_API const mf_upstream_conf_t *mf_upstream_conf(const mf_upstream_t *up);

/* Run-time changes: 0, MF_ENOENT (no such server), MF_EEXIST (added
 * twice) or MF_EINVAL (a bad address). A drained server takes no new
 * request; the ones in flight finish. */
MF_API int mf_upstream_add(mf_upstream_t *up,
                           const mf_upstream_server_conf_t *server);
MF_API int mf_upstream_remove(mf_upstream_t *up, const char *address);
MF_API int mf_upstream_set_weight(mf_upstream_t *up, const char *address,
                                  unsigned weight);
MF_API int mf_upstream_drain(mf_upstream_t *up, const char *address,
                             bool drain);

static inline void mf_upstream_try_init(mf_upstream_try_t *t, mf_upstream_t *up)
{
    t->up = up;
    t->server = NULL;
    t->host = NULL;
    t->port = 0;
    t->attempts = 0;
    t->started_ns = 0;
}
/* Picks the server of the next attempt (never one this try used), by the
 * group's policy over key (the hash key, or manual's server; may be
 * NULL). 0: t->host and t->port are set and the server counts one more in
 * flight; MF_ENOUPSTREAM: no live server is left (or the tries are spent:
 * MF_ETIMEDOUT when their time is). */
MF_API int mf_upstream_pick(mf_upstream_try_t *t, const char *key,
                            size_t key_len);
/* Takes host:port (a balancer's answer) as the next attempt's server:
 * passive health and counters apply when it is one of the group's; any
 * other address is copied into the try and used as it is. 0, or
 * MF_ENOUPSTREAM when it is a member another thread is probing. */
MF_API int mf_upstream_pick_address(mf_upstream_try_t *t, const char *host,
                                    uint16_t port);
/* The current attempt ended: ok false counts a failure against its server
 * (passive health), latency_ns feeds the EWMA. Harmless when no attempt is
 * current. */
MF_API void mf_upstream_done(mf_upstream_try_t *t, bool ok,
                             uint64_t latency_ns);
/* The current attempt ended with no verdict on its server (canceled, or a
 * stale keep-alive connection): only its count in flight is given back. */
MF_API void mf_upstream_abandon(mf_upstream_try_t *t);
/* Whether the try may make another attempt (tries and their time left). */
MF_API bool mf_upstream_may_retry(const mf_upstream_try_t *t);

/* Consistent hashing: the server key belongs to while it is live (the
 * owner of its point on the primaries' ring), health aside: keys with the
 * same home go to one server. An identity to compare, not to use. NULL
 * when the group's policy is another. */
MF_API const void *mf_upstream_key_home(const mf_upstream_t *up,
                                        const char *key, size_t key_len);

/* Sets loop's balancer for up; ud is fn's. fn NULL clears it: any when ud
 * is NULL, else only the one set with that ud. Loop thread. */
MF_API void mf_upstream_set_balancer(mf_loop_t *loop, mf_upstream_t *up,
                                     mf_upstream_balancer_fn fn, void *ud);
/* The next attempt's server: loop's balancer for t->up if it has one,
 * else mf_upstream_pick. What clients call. */
MF_API int mf_upstream_balance(mf_loop_t *loop, mf_upstream_try_t *t,
                               const char *key, size_t key_len);

/* Every server of every group (up NULL) or of one group. */
MF_API void mf_upstream_stats(const mf_upstream_t *up, mf_upstream_stats_fn fn,
                              void *ud);
/* The groups' names, for a walk: calls fn with each group. */
MF_API void mf_upstream_each(void (*fn)(void *ud, mf_upstream_t *up), void *ud);
/* Stops the checker and frees every group (at exit, after the workers). */
MF_API void mf_upstream_shutdown(void);

MF_EXTERN_C_END

#endif /* MOONFLOW_UPSTREAM_H */
