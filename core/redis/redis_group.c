/*
 * redis_group.c — a redis:// client whose host is an upstream group's name
 * (moonflow/upstream.h): each task asks the group for a server, keyed by
 * the task's first key, and runs whole on that server's ordinary client
 * (one per member, made when first picked, with the front client's
 * options), whose shared connection batches it with the other tasks bound
 * there. A consistent_hash group thus shards keys over plain servers.
 *
 * Under consistent_hash every key of a task must have the same home on
 * the ring (mf_upstream_key_home), else the task is refused before
 * anything is sent, each command's reply an error (as a cluster's
 * CROSSSLOT). Other policies pick per task: all of it goes to one server.
 *
 * Each attempt's end is the group's passive health: done(ok, latency) for
 * an answer, a failure for a connection that failed. A task whose
 * connection failed before its commands were written (refused, reset,
 * its connect timed out) moves to another server the group picks (never
 * one it tried); written and then failed, it fails (nothing runs twice).
 *
 * Calls: redis_task.c (the single-node kind's parts), redis_client.c (the
 * members' clients, routing to one), redis_slot.c (where the keys are),
 * the upstream registry. Ownership: the front client (the data of its
 * "redis" endpoint) owns the group record; the members' clients are the
 * loop's endpoints. A task's attempts (mf_redis_gtask_t) are its own.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "moonflow/upstream.h"
#include "redis_int.h"

typedef struct mf__gmember {
    char host[MF_UPSTREAM_HOST_MAX + 1];
    uint16_t port;
    mf_redis_client_t *client;
} mf__gmember_t;

struct mf_redis_group {
    mf_upstream_t *up;
    char *userinfo; /* "user:password@" as the URL had it, or "" */
    mf__gmember_t *members;
    unsigned n, cap;
};

typedef struct mf_redis_gtask {
    mf_upstream_try_t try;
    const char *key; /* the task's first key (in t->cmds); NULL: none */
    size_t key_len;
} mf_redis_gtask_t;

static mf_redis_task_t *mf__rt(const mf_task_t *task)
{
    return (mf_redis_task_t *)(void *)task;
}

/* ---- members -------------------------------------------------------------
 */

static mf_redis_client_t *mf__member_new(mf_redis_client_t *front,
                                         const char *host, uint16_t port)
{
    char url[MF_UPSTREAM_HOST_MAX + 600];
    bool v6 = strchr(host, ':') != NULL;
    int n = snprintf(url, sizeof url, "%s://%s%s%s%s:%u/%ld",
                     front->tls ? "rediss" : "redis", front->group->userinfo,
                     v6 ? "[" : "", host, v6 ? "]" : "", port, front->db);
    if (n < 0 || (size_t)n >= sizeof url)
        return NULL;
    return mf__redis_client_get(front->loop, url, &front->opts);
}

/* The client of the server host:port; NULL when it cannot be made. */
static mf_redis_client_t *mf__member(mf_redis_client_t *front, const char *host,
                                     uint16_t port)
{
    mf_redis_group_t *g = front->group;
    for (unsigned i = 0; i < g->n; i++)
        if (g->members[i].port == port && strcmp(g->members[i].host, host) == 0)
            return g->members[i].client;
    mf_redis_client_t *c = mf__member_new(front, host, port);
    if (!c || c->group)
        return NULL; /* a member that names a group again: refused */
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 4;
        mf__gmember_t *bigger = mf_xcalloc(g->cap, sizeof(*bigger));
        if (g->members)
            memcpy(bigger, g->members, g->n * sizeof(*bigger));
        mf_free(g->members);
        g->members = bigger;
    }
    mf__gmember_t *m = &g->members[g->n++];
    snprintf(m->host, sizeof m->host, "%s", host);
    m->port = port;
    m->client = c;
    return c;
}

/* The next attempt's server and its client: 0, MF_ENOUPSTREAM, or
 * MF_EINVAL when its client cannot be made. */
static int mf__pick(mf_redis_client_t *front, mf_upstream_try_t *try,
                    const char *key, size_t key_len, mf_redis_client_t **out)
{
    int rc = mf_upstream_balance(front->loop, try, key, key_len);
    if (rc < 0)
        return rc;
    *out = mf__member(front, try->host, try->port);
    if (!*out) {
        mf_upstream_abandon(try);
        return MF_EINVAL;
    }
    return 0;
}

/* ---- where a task's keys are ---------------------------------------------
 */

typedef struct mf__gkeys {
    const mf_upstream_t *up;
    bool hashed;     /* consistent_hash: every key must share a home */
    const char *key; /* the first */
    size_t key_len;
    const void *home; /* the first key's */
    bool cross;       /* a key whose home is another */
} mf__gkeys_t;

static bool mf__gkeys_add(void *ud, const char *key, size_t len)
{
    mf__gkeys_t *k = ud;
    if (!k->key) {
        k->key = key;
        k->key_len = len;
        if (k->hashed)
            k->home = mf_upstream_key_home(k->up, key, len);
        return k->hashed;
    }
    if (len == k->key_len && memcmp(key, k->key, len) == 0)
        return true;
    if (mf_upstream_key_home(k->up, key, len) != k->home)
        k->cross = true;
    return !k->cross;
}

