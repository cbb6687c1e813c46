/*
 * upstream.c — the registry of upstream groups (moonflow/upstream.h):
 * defining, finding, run-time changes, stats.
 *
 * Finding takes no lock: the registry publishes an immutable directory of
 * its groups through one atomic pointer, replaced whole when a group is
 * added. Groups live until mf_upstream_shutdown, so a directory replaced
 * is kept too (a group is added a bounded number of times: once per name).
 * Everything that writes takes the registry's mutex.
 *
 * May call: upstream_set.c, upstream_check.c, libc. Knows no protocol.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moonflow/error.h"
#include "net/net.h"
#include "net/upstream_int.h"

/* A set replaced stays this long: longer than any pick holds one. */
#define MF_UPSTREAM_SET_GRACE_MS 10000

typedef struct mf_upstream_dir {
    struct mf_upstream_dir *older; /* replaced directories */
    size_t n;
    mf_upstream_t *groups[];
} mf_upstream_dir_t;

static pthread_mutex_t mf__up_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(mf_upstream_dir_t *) mf__up_dir;

uint64_t mf__upstream_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void mf__upstream_log(const mf_upstream_server_t *s, const char *what,
                      const char *why)
{
    fprintf(stderr, "moonflow: upstream '%s' server %s %s%s%s%s\n", s->up->name,
            s->address, what, why ? " (" : "", why ? why : "", why ? ")" : "");
}

/* ---- finding ------------------------------------------------------------ */

mf_upstream_t *mf_upstream_find(const char *name, size_t len)
{
    const mf_upstream_dir_t *dir =
        atomic_load_explicit(&mf__up_dir, memory_order_acquire);
    if (MF_LIKELY(!dir))
        return NULL;
    if (len == MF_UPSTREAM_NUL)
        len = strlen(name);
    for (size_t i = 0; i < dir->n; i++) {
        mf_upstream_t *up = dir->groups[i];
        if (strncmp(up->name, name, len) == 0 && up->name[len] == '\0')
            return up;
    }
    return NULL;
}

const char *mf_upstream_name(const mf_upstream_t *up)
{
    return up->name;
}

const mf_upstream_conf_t *mf_upstream_conf(const mf_upstream_t *up)
{
    return &atomic_load(&((mf_upstream_t *)up)->set)->conf;
}

void mf__upstream_walk_locked(void (*fn)(void *ud, mf_upstream_t *up), void *ud)
{
    pthread_mutex_lock(&mf__up_lock);
    const mf_upstream_dir_t *dir = atomic_load(&mf__up_dir);
    for (size_t i = 0; dir && i < dir->n; i++)
        fn(ud, dir->groups[i]);
    pthread_mutex_unlock(&mf__up_lock);
}

void mf_upstream_each(void (*fn)(void *ud, mf_upstream_t *up), void *ud)
{
    const mf_upstream_dir_t *dir = atomic_load(&mf__up_dir);
    for (size_t i = 0; dir && i < dir->n; i++)
        fn(ud, dir->groups[i]);
}

/* ---- servers ------------------------------------------------------------ */

static int mf__parse_address(const char *address, char *host, uint16_t *port,
                             char *err, size_t cap)
{
    char name[MF_DNS_MAX_HOST + 1];
    *port = 0;
    size_t n = strlen(address);
    if (n == 0 || n > MF_UPSTREAM_HOST_MAX ||
        mf__net_parse_hostport(address, n, name, port) < 0 || *port == 0) {
        snprintf(err, cap, "server '%s' is not host:port", address);
        return MF_EINVAL;
    }
    snprintf(host, MF_UPSTREAM_HOST_MAX + 1, "%s", name);
    return 0;
}

static mf_upstream_server_t *mf__server_of(const mf_upstream_t *up,
                                           const char *address)
{
    for (mf_upstream_server_t *s = up->servers; s; s = s->next)
        if (strcmp(s->address, address) == 0)
            return s;
    return NULL;
}

static void mf__server_reset(mf_upstream_server_t *s)
{
    atomic_store(&s->removed, false);
    atomic_store(&s->draining, false);
    atomic_store(&s->healthy, true);
    atomic_store(&s->pstate, MF_UP_LIVE);
    atomic_store(&s->fails, 0);
}