/* One command's keys: PUBLISH goes where subscribers of its channel are
 * (the channel's pick); a command whose keys are unknown goes with the
 * task's. */
static void mf__cmd_keys(void *ud, int argc, const char *const *argv,
                         const size_t *lens)
{
    mf__gkeys_t *k = ud;
    if (argc >= 2 && lens[0] == 7 && strncasecmp(argv[0], "PUBLISH", 7) == 0)
        mf__gkeys_add(k, argv[1], lens[1]);
    else if (argc)
        mf__redis_cmd_keys(argc, argv, lens, mf__gkeys_add, k);
}

/* One command's keys from its protocol form (which this client wrote);
 * false when out of memory. */
static bool mf__cmd_keys_at(const char *p, const char *end, size_t *at,
                            mf__gkeys_t *k)
{
    return mf__redis_read_command(p, end, at, mf__cmd_keys, k);
}

static bool mf__task_keys(mf_redis_task_t *t, mf__gkeys_t *k)
{
    const char *p = t->cmds.data, *end = p + t->cmds.len;
    size_t at = 0;
    for (size_t i = 0; i < t->ncmds && !k->cross; i++) {
        if (!mf__cmd_keys_at(p, end, &at, k))
            return false;
        if (k->key && !k->hashed)
            break; /* the pick's key is known; nothing to check */
    }
    return true;
}

/* ---- the task kind -------------------------------------------------------
 */

static void mf__g_complete(mf_redis_task_t *t, int state, int error)
{
    t->phase = MF_RT_DONE;
    mf_task_complete(&t->base, state, error);
}

static const char mf__crossserver[] =
    "CROSSSERVER Keys in request don't hash to the same server of the "
    "upstream group (refused by the client)";

/* Every command's reply is the refusal; nothing was sent. */
static void mf__g_refuse(mf_redis_task_t *t)
{
    size_t len = sizeof mf__crossserver - 1;
    for (size_t i = 0; i < t->ncmds; i++) {
        mf_redis_reply_t *r = &t->replies[i];
        memset(r, 0, sizeof(*r));
        r->type = MF_REDIS_ERROR;
        r->str = mf__crossserver; /* static: outlives the task */
        r->len = len;
    }
    t->nread = t->nerrors = t->ncmds;
    mf__g_complete(t, MF_STATE_SUCCESS, 0);
}

/* The task goes to the group's next pick: 0, or the error it fails with. */
static int mf__g_route(mf_redis_task_t *t)
{
    mf_redis_gtask_t *gt = t->grp;
    mf_redis_client_t *node;
    int rc = mf__pick(t->client, &gt->try, gt->key, gt->key_len, &node);
    if (rc < 0)
        return rc;
    rc = mf__redis_client_route_to(node, t);
    if (rc < 0)
        mf_upstream_abandon(&gt->try);
    return rc;
}

static int mf__state_of(int error)
{
    return error == MF_ENOUPSTREAM || error == MF_EBUSY || error == MF_EINVAL
               ? MF_STATE_TASK_ERROR
               : MF_STATE_SYS_ERROR;
}