/* The record of address in up: found (listed again) or made. */
static mf_upstream_server_t *mf__server_get(mf_upstream_t *up,
                                            const mf_upstream_server_conf_t *sc,
                                            char *err, size_t cap)
{
    char host[MF_UPSTREAM_HOST_MAX + 1];
    uint16_t port;
    if (mf__parse_address(sc->address, host, &port, err, cap) < 0)
        return NULL;
    if (sc->weight > 1000) {
        snprintf(err, cap, "server '%s': weight %u is over 1000", sc->address,
                 sc->weight);
        return NULL;
    }
    mf_upstream_server_t *s = mf__server_of(up, sc->address);
    if (!s) {
        s = mf_xcalloc(1, sizeof(*s));
        s->up = up;
        snprintf(s->address, sizeof s->address, "%s", sc->address);
        snprintf(s->host, sizeof s->host, "%s", host);
        s->port = port;
        mf__server_reset(s);
        s->next = up->servers;
        up->servers = s;
    } else if (atomic_load(&s->removed)) {
        mf__server_reset(s);
    }
    atomic_store(&s->weight, sc->weight ? sc->weight : 1);
    atomic_store(&s->backup, sc->backup);
    return s;
}

/* ---- sets --------------------------------------------------------------- */

static void mf__free_retired(mf_upstream_t *up, bool all)
{
    uint64_t now = mf__upstream_now_ms();
    mf_upstream_set_t **p = &up->retired;
    while (*p) {
        mf_upstream_set_t *set = *p;
        if (all || now - set->retired_ms > MF_UPSTREAM_SET_GRACE_MS) {
            *p = set->retired_next;
            mf__upstream_set_free(set);
        } else {
            p = &set->retired_next;
        }
    }
}

/* Builds and publishes up's set from its records and conf. Locked. */
static int mf__publish(mf_upstream_t *up, const mf_upstream_conf_t *conf,
                       char *err, size_t cap)
{
    mf_upstream_set_t *set = mf__upstream_set_build(up, conf, err, cap);
    if (!set)
        return MF_EINVAL;
    mf_upstream_set_t *old = atomic_exchange(&up->set, set);
    if (old) {
        old->retired_ms = mf__upstream_now_ms();
        old->retired_next = up->retired;
        up->retired = old;
    }
    mf__free_retired(up, false);
    if (conf->health.type != MF_UPSTREAM_CHECK_NONE)
        mf__upstream_check_start();
    return 0;
}

/* ---- defining ----------------------------------------------------------- */

static int mf__check_conf(const mf_upstream_conf_t *conf, size_t nservers,
                          char *err, size_t cap)
{
    if ((unsigned)conf->policy > MF_UPSTREAM_MANUAL) {
        snprintf(err, cap, "policy %d is unknown", (int)conf->policy);
        return MF_EINVAL;
    }
    if (nservers > MF_UPSTREAM_MAX_SERVERS) {
        snprintf(err, cap, "%zu servers (at most %d)", nservers,
                 MF_UPSTREAM_MAX_SERVERS);
        return MF_EINVAL;
    }
    if (conf->tries > MF_UPSTREAM_MAX_TRIES) {
        snprintf(err, cap, "tries %u (at most %d)", conf->tries,
                 MF_UPSTREAM_MAX_TRIES);
        return MF_EINVAL;
    }
    const mf_upstream_health_conf_t *h = &conf->health;
    if (h->type != MF_UPSTREAM_CHECK_NONE &&
        (!h->interval_ms || !h->timeout_ms || !h->rise || !h->fall)) {
        snprintf(err, cap,
                 "health: interval, timeout, rise and fall must "
                 "be positive");
        return MF_EINVAL;
    }
    return 0;
}

static bool mf__name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > MF_UPSTREAM_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(name[i] == '-' || name[i] == '_' || name[i] == '.' ||
              (name[i] >= '0' && name[i] <= '9') ||
              (name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= 'A' && name[i] <= 'Z')))
            return false;
    return true;
}

/* Whether up already is exactly this definition (every worker defines). */
static bool mf__same_definition(mf_upstream_t *up,
                                const mf_upstream_conf_t *conf,
                                const mf_upstream_server_conf_t *servers,
                                size_t n)
{
    const mf_upstream_set_t *set = atomic_load(&up->set);
    if (memcmp(&set->conf, conf, sizeof(*conf)) != 0 ||
        set->primary.n + set->backup.n != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const mf_upstream_server_t *s = mf__server_of(up, servers[i].address);
        if (!s || atomic_load(&s->removed) ||
            atomic_load(&s->weight) !=
                (servers[i].weight ? servers[i].weight : 1) ||
            atomic_load(&s->backup) != servers[i].backup)
            return false;
    }
    return true;
}

/* Publishes up, fully built, in a new directory. */
static void mf__group_add(mf_upstream_t *up)
{
    mf_upstream_dir_t *old = atomic_load(&mf__up_dir);
    size_t n = old ? old->n : 0;
    mf_upstream_dir_t *dir =
        mf_xmalloc(sizeof(*dir) + (n + 1) * sizeof(dir->groups[0]));
    dir->older = old;
    dir->n = n + 1;
    if (n)
        memcpy(dir->groups, old->groups, n * sizeof(dir->groups[0]));
    dir->groups[n] = up;
    atomic_store_explicit(&mf__up_dir, dir, memory_order_release);
}

static void mf__group_free(mf_upstream_t *up);

static int mf__check_servers(const mf_upstream_server_conf_t *servers, size_t n,
                             char *err, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        char host[MF_UPSTREAM_HOST_MAX + 1];
        uint16_t port;
        if (mf__parse_address(servers[i].address, host, &port, err, cap) < 0)
            return MF_EINVAL;
        if (servers[i].weight > 1000) {
            snprintf(err, cap, "server '%s': weight %u is over 1000",
                     servers[i].address, servers[i].weight);
            return MF_EINVAL;
        }
    }
    return 0;
}

static int mf__define_locked(const char *name, const mf_upstream_conf_t *conf,
                             const mf_upstream_server_conf_t *servers,
                             size_t nservers, char *err, size_t cap)
{
    mf_upstream_t *up = mf_upstream_find(name, strlen(name));
    if (up && mf__same_definition(up, conf, servers, nservers))
        return 0;
    if (mf__check_servers(servers, nservers, err, cap) < 0)
        return MF_EINVAL;
    bool fresh = !up;
    if (fresh) {
        up = mf_xcalloc(1, sizeof(*up));
        snprintf(up->name, sizeof up->name, "%s", name);
    }
    for (mf_upstream_server_t *s = up->servers; s; s = s->next)
        atomic_store(&s->removed, true);
    for (size_t i = 0; i < nservers; i++)
        mf__server_get(up, &servers[i], err, cap);
    int rc = mf__publish(up, conf, err, cap);
    if (fresh && rc == 0)
        mf__group_add(up);
    else if (fresh)
        mf__group_free(up);
    return rc;
}

int mf_upstream_define(const char *name, const mf_upstream_conf_t *conf,
                       const mf_upstream_server_conf_t *servers,
                       size_t nservers, char *err, size_t cap)
{
    if (!mf__name_ok(name)) {
        snprintf(err, cap,
                 "upstream name '%s' must be 1 to %d of A-Z a-z 0-9 - _ .",
                 name, MF_UPSTREAM_NAME_MAX);
        return MF_EINVAL;
    }
    int rc = mf__check_conf(conf, nservers, err, cap);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&mf__up_lock);
    rc = mf__define_locked(name, conf, servers, nservers, err, cap);
    pthread_mutex_unlock(&mf__up_lock);
    return rc;
}

/* ---- run-time changes --------------------------------------------------- */

static int mf__republish(mf_upstream_t *up)
{
    char err[160];
    mf_upstream_conf_t conf = atomic_load(&up->set)->conf;
    return mf__publish(up, &conf, err, sizeof err);
}

int mf_upstream_add(mf_upstream_t *up, const mf_upstream_server_conf_t *sc)
{
    char err[160];
    pthread_mutex_lock(&mf__up_lock);
    const mf_upstream_server_t *s = mf__server_of(up, sc->address);
    int rc = s && !atomic_load(&s->removed) ? MF_EEXIST : 0;
    if (rc == 0)
        rc = mf__server_get(up, sc, err, sizeof err) ? mf__republish(up)
                                                     : MF_EINVAL;
    pthread_mutex_unlock(&mf__up_lock);
    return rc;
}