static void mf__g_dispatch(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    mf_redis_client_t *front = t->client;
    if (!t->ncmds || t->unformatted) {
        mf__g_complete(t, MF_STATE_TASK_ERROR,
                       t->unformatted ? MF_ENOMEM : MF_EINVAL);
        return;
    }
    if (t->in_multi || t->watching)
        t->dedicated = t->dirty = true;
    mf_redis_gtask_t *gt = mf_loop_alloc(task->_loop, sizeof(*gt));
    memset(gt, 0, sizeof(*gt));
    mf_upstream_try_init(&gt->try, front->group->up);
    t->grp = gt;
    mf__gkeys_t k = {front->group->up, false, NULL, 0, NULL, false};
    k.hashed = mf_upstream_conf(k.up)->policy == MF_UPSTREAM_CONSISTENT_HASH;
    if (mf__redis_task_alloc_replies(t) < 0 || !mf__task_keys(t, &k)) {
        mf__g_complete(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
        return;
    }
    if (k.cross) {
        mf__g_refuse(t);
        return;
    }
    gt->key = k.key;
    gt->key_len = k.key_len;
    int rc = mf__g_route(t);
    if (rc < 0)
        mf__g_complete(t, mf__state_of(rc), rc);
}

/* A reply of a task on a member's connection; the last one ends it. */
static void mf__g_on_reply(mf_redis_task_t *t)
{
    const mf_redis_reply_t *r = mf__redis_task_slot(t);
    if (r && r->type == MF_REDIS_ERROR)
        t->nerrors++;
    if (++t->nread < t->ncmds)
        return;
    t->hooks->end(t, t->overflow ? MF_STATE_TASK_ERROR : MF_STATE_SUCCESS,
                  t->overflow ? MF_EMSGSIZE : 0);
}

/* Whether the connection's failure may move the task to another server:
 * nothing of it was written, and the failure is the connection's. */
static bool mf__g_movable(const mf_redis_task_t *t, int state, bool unsent)
{
    return unsent && !t->abandoned &&
           (state == MF_STATE_SYS_ERROR || state == MF_STATE_DNS_ERROR ||
            state == MF_STATE_TIMEOUT) &&
           mf_upstream_may_retry(&t->grp->try);
}

/* The task leaves its member's connection: the verdict on that server,
 * then done, or on to the next server. */
static void mf__g_on_end(mf_redis_task_t *t, int state, int error)
{
    mf_redis_gtask_t *gt = t->grp;
    bool unsent = t->phase == MF_RT_QUEUED; /* its connection never opened */
    uint64_t latency = mf_monotonic_ns() - gt->try.attempt_ns;
    if (state == MF_STATE_SUCCESS)
        mf_upstream_done(&gt->try, true, latency);
    else if (state == MF_STATE_CANCELED || t->abandoned ||
             state == MF_STATE_TASK_ERROR)
        mf_upstream_abandon(&gt->try); /* no verdict on the server */
    else
        mf_upstream_done(&gt->try, false, latency);
    if (state != MF_STATE_SUCCESS && mf__g_movable(t, state, unsent)) {
        mf__redis_task_leave(t, false);
        int rc = mf__g_route(t);
        if (rc == 0)
            return;
        if (rc != MF_ENOUPSTREAM) /* else: the connection's error stays */
            state = mf__state_of(rc), error = rc;
    }
    mf__redis_task_end(t, state, error);
}

static void mf__g_cancel(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    if (t->grp && (t->phase == MF_RT_WAITING || t->phase == MF_RT_QUEUED))
        mf_upstream_abandon(&t->grp->try); /* ends below, not by a hook */
    mf__redis_task_cancel(task);
}

static void mf__g_destroy(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    if (t->grp) {
        mf_upstream_abandon(&t->grp->try);
        mf_loop_free(task->_loop, t->grp, sizeof(*t->grp));
    }
    mf__redis_task_destroy(task);
}

static const mf_task_ops_t mf__g_ops = {"redis", mf__g_dispatch, mf__g_cancel,
                                        mf__g_destroy};
static const mf_redis_task_hooks_t mf__g_hooks = {mf__g_on_reply, mf__g_on_end,
                                                  mf__redis_task_keep_refusal};

/* Every connection its members' clients opened. */
static uint64_t mf__g_connects(const mf_redis_client_t *front)
{
    const mf_redis_group_t *g = front->group;
    uint64_t n = 0;
    for (unsigned i = 0; i < g->n; i++)
        n += mf_redis_client_connects(g->members[i].client);
    return n;
}

/* A subscriber's server: the group's pick for its first channel (no
 * verdict reported); the front itself when none is live, whose subscriber
 * then ends with MF_ENOUPSTREAM. */
static mf_redis_client_t *mf__g_channel_node(mf_redis_client_t *front,
                                             const char *channel, size_t len)
{
    mf_upstream_try_t try;
    mf_upstream_try_init(&try, front->group->up);
    mf_redis_client_t *node;
    if (mf__pick(front, &try, channel, len, &node) < 0)
        return front;
    mf_upstream_abandon(&try);
    return node;
}

static const mf_redis_kind_t mf__g_kind = {&mf__g_ops, &mf__g_hooks,
                                           mf__g_connects, mf__g_channel_node};

/* ---- the client ----------------------------------------------------------
 */

/* The URL's "user:password@" as written, for the members' URLs. */
static char *mf__userinfo(const char *url)
{
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t alen = strcspn(auth, "/?#");
    size_t ulen = 0;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            ulen = i + 1;
    char *s = mf_xmalloc(ulen + 1);
    memcpy(s, auth, ulen);
    s[ulen] = '\0';
    return s;
}

void mf__redis_group_attach(mf_redis_client_t *c, mf_upstream_t *up)
{
    mf_redis_group_t *g = mf_xcalloc(1, sizeof(*g));
    g->up = up;
    g->userinfo = mf__userinfo(c->url);
    c->group = g;
    c->kind = &mf__g_kind;
}

void mf__redis_group_free(mf_redis_group_t *g)
{
    if (!g)
        return;
    mf_free(g->members);
    mf_free(g->userinfo);
    mf_free(g);
}

int mf__redis_group_session_node(mf_redis_client_t *front, int nkeys,
                                 const char *const *keys, const size_t *lens,
                                 mf_redis_client_t **node)
{
    mf__gkeys_t k = {front->group->up, false, NULL, 0, NULL, false};
    k.hashed = mf_upstream_conf(k.up)->policy == MF_UPSTREAM_CONSISTENT_HASH;
    for (int i = 0; i < nkeys && !k.cross; i++)
        mf__gkeys_add(&k, keys[i], MF__REDIS_ARGLEN(lens, keys, i));
    if (k.cross)
        return MF_EINVAL;
    mf_upstream_try_t try;
    mf_upstream_try_init(&try, front->group->up);
    int rc = mf__pick(front, &try, k.key, k.key_len, node);
    mf_upstream_abandon(&try); /* a session reports no verdict */
    return rc;
}