/* Applies change to the listed server at address, then republishes. */
static int mf__change(mf_upstream_t *up, const char *address,
                      void (*change)(mf_upstream_server_t *s, unsigned arg),
                      unsigned arg, bool republish)
{
    pthread_mutex_lock(&mf__up_lock);
    mf_upstream_server_t *s = mf__server_of(up, address);
    int rc = MF_ENOENT;
    if (s && !atomic_load(&s->removed)) {
        change(s, arg);
        rc = republish ? mf__republish(up) : 0;
    }
    pthread_mutex_unlock(&mf__up_lock);
    return rc;
}

static void mf__mark_removed(mf_upstream_server_t *s, unsigned arg)
{
    (void)arg;
    atomic_store(&s->removed, true);
}

static void mf__set_weight(mf_upstream_server_t *s, unsigned weight)
{
    atomic_store(&s->weight, weight ? weight : 1);
}

static void mf__set_draining(mf_upstream_server_t *s, unsigned drain)
{
    atomic_store(&s->draining, drain != 0);
}

int mf_upstream_remove(mf_upstream_t *up, const char *address)
{
    return mf__change(up, address, mf__mark_removed, 0, true);
}

int mf_upstream_set_weight(mf_upstream_t *up, const char *address,
                           unsigned weight)
{
    if (weight > 1000)
        return MF_EINVAL;
    return mf__change(up, address, mf__set_weight, weight, true);
}

int mf_upstream_drain(mf_upstream_t *up, const char *address, bool drain)
{
    return mf__change(up, address, mf__set_draining, drain, false);
}

/* ---- stats -------------------------------------------------------------- */

static const char *mf__state_name(const mf_upstream_server_t *s)
{
    if (atomic_load(&s->draining))
        return "draining";
    if (!atomic_load(&s->healthy))
        return "unhealthy";
    switch (atomic_load(&s->pstate)) {
    case MF_UP_DOWN:
        return "down";
    case MF_UP_PROBING:
        return "probing";
    default:
        return "up";
    }
}

static void mf__tier_stats(const mf_upstream_t *up,
                           const mf_upstream_tier_t *tier,
                           mf_upstream_stats_fn fn, void *ud)
{
    for (size_t i = 0; i < tier->n; i++) {
        const mf_upstream_server_t *s = tier->servers[i];
        mf_upstream_server_stats_t st = {
            .group = up->name,
            .address = s->address,
            .state = mf__state_name(s),
            .weight = atomic_load(&s->weight),
            .backup = atomic_load(&s->backup),
            .fails = atomic_load(&s->fails),
            .active = atomic_load(&s->active),
            .requests = atomic_load(&s->requests),
            .failures = atomic_load(&s->failures),
            .downs = atomic_load(&s->downs),
            .latency_ms = (double)atomic_load(&s->ewma_ns) / 1e6,
        };
        fn(ud, &st);
    }
}

static void mf__group_stats(const mf_upstream_t *up, mf_upstream_stats_fn fn,
                            void *ud)
{
    const mf_upstream_set_t *set = atomic_load(&((mf_upstream_t *)up)->set);
    mf__tier_stats(up, &set->primary, fn, ud);
    mf__tier_stats(up, &set->backup, fn, ud);
}

void mf_upstream_stats(const mf_upstream_t *up, mf_upstream_stats_fn fn,
                       void *ud)
{
    if (up) {
        mf__group_stats(up, fn, ud);
        return;
    }
    const mf_upstream_dir_t *dir = atomic_load(&mf__up_dir);
    for (size_t i = 0; dir && i < dir->n; i++)
        mf__group_stats(dir->groups[i], fn, ud);
}

/* ---- the end ------------------------------------------------------------ */

static void mf__group_free(mf_upstream_t *up)
{
    mf__free_retired(up, true);
    mf__upstream_set_free(atomic_load(&up->set));
    for (mf_upstream_server_t *s = up->servers, *next; s; s = next) {
        next = s->next;
        free(s);
    }
    free(up);
}

void mf_upstream_shutdown(void)
{
    mf__upstream_check_stop();
    pthread_mutex_lock(&mf__up_lock);
    mf_upstream_dir_t *dir = atomic_exchange(&mf__up_dir, NULL);
    for (size_t i = 0; dir && i < dir->n; i++)
        mf__group_free(dir->groups[i]);
    while (dir) {
        mf_upstream_dir_t *older = dir->older;
        free(dir);
        dir = older;
    }
    pthread_mutex_unlock(&mf__up_lock);
}
