/*
 * redis_cluster.c — the Redis Cluster client: redis-cluster:// URLs, the
 * slot map (CLUSTER SHARDS, or CLUSTER SLOTS on servers without it), and
 * the cluster's task kind, which routes each command of a task to the node
 * that owns its key's slot.
 *
 * Each node is an ordinary client of this loop (redis_client.c): its shared
 * pipelined connection batches the commands of every task bound there, as a
 * single-node client does. A task whose commands all go to one node (a
 * single command always does) is queued on that node's connection itself;
 * a task spread over several nodes runs as one ordinary child task per
 * node, whose replies are put back in the order of the task's commands
 * (the child's reply memory is handed over, nothing is copied).
 *
 * Redirections: MOVED sets the slot's owner at once, retries the command
 * there and refreshes the map (one refresh at a time: MOVED replies that
 * arrive meanwhile only retry at the node they name); ASK retries the
 * command on the named node behind ASKING, in the same write. A command is
 * redirected at most MF__MAX_REDIRECTS times; then the redirection is its
 * reply. A transaction, a blocking command or a task asking for a
 * dedicated connection goes to one node as a whole and follows MOVED as a
 * whole (an ASK inside it is its reply). Commands whose connection failed
 * before they were written (a task queued whole, or a child) wait for the
 * map to be read again and are routed again (a few times): a master
 * killed, its replica promoted, fails no read.
 *
 * Calls: redis_task.c (the single-node kind's parts), redis_client.c (node
 * clients, routing to one), redis_slot.c. Ownership: the loop's endpoint
 * pool owns the "redis-cluster" endpoint, whose data is the cluster's front
 * client (freed with it); the node clients are the pool's own endpoints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/net.h"
#include "redis_int.h"

#define MF__NO_NODE 0xffffu
#define MF__MAX_NODES 1024
#define MF__MAX_REPLICAS 8
#define MF__MAX_REDIRECTS 16
#define MF__REFRESH_GAP_MS 100 /* between two refreshes at most one */
#define MF__MAX_UNSENT_RETRIES 5

typedef struct mf__cnode {
    char host[MF_DNS_MAX_HOST + 1];
    uint16_t port;
    mf_redis_client_t *master;  /* commands to this node */
    mf_redis_client_t *replica; /* with READONLY; made when first used */
} mf__cnode_t;

typedef struct mf__shard {
    uint16_t master;
    uint16_t nreplicas;
    uint16_t replicas[MF__MAX_REPLICAS];
} mf__shard_t;

struct mf_redis_cluster {
    mf_redis_client_t *front;
    mf_loop_t *loop;
    mf_redis_opts_t node_opts; /* the nodes' clients' */
    bool tls;
    char *userinfo; /* "user:password@" as the URL had it, or "" */
    mf__cnode_t *nodes;
    unsigned nnodes, ncap;
    uint16_t slot_node[MF_REDIS_SLOTS];  /* its master; MF__NO_NODE */
    uint16_t slot_shard[MF_REDIS_SLOTS]; /* for replica reads; NO_NODE */
    mf__shard_t *shards;
    unsigned nshards;
    bool mapped;     /* a map was read */
    bool refreshing; /* a CLUSTER SHARDS/SLOTS is out */
    bool use_slots;  /* the servers know no CLUSTER SHARDS */
    unsigned refresh_next, refresh_tries;
    uint64_t refresh_at;      /* loop ms of the last refresh */
    mf_timer_t refresh_timer; /* a refresh put off to the gap's end */
    bool refresh_timer_on;
    int last_state, last_error;
    mf_list_t waiting; /* tasks waiting for the first map */
    unsigned rr;
    uint64_t refreshes, moved, asks;
};

/* A command of a cluster task: where it is in the task's protocol bytes,
 * where it goes, and whether it must be sent again. */
enum {
    MF__REDO_NONE,
    MF__REDO_MOVED,
    MF__REDO_ASK,
    MF__REDO_ROUTE /* its node refused the connection: route it again */
};

typedef struct mf__ccmd {
    size_t off, len;
    int slot;
    unsigned target; /* node * 2 + 1 for its replica client */
    unsigned char tries;
    unsigned char redo;
    bool readonly;
    bool send; /* in the next round of children */
} mf__ccmd_t;

typedef struct mf_redis_ctask {
    mf_redis_task_t *task;
    mf_list_t link; /* cluster->waiting */
    mf_list_t kids; /* live child tasks (mf__kid_t) */
    size_t ncmds;
    unsigned children;
    unsigned redo;
    unsigned whole_target;
    int fail_state, fail_error;
    unsigned char whole_tries;
    unsigned char unsent_tries; /* retries after a connection that failed
                                   before the commands were written */
    bool whole_only;            /* transaction, blocking, dedicated */
    bool redo_whole;
    bool reroute; /* commands wait for the next map (MF__REDO_ROUTE) */
    bool split;
    bool waiting;
    mf__ccmd_t cmds[];
} mf_redis_ctask_t;

/* A child task: its replies' places in the parent's list (-1: ASKING). */
typedef struct mf__kid {
    mf_list_t link;
    bool unsent; /* failed before its commands were written */
    mf_redis_task_t *parent;
    mf_task_t *task;
    size_t n;
    long idx[];
} mf__kid_t;

static void mf__cl_refresh(mf_redis_cluster_t *cl);

/* ---- nodes ---------------------------------------------------------------
 */

static mf_redis_client_t *mf__node_client(mf_redis_cluster_t *cl,
                                          const char *host, uint16_t port,
                                          bool readonly)
{
    char url[MF_DNS_MAX_HOST + 600];
    bool v6 = strchr(host, ':') != NULL;
    snprintf(url, sizeof url, "%s://%s%s%s%s:%u", cl->tls ? "rediss" : "redis",
             cl->userinfo, v6 ? "[" : "", host, v6 ? "]" : "", port);
    mf_redis_opts_t o = cl->node_opts;
    o.readonly = readonly;
    return mf__redis_client_get(cl->loop, url, &o);
}

/* The node's index (added when new); MF__NO_NODE when the table is full
 * or its client cannot be made. */
static unsigned mf__node_find(mf_redis_cluster_t *cl, const char *host,
                              size_t hlen, uint16_t port)
{
    if (!hlen || hlen > MF_DNS_MAX_HOST)
        return MF__NO_NODE;
    for (unsigned i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].port == port && strlen(cl->nodes[i].host) == hlen &&
            memcmp(cl->nodes[i].host, host, hlen) == 0)
            return i;
    if (cl->nnodes == MF__MAX_NODES)
        return MF__NO_NODE;
    if (cl->nnodes == cl->ncap) {
        cl->ncap = cl->ncap ? cl->ncap * 2 : 8;
        mf__cnode_t *bigger = mf_xcalloc(cl->ncap, sizeof(*bigger));
        if (cl->nodes)
            memcpy(bigger, cl->nodes, cl->nnodes * sizeof(*bigger));
        mf_free(cl->nodes);
        cl->nodes = bigger;
    }
    mf__cnode_t *n = &cl->nodes[cl->nnodes];
    memcpy(n->host, host, hlen);
    n->host[hlen] = '\0';
    n->port = port;
    n->master = mf__node_client(cl, n->host, port, false);
    if (!n->master)
        return MF__NO_NODE;
    return cl->nnodes++;
}

static mf_redis_client_t *mf__target_client(mf_redis_cluster_t *cl,
                                            unsigned target)
{
    mf__cnode_t *n = &cl->nodes[target / 2];
    if (!(target & 1))
        return n->master;
    if (!n->replica)
        n->replica = mf__node_client(cl, n->host, n->port, true);
    return n->replica ? n->replica : n->master;
}

/* A master for a command with no key: the shards' in turn. */
static unsigned mf__any_master(mf_redis_cluster_t *cl)
{
    if (!cl->nshards)
        return 0;
    return cl->shards[cl->rr++ % cl->nshards].master * 2u;
}

/* Where a command of that slot goes. */
static unsigned mf__slot_target(mf_redis_cluster_t *cl, int slot, bool readonly)
{
    if (readonly && cl->front->opts.read_from_replica) {
        unsigned s = cl->slot_shard[slot];
        if (s != MF__NO_NODE && cl->shards[s].nreplicas)
            return cl->shards[s].replicas[cl->rr++ % cl->shards[s].nreplicas] *
                       2u +
                   1u;
    }
    unsigned node = cl->slot_node[slot];
    return node == MF__NO_NODE ? mf__any_master(cl) : node * 2u;
}

/* ---- the slot map --------------------------------------------------------
 */

/* The value of key in a flat [k, v, k, v ...] array; NULL if absent. */
static const mf_redis_reply_t *mf__field(const mf_redis_reply_t *map,
                                         const char *key)
{
    if (map->type != MF_REDIS_ARRAY || !map->elements)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i + 1 < map->len; i += 2) {
        const mf_redis_reply_t *k = &map->elements[i];
        if ((k->type == MF_REDIS_STRING || k->type == MF_REDIS_STATUS) &&
            k->len == klen && memcmp(k->str, key, klen) == 0)
            return &map->elements[i + 1];
    }
    return NULL;
}

static bool mf__is(const mf_redis_reply_t *r, const char *s)
{
    return r && (r->type == MF_REDIS_STRING || r->type == MF_REDIS_STATUS) &&
           r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

static long long mf__number(const mf_redis_reply_t *r)
{
    if (!r)
        return -1;
    if (r->type == MF_REDIS_INTEGER)
        return r->integer;
    if (r->type == MF_REDIS_STRING && r->len && r->len < 12)
        return atoll(r->str);
    return -1;
}

typedef struct mf__map {
    uint16_t slot_node[MF_REDIS_SLOTS];
    uint16_t slot_shard[MF_REDIS_SLOTS];
    mf__shard_t *shards;
    unsigned nshards, cap;
} mf__map_t;

static mf__shard_t *mf__map_shard(mf__map_t *m)
{
    if (m->nshards == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 8;
        mf__shard_t *bigger = mf_xcalloc(m->cap, sizeof(*bigger));
        if (m->shards)
            memcpy(bigger, m->shards, m->nshards * sizeof(*bigger));
        mf_free(m->shards);
        m->shards = bigger;
    }
    mf__shard_t *s = &m->shards[m->nshards];
    memset(s, 0, sizeof(*s));
    return s;
}

static int mf__map_range(mf__map_t *m, long long from, long long to)
{
    if (from < 0 || to < from || to >= MF_REDIS_SLOTS)
        return MF_EPROTO;
    for (long long s = from; s <= to; s++) {
        m->slot_node[s] = m->shards[m->nshards].master;
        m->slot_shard[s] = (uint16_t)m->nshards;
    }
    return 0;
}

static unsigned mf__node_of(mf_redis_cluster_t *cl, const mf_redis_reply_t *ip,
                            long long port)
{
    if (!ip || (ip->type != MF_REDIS_STRING && ip->type != MF_REDIS_STATUS) ||
        port <= 0 || port > 65535)
        return MF__NO_NODE;
    return mf__node_find(cl, ip->str, ip->len, (uint16_t)port);
}

/* One shard of CLUSTER SHARDS: {slots = [from, to, ...], nodes = [{ip,
 * port, role, health ...}, ...]}. */
static int mf__read_shard(mf_redis_cluster_t *cl, mf__map_t *m,
                          const mf_redis_reply_t *shard)
{
    const mf_redis_reply_t *slots = mf__field(shard, "slots");
    const mf_redis_reply_t *nodes = mf__field(shard, "nodes");
    if (!slots || !nodes || slots->type != MF_REDIS_ARRAY ||
        nodes->type != MF_REDIS_ARRAY)
        return MF_EPROTO;
    if (!slots->len)
        return 0; /* a master without slots (or a failed one) */
    mf__shard_t *s = mf__map_shard(m);
    s->master = MF__NO_NODE;
    for (size_t i = 0; i < nodes->len; i++) {
        const mf_redis_reply_t *n = &nodes->elements[i];
        bool online = mf__is(mf__field(n, "health"), "online");
        unsigned idx = mf__node_of(cl, mf__field(n, "ip"),
                                   mf__number(mf__field(n, "port")));
        if (idx == MF__NO_NODE)
            continue;
        if (mf__is(mf__field(n, "role"), "master")) {
            if (s->master == MF__NO_NODE || online)
                s->master = (uint16_t)idx;
        } else if (online && s->nreplicas < MF__MAX_REPLICAS) {
            s->replicas[s->nreplicas++] = (uint16_t)idx;
        }
    }
    if (s->master == MF__NO_NODE)
        return 0; /* no master known: its slots stay unassigned */
    for (size_t i = 0; i + 1 < slots->len; i += 2)
        if (mf__map_range(m, mf__number(&slots->elements[i]),
                          mf__number(&slots->elements[i + 1])) < 0)
            return MF_EPROTO;
    m->nshards++;
    return 0;
}

/* One range of CLUSTER SLOTS: [from, to, [ip, port, id], replicas ...]. */
static int mf__read_range(mf_redis_cluster_t *cl, mf__map_t *m,
                          const mf_redis_reply_t *range)
{
    if (range->type != MF_REDIS_ARRAY || range->len < 3)
        return MF_EPROTO;
    mf__shard_t *s = mf__map_shard(m);
    for (size_t i = 2; i < range->len; i++) {
        const mf_redis_reply_t *n = &range->elements[i];
        if (n->type != MF_REDIS_ARRAY || n->len < 2)
            return MF_EPROTO;
        unsigned idx =
            mf__node_of(cl, &n->elements[0], mf__number(&n->elements[1]));
        if (i == 2)
            s->master = (uint16_t)idx;
        else if (idx != MF__NO_NODE && s->nreplicas < MF__MAX_REPLICAS)
            s->replicas[s->nreplicas++] = (uint16_t)idx;
    }
    if (s->master == MF__NO_NODE)
        return 0;
    if (mf__map_range(m, mf__number(&range->elements[0]),
                      mf__number(&range->elements[1])) < 0)
        return MF_EPROTO;
    m->nshards++;
    return 0;
}

/* The reply of CLUSTER SHARDS (or SLOTS) becomes the map. */
static int mf__read_map(mf_redis_cluster_t *cl, const mf_redis_reply_t *r)
{
    if (r->type != MF_REDIS_ARRAY || !r->elements || !r->len)
        return MF_EPROTO;
    mf__map_t *m = mf_xcalloc(1, sizeof(*m));
    memset(m->slot_node, 0xff, sizeof m->slot_node);
    memset(m->slot_shard, 0xff, sizeof m->slot_shard);
    int rc = 0;
    for (size_t i = 0; i < r->len && rc == 0; i++)
        rc = cl->use_slots ? mf__read_range(cl, m, &r->elements[i])
                           : mf__read_shard(cl, m, &r->elements[i]);
    if (rc == 0 && m->nshards) {
        memcpy(cl->slot_node, m->slot_node, sizeof cl->slot_node);
        memcpy(cl->slot_shard, m->slot_shard, sizeof cl->slot_shard);
        mf_free(cl->shards);
        cl->shards = m->shards;
        cl->nshards = m->nshards;
        m->shards = NULL;
    } else if (rc == 0) {
        rc = MF_EPROTO; /* no slot served: not a usable map */
    }
    mf_free(m->shards);
    mf_free(m);
    return rc;
}

/* ---- the task kind -------------------------------------------------------
 */

static mf_redis_task_t *mf__rt(const mf_task_t *task)
{
    return (mf_redis_task_t *)(void *)task;
}

static void mf__cl_send(mf_redis_task_t *t);

/* The task's end: its own replies are all in place (or it failed). */
static void mf__cl_complete(mf_redis_task_t *t, int state, int error)
{
    if (state == MF_STATE_SUCCESS) {
        t->nread = t->ncmds;
        t->nerrors = 0;
        for (size_t i = 0; i < t->ncmds; i++)
            t->nerrors += t->replies[i].type == MF_REDIS_ERROR;
    }
    t->phase = MF_RT_DONE;
    mf_task_complete(&t->base, state, error);
}

/* A connection failed under a task: the map may have changed (a master
 * gone, its replica promoted). */
static void mf__cl_failed(mf_redis_cluster_t *cl, int state)
{
    if (state != MF_STATE_CANCELED && state != MF_STATE_TASK_ERROR)
        mf__cl_refresh(cl);
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the node named;
 * MF__NO_NODE when r is no redirection. An empty host is the one that
 * answered. */
static unsigned mf__redirect_node(mf_redis_cluster_t *cl,
                                  const mf_redis_reply_t *r, unsigned from,
                                  int *kind, int *slot)
{
    size_t skip;
    if (r->len > 6 && memcmp(r->str, "MOVED ", 6) == 0)
        *kind = MF__REDO_MOVED, skip = 6;
    else if (r->len > 4 && memcmp(r->str, "ASK ", 4) == 0)
        *kind = MF__REDO_ASK, skip = 4;
    else
        return MF__NO_NODE;
    const char *p = r->str + skip, *end = r->str + r->len;
    char *after;
    long s = strtol(p, &after, 10);
    if (after == p || *after != ' ' || s < 0 || s >= MF_REDIS_SLOTS)
        return MF__NO_NODE;
    const char *hp = after + 1;
    const char *colon = NULL;
    for (const char *q = hp; q < end; q++)
        if (*q == ':')
            colon = q; /* the last: an IPv6 host holds colons */
    if (!colon)
        return MF__NO_NODE;
    long port = strtol(colon + 1, NULL, 10);
    if (port <= 0 || port > 65535)
        return MF__NO_NODE;
    const char *host = hp;
    size_t hlen = (size_t)(colon - hp);
    if (hlen >= 2 && host[0] == '[')
        host++, hlen -= 2;
    if (!hlen) {
        host = cl->nodes[from / 2].host;
        hlen = strlen(host);
    }
    *slot = (int)s;
    return mf__node_find(cl, host, hlen, (uint16_t)port);
}

/* Reply r of command i is a redirection to follow: noted (the command is
 * sent again) and true; false leaves r as the command's reply. */
static bool mf__cl_redirect(mf_redis_task_t *t, size_t i,
                            const mf_redis_reply_t *r, unsigned from)
{
    mf_redis_cluster_t *cl = t->client->cluster;
    mf_redis_ctask_t *ct = t->cl;
    mf__ccmd_t *c = &ct->cmds[i];
    int kind, slot;
    if (r->type != MF_REDIS_ERROR || c->tries >= MF__MAX_REDIRECTS)
        return false;
    unsigned node = mf__redirect_node(cl, r, from, &kind, &slot);
    if (node == MF__NO_NODE)
        return false;
    if (kind == MF__REDO_MOVED) {
        cl->moved++;
        cl->slot_node[slot] = (uint16_t)node;
        cl->slot_shard[slot] = MF__NO_NODE; /* its replicas: next map */
        mf__cl_refresh(cl);
    } else {
        cl->asks++;
    }
    if (ct->whole_only) {
        if (kind != MF__REDO_MOVED || ct->redo_whole)
            return false;
        ct->redo_whole = true;
        ct->whole_target = node * 2u;
        return true;
    }
    c->tries++;
    c->redo = (unsigned char)kind;
    c->target = node * 2u;
    ct->redo++;
    return true;
}

/* The reply hook of a task queued whole on a node's connection. */
static void mf__cl_on_reply(mf_redis_task_t *t)
{
    const mf_redis_reply_t *r = mf__redis_task_slot(t);
    if (r && r->type == MF_REDIS_ERROR &&
        !mf__cl_redirect(t, t->nread, r, t->cl->whole_target))
        t->nerrors++;
    if (++t->nread < t->ncmds)
        return;
    t->hooks->end(t, t->overflow ? MF_STATE_TASK_ERROR : MF_STATE_SUCCESS,
                  t->overflow ? MF_EMSGSIZE : 0);
}

/* Whether a task whose connection failed is sent again once the map is
 * read again: only when nothing of it was written (a node gone, its
 * replica promoted: nothing can run twice), a few times. */
static bool mf__cl_retry_unsent(mf_redis_task_t *t, int state, bool unsent)
{
    mf_redis_ctask_t *ct = t->cl;
    mf_redis_cluster_t *cl = t->client->cluster;
    if (!unsent || t->abandoned ||
        (state != MF_STATE_SYS_ERROR && state != MF_STATE_DNS_ERROR &&
         state != MF_STATE_TIMEOUT) ||
        ct->unsent_tries++ >= MF__MAX_UNSENT_RETRIES)
        return false;
    ct->waiting = true;
    t->phase = MF_RT_WAITING;
    mf_list_push_back(&cl->waiting, &ct->link);
    mf__cl_refresh(cl); /* the tasks waiting go when it is read */
    return true;
}

/* The end hook of a task queued whole: done, redirected, or sent again. */
static void mf__cl_on_end(mf_redis_task_t *t, int state, int error)
{
    mf_redis_ctask_t *ct = t->cl;
    bool unsent = t->phase == MF_RT_QUEUED; /* its connection never opened */
    mf__redis_task_leave(t, state == MF_STATE_SUCCESS && !t->dirty);
    if (state != MF_STATE_SUCCESS && mf__cl_retry_unsent(t, state, unsent))
        return;
    if (t->abandoned) /* timed out or canceled: nothing is sent again */
        ct->redo = 0, ct->redo_whole = false;
    if (state == MF_STATE_SUCCESS && ct->redo_whole &&
        ct->whole_tries++ < MF__MAX_REDIRECTS) {
        ct->redo_whole = false;
        t->nread = t->nerrors = 0;
        mf__redis_arena_reset(t->base._loop, &t->arena);
        if (mf__redis_task_alloc_replies(t) < 0) {
            mf__cl_complete(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
            return;
        }
        int rc = mf__redis_client_route_to(
            mf__target_client(t->client->cluster, ct->whole_target), t);
        if (rc < 0)
            mf__cl_complete(t, MF_STATE_TASK_ERROR, rc);
        return;
    }
    if (state == MF_STATE_SUCCESS && ct->redo) {
        ct->split = true;
        mf__cl_send(t);
        return;
    }
    if (state != MF_STATE_SUCCESS)
        mf__cl_failed(t->client->cluster, state);
    mf__cl_complete(t, state, error); /* counts a redirection left as is */
}

/* All children are back: the task completes, or sends its redirected
 * commands again. */
static void mf__cl_settle(mf_redis_task_t *t)
{
    mf_redis_ctask_t *ct = t->cl;
    if (ct->children)
        return;
    if (ct->fail_state) {
        mf__cl_complete(t, ct->fail_state, ct->fail_error);
        return;
    }
    if (ct->reroute) {
        ct->reroute = false;
        ct->unsent_tries++;
        ct->waiting = true;
        mf_list_push_back(&t->client->cluster->waiting, &ct->link);
        mf__cl_refresh(t->client->cluster); /* sent when it is read */
        return;
    }
    if (ct->redo) {
        mf__cl_send(t);
        return;
    }
    mf__cl_complete(t, MF_STATE_SUCCESS, 0);
}

static void mf__kid_done(mf_task_t *task)
{
    mf__kid_t *kid = task->user;
    mf_redis_task_t *t = kid->parent;
    mf_redis_ctask_t *ct = t->cl;
    mf_redis_task_t *k = mf__rt(task);
    int state = mf_task_state(task);
    mf_list_remove(&kid->link);
    ct->children--;
    if (state != MF_STATE_SUCCESS && kid->unsent && !ct->fail_state &&
        !t->abandoned && ct->unsent_tries < MF__MAX_UNSENT_RETRIES) {
        /* Nothing ran: its commands are routed again on the next map. */
        for (size_t i = 0; i < kid->n; i++)
            if (kid->idx[i] >= 0) {
                ct->cmds[kid->idx[i]].redo = MF__REDO_ROUTE;
                ct->redo++;
            }
        ct->reroute = true;
        mf__cl_failed(t->client->cluster, state);
    } else if (state != MF_STATE_SUCCESS) {
        if (!ct->fail_state) {
            ct->fail_state = state;
            ct->fail_error = mf_task_error(task);
        }
        mf__cl_failed(t->client->cluster, state);
    } else if (!ct->fail_state) {
        for (size_t i = 0; i < kid->n; i++) {
            const mf_redis_reply_t *r = mf_task_redis_reply(task, i);
            long at = kid->idx[i];
            if (at < 0 || !r) /* ASKING's +OK */
                continue;
            unsigned from = ct->cmds[at].target;
            if (!mf__cl_redirect(t, (size_t)at, r, from))
                t->replies[at] = *r; /* its memory is adopted below */
        }
        mf__redis_arena_adopt(&t->arena, &k->arena);
    }
    mf_free(kid);
    mf__cl_settle(t);
}

/* A child's end: noted when its connection failed before it was written. */
static void mf__kid_end(mf_redis_task_t *k, int state, int error)
{
    if (state != MF_STATE_SUCCESS && k->phase == MF_RT_QUEUED)
        ((mf__kid_t *)k->base.user)->unsent = true;
    mf__redis_task_end(k, state, error);
}

static const mf_redis_task_hooks_t mf__kid_hooks = {
    mf__redis_task_on_reply, mf__kid_end, mf__redis_task_keep_refusal};

/* One child for the commands marked send whose target is that of the
 * first of them (from i on); ASKING before each redirected by ASK. */
static void mf__cl_child(mf_redis_task_t *t, size_t first)
{
    mf_redis_ctask_t *ct = t->cl;
    mf_redis_cluster_t *cl = t->client->cluster;
    unsigned target = ct->cmds[first].target;
    size_t n = 0;
    for (size_t i = first; i < ct->ncmds; i++)
        if (ct->cmds[i].send && ct->cmds[i].target == target)
            n += ct->cmds[i].redo == MF__REDO_ASK ? 2 : 1;
    mf__kid_t *kid = mf_xmalloc(sizeof(*kid) + n * sizeof(long));
    kid->unsent = false;
    kid->parent = t;
    kid->n = n;
    kid->task =
        mf_task_redis_create(mf__target_client(cl, target), mf__kid_done, kid);
    mf_redis_task_t *k = mf__rt(kid->task);
    k->hooks = &mf__kid_hooks;
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    size_t j = 0;
    for (size_t i = first; i < ct->ncmds; i++) {
        mf__ccmd_t *c = &ct->cmds[i];
        if (!c->send || c->target != target)
            continue;
        c->send = false;
        if (c->redo == MF__REDO_ASK) {
            if (mf__buf_append(t->base._loop, &k->cmds, asking,
                               sizeof asking - 1) < 0)
                k->unformatted = true;
            kid->idx[j++] = -1;
        }
        c->redo = MF__REDO_NONE;
        if (mf__buf_append(t->base._loop, &k->cmds, t->cmds.data + c->off,
                           c->len) < 0)
            k->unformatted = true;
        kid->idx[j++] = (long)i;
    }
    k->ncmds = n;
    mf_list_push_back(&ct->kids, &kid->link);
    ct->children++;
    mf_task_start(kid->task);
}

/* Sends the commands marked send (all at first; the redirected later),
 * one child per node. */
static void mf__cl_send_split(mf_redis_task_t *t)
{
    mf_redis_ctask_t *ct = t->cl;
    ct->split = true;
    ct->redo = 0;
    ct->children++; /* children that end at once settle nothing early */
    for (size_t i = 0; i < ct->ncmds; i++)
        if (ct->cmds[i].send)
            mf__cl_child(t, i);
    ct->children--;
    mf__cl_settle(t);
}

/* An error reply the client gives itself, for a command it does not send. */
static void mf__cl_refuse(mf_redis_task_t *t, size_t i, const char *msg)
{
    size_t len = strlen(msg);
    char *copy = mf__redis_arena_alloc(t->base._loop, &t->arena, len + 1);
    mf_redis_reply_t *r = &t->replies[i];
    memset(r, 0, sizeof(*r));
    r->type = MF_REDIS_ERROR;
    if (copy) {
        memcpy(copy, msg, len + 1);
        r->str = copy;
        r->len = len;
    } else {
        r->str = "ERR out of memory";
        r->len = strlen(r->str);
    }
}

static const char mf__crossslot[] =
    "CROSSSLOT Keys in request don't hash to the same slot (refused by the "
    "cluster client)";
static const char mf__unknown[] =
    "ERR the cluster client does not know where this command's keys are: "
    "not sent";

/* Targets for each command; refused ones get their error reply. Returns
 * how many are to be sent, and in *one whether all go to one target. */
static size_t mf__cl_plan(mf_redis_task_t *t, bool *one)
{
    mf_redis_ctask_t *ct = t->cl;
    mf_redis_cluster_t *cl = t->client->cluster;
    unsigned anchor = MF__NO_NODE;
    size_t nsend = 0;
    *one = true;
    for (size_t i = 0; i < ct->ncmds; i++) {
        mf__ccmd_t *c = &ct->cmds[i];
        if (c->slot >= 0) {
            c->target = mf__slot_target(cl, c->slot, c->readonly);
            if (anchor == MF__NO_NODE)
                anchor = c->target;
        }
    }
    if (anchor == MF__NO_NODE)
        anchor = mf__any_master(cl);
    for (size_t i = 0; i < ct->ncmds; i++) {
        mf__ccmd_t *c = &ct->cmds[i];
        c->send = c->slot >= MF_REDIS_SLOT_NONE;
        if (c->slot == MF_REDIS_SLOT_NONE)
            c->target = anchor; /* with the task's keyed commands */
        if (!c->send) {
            mf__cl_refuse(t, i,
                          c->slot == MF_REDIS_SLOT_CROSS ? mf__crossslot
                                                         : mf__unknown);
            *one = false;
            continue;
        }
        if (c->target != anchor)
            *one = false;
        nsend++;
    }
    ct->whole_target = anchor;
    return nsend;
}

/* First sending: whole to one node when it can, else one child per node. */
static void mf__cl_send(mf_redis_task_t *t)
{
    mf_redis_ctask_t *ct = t->cl;
    if (ct->split) {
        mf_redis_cluster_t *cl = t->client->cluster;
        for (size_t i = 0; i < ct->ncmds; i++) {
            mf__ccmd_t *c = &ct->cmds[i];
            c->send = c->redo != MF__REDO_NONE;
            if (c->redo != MF__REDO_ROUTE)
                continue;
            c->redo = MF__REDO_NONE;
            c->target = c->slot >= 0 ? mf__slot_target(cl, c->slot, c->readonly)
                                     : mf__any_master(cl);
        }
        mf__cl_send_split(t);
        return;
    }
    bool one;
    size_t nsend = mf__cl_plan(t, &one);
    if (ct->whole_only && !one) {
        /* A transaction is not split: refused as a whole. */
        for (size_t i = 0; i < ct->ncmds; i++)
            if (ct->cmds[i].slot < MF_REDIS_SLOT_NONE)
                nsend = 0;
        if (!nsend) {
            for (size_t i = 0; i < ct->ncmds; i++)
                if (ct->cmds[i].slot >= MF_REDIS_SLOT_NONE)
                    mf__cl_refuse(t, i,
                                  "ERR not sent: another command of the "
                                  "task was refused");
            mf__cl_complete(t, MF_STATE_SUCCESS, 0);
            return;
        }
        one = true; /* the server answers for keys of other slots */
    }
    if (!nsend) {
        mf__cl_complete(t, MF_STATE_SUCCESS, 0);
        return;
    }
    if (!one) {
        mf__cl_send_split(t);
        return;
    }
    mf_redis_cluster_t *cl = t->client->cluster;
    int rc =
        mf__redis_client_route_to(mf__target_client(cl, ct->whole_target), t);
    if (rc < 0)
        mf__cl_complete(t, MF_STATE_TASK_ERROR, rc);
}

/* One command read back: its slot, whether it only reads, whether it
 * opens a transaction. */
typedef struct mf__cl_seen {
    mf__ccmd_t *cmd;
    bool multi;
} mf__cl_seen_t;

static void mf__cl_command(void *ud, int argc, const char *const *argv,
                           const size_t *lens)
{
    mf__cl_seen_t *seen = ud;
    seen->cmd->slot =
        mf__redis_cmd_slot(argc, argv, lens, &seen->cmd->readonly);
    seen->multi = argc && lens[0] == 5 && strncasecmp(argv[0], "MULTI", 5) == 0;
}

/* The commands of the task, read back from their protocol form. */
static int mf__cl_parse(mf_redis_task_t *t)
{
    mf_redis_ctask_t *ct = t->cl;
    const char *p = t->cmds.data, *end = p + t->cmds.len;
    size_t at = 0;
    for (size_t i = 0; i < ct->ncmds; i++) {
        mf__cl_seen_t seen = {&ct->cmds[i], false};
        seen.cmd->off = at;
        if (!mf__redis_read_command(p, end, &at, mf__cl_command, &seen))
            return MF_ENOMEM;
        seen.cmd->len = at - seen.cmd->off;
        if (seen.multi)
            ct->whole_only = true;
    }
    return 0;
}

static void mf__cl_fail_waiting(mf_redis_cluster_t *cl);
static void mf__cl_release_waiting(mf_redis_cluster_t *cl);

static void mf__cl_dispatch(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    mf_redis_cluster_t *cl = t->client->cluster;
    if (!t->ncmds || t->unformatted) {
        t->phase = MF_RT_DONE;
        mf_task_complete(task, MF_STATE_TASK_ERROR,
                         t->unformatted ? MF_ENOMEM : MF_EINVAL);
        return;
    }
    if (t->in_multi || t->watching)
        t->dedicated = t->dirty = true;
    size_t size = sizeof(mf_redis_ctask_t) + t->ncmds * sizeof(mf__ccmd_t);
    mf_redis_ctask_t *ct = mf_loop_alloc(task->_loop, size);
    memset(ct, 0, size);
    ct->task = t;
    ct->ncmds = t->ncmds;
    mf_list_init(&ct->link);
    mf_list_init(&ct->kids);
    ct->whole_only = t->dedicated || t->forced;
    t->cl = ct;
    if (mf__redis_task_alloc_replies(t) < 0 || mf__cl_parse(t) < 0) {
        mf__cl_complete(t, MF_STATE_TASK_ERROR, MF_ENOMEM);
        return;
    }
    if (!cl->mapped) {
        ct->waiting = true;
        mf_list_push_back(&cl->waiting, &ct->link);
        t->phase = MF_RT_WAITING;
        mf__cl_refresh(cl);
        return;
    }
    mf__cl_send(t);
}

static void mf__cl_cancel(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    mf_redis_ctask_t *ct = t->cl;
    if (!ct)
        return; /* completed in dispatch */
    if (ct->waiting) {
        ct->waiting = false;
        mf_list_remove(&ct->link);
        mf__cl_complete(t, MF_STATE_CANCELED, MF_ECANCELED);
        return;
    }
    if (!ct->split) {
        mf__redis_task_cancel(task);
        return;
    }
    /* Each child's callback (now or later) settles the task. */
    ct->fail_state = MF_STATE_CANCELED;
    ct->fail_error = MF_ECANCELED;
    mf_list_t *node = ct->kids.next;
    while (node != &ct->kids) {
        mf_list_t *next = node->next;
        mf_task_cancel(mf_container_of(node, mf__kid_t, link)->task);
        node = next;
    }
}

static void mf__cl_destroy(mf_task_t *task)
{
    mf_redis_task_t *t = mf__rt(task);
    if (t->cl)
        mf_loop_free(task->_loop, t->cl,
                     sizeof(mf_redis_ctask_t) + t->ncmds * sizeof(mf__ccmd_t));
    mf__redis_task_destroy(task);
}

static const mf_task_ops_t mf__cl_ops = {"redis", mf__cl_dispatch,
                                         mf__cl_cancel, mf__cl_destroy};
static const mf_redis_task_hooks_t mf__cl_hooks = {
    mf__cl_on_reply, mf__cl_on_end, mf__redis_task_keep_refusal};
/* Every connection its nodes' clients opened (for this cluster or not:
 * a node's client is the loop's client of that URL). */
static uint64_t mf__cl_connects(const mf_redis_client_t *front)
{
    const mf_redis_cluster_t *cl = front->cluster;
    uint64_t n = 0;
    for (unsigned i = 0; i < cl->nnodes; i++) {
        n += mf_redis_client_connects(cl->nodes[i].master);
        if (cl->nodes[i].replica)
            n += mf_redis_client_connects(cl->nodes[i].replica);
    }
    return n;
}

/* A sharded channel's node: the master of its slot (the first seed while
 * no map is known: a MOVED then ends the subscriber). */
static mf_redis_client_t *mf__cl_shard_node(mf_redis_client_t *front,
                                            const char *channel, size_t len)
{
    mf_redis_cluster_t *cl = front->cluster;
    unsigned node = cl->slot_node[mf__redis_key_slot(channel, len)];
    if (!cl->mapped || node == MF__NO_NODE) {
        mf__cl_refresh(cl);
        return cl->nodes[0].master;
    }
    return cl->nodes[node].master;
}

static const mf_redis_kind_t mf__cl_kind = {&mf__cl_ops, &mf__cl_hooks,
                                            mf__cl_connects, mf__cl_shard_node};

/* ---- refreshing the map --------------------------------------------------
 */

static void mf__cl_ask(mf_redis_cluster_t *cl);

static void mf__cl_refresh_done(mf_task_t *q)
{
    mf_redis_cluster_t *cl = q->user;
    int state = mf_task_state(q), rc = 0;
    const mf_redis_reply_t *r = mf_task_redis_reply(q, 0);
    if (state != MF_STATE_SUCCESS) {
        cl->last_state = state;
        cl->last_error = mf_task_error(q);
        rc = -1;
    } else if (r->type == MF_REDIS_ERROR && !cl->use_slots && r->len > 20 &&
               strncasecmp(r->str, "ERR unknown subcommand", 22) == 0) {
        cl->use_slots = true; /* a server before 7.0 */
        cl->refresh_next--;
        mf__cl_ask(cl);
        return;
    } else if ((rc = r->type == MF_REDIS_ERROR ? MF_EPROTO
                                               : mf__read_map(cl, r)) < 0) {
        cl->last_state = MF_STATE_PROTOCOL_ERROR;
        cl->last_error = rc;
    }
    if (rc < 0 && ++cl->refresh_tries < cl->nnodes + 1) {
        mf__cl_ask(cl); /* the next node */
        return;
    }
    cl->refreshing = false;
    if (rc == 0) {
        cl->mapped = true;
        mf__cl_release_waiting(cl);
    } else {
        mf__cl_fail_waiting(cl);
    }
}

static void mf__cl_ask(mf_redis_cluster_t *cl)
{
    unsigned node = cl->refresh_next++ % cl->nnodes;
    mf_task_t *q =
        mf_task_redis_create(cl->nodes[node].master, mf__cl_refresh_done, cl);
    const char *argv[] = {"CLUSTER", cl->use_slots ? "SLOTS" : "SHARDS"};
    mf_task_redis_add_command(q, 2, argv, NULL);
    mf_task_start(q);
}

static void mf__cl_refresh_later(mf_timer_t *timer)
{
    mf_redis_cluster_t *cl = timer->data;
    cl->refresh_timer_on = false;
    mf__cl_refresh(cl);
}

/* A refresh now, or at the end of the gap after the last one (a MOVED
 * right after a refresh still gets the map that follows it). */
static void mf__cl_refresh(mf_redis_cluster_t *cl)
{
    uint64_t now = mf_loop_now(cl->loop);
    if (cl->refreshing || cl->refresh_timer_on)
        return;
    if (cl->mapped && now - cl->refresh_at < MF__REFRESH_GAP_MS) {
        cl->refresh_timer_on = true;
        mf_timer_set_ref(cl->loop, &cl->refresh_timer, false);
        mf_timer_start(cl->loop, &cl->refresh_timer,
                       MF__REFRESH_GAP_MS - (now - cl->refresh_at));
        return;
    }
    cl->refreshing = true;
    cl->refresh_tries = 0;
    cl->refresh_at = now;
    cl->refreshes++;
    mf__cl_ask(cl);
}

/* The tasks waiting now (not those their callbacks add: they wait for the
 * next map) are sent, or failed with the refresh's error. */
static void mf__cl_drain_waiting(mf_redis_cluster_t *cl, bool send)
{
    mf_list_t now, *node;
    mf_list_init(&now);
    mf_list_splice_back(&now, &cl->waiting);
    while ((node = mf_list_pop_front(&now)) != NULL) {
        mf_redis_ctask_t *ct = mf_container_of(node, mf_redis_ctask_t, link);
        mf_list_init(&ct->link);
        ct->waiting = false;
        if (send)
            mf__cl_send(ct->task);
        else
            mf__cl_complete(
                ct->task, cl->last_state ? cl->last_state : MF_STATE_SYS_ERROR,
                cl->last_error ? cl->last_error : MF_ECONNREFUSED);
    }
}

static void mf__cl_release_waiting(mf_redis_cluster_t *cl)
{
    mf__cl_drain_waiting(cl, true);
}

static void mf__cl_fail_waiting(mf_redis_cluster_t *cl)
{
    mf__cl_drain_waiting(cl, false);
}

/* ---- the client ----------------------------------------------------------
 */

/* ?read_from=replica|master */
static int mf__parse_query(mf_redis_opts_t *o, const char *q)
{
    if (!*q)
        return 0;
    if (strcmp(q, "read_from=replica") == 0)
        o->read_from_replica = true;
    else if (strcmp(q, "read_from=master") == 0)
        o->read_from_replica = false;
    else
        return MF_EINVAL;
    return 0;
}

/* redis[s]-cluster://[[user]:password@]host[:port][,host[:port]...][/][?q]:
 * the seeds become the first nodes. */
static int mf__parse_cluster_url(mf_redis_cluster_t *cl, mf_redis_opts_t *o,
                                 const char *url)
{
    size_t skip;
    if (strncasecmp(url, "redis-cluster://", 16) == 0)
        skip = 16;
    else if (strncasecmp(url, "rediss-cluster://", 17) == 0)
        skip = 17;
    else
        return MF_EINVAL;
    cl->tls = skip == 17;
    const char *auth = url + skip;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            at = auth + i;
    size_t ulen = at ? (size_t)(at - auth) + 1 : 0;
    cl->userinfo = mf_xmalloc(ulen + 1);
    memcpy(cl->userinfo, auth, ulen);
    cl->userinfo[ulen] = '\0';
    const char *rest = auth + alen;
    if (*rest == '/')
        rest++;
    if (*rest == '0') /* db 0: the only one a cluster has */
        rest++;
    if (*rest == '?')
        rest++;
    else if (*rest)
        return MF_EINVAL;
    if (mf__parse_query(o, rest) < 0)
        return MF_EINVAL;
    /* Every seed is checked before any node's client is made. */
    for (int make = 0; make < 2; make++) {
        const char *p = at ? at + 1 : auth, *end = auth + alen;
        while (p < end) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            const char *stop = comma ? comma : end;
            char host[MF_DNS_MAX_HOST + 1];
            uint16_t port = 6379;
            if (mf__net_parse_hostport(p, (size_t)(stop - p), host, &port) <
                    0 ||
                (comma && comma + 1 == end)) /* "host:port," */
                return MF_EINVAL;
            if (make &&
                mf__node_find(cl, host, strlen(host), port) == MF__NO_NODE)
                return MF_EINVAL;
            p = comma ? comma + 1 : end;
        }
    }
    return cl->nnodes ? 0 : MF_EINVAL;
}

static void mf__cluster_free(void *data)
{
    mf_redis_client_t *front = data;
    mf_redis_cluster_t *cl = front->cluster;
    if (cl) {
        if (cl->refresh_timer_on)
            mf_timer_stop(cl->loop, &cl->refresh_timer);
        mf_free(cl->nodes);
        mf_free(cl->shards);
        mf_free(cl->userinfo);
        mf_free(cl);
    }
    mf_free(front->url);
    mf_free(front);
}

static void mf__cluster_describe(const mf_endpoint_t *ep,
                                 mf_endpoint_stats_t *st, char *label,
                                 size_t cap)
{
    const mf_redis_client_t *front = mf_endpoint_data(ep);
    const mf_redis_cluster_t *cl = front->cluster;
    snprintf(label, cap, "cluster %s:%u (%u nodes)", cl->nodes[0].host,
             cl->nodes[0].port, cl->nnodes);
    st->label = label;
}

/* No connection of its own: its tasks run on the nodes' clients. */
static const mf_endpoint_ops_t mf__cluster_endpoint_ops = {
    .protocol = "redis-cluster",
    .free_data = mf__cluster_free,
    .describe = mf__cluster_describe,
};

static mf_redis_client_t *mf__cluster_new(mf_loop_t *loop, const char *url,
                                          const mf_redis_opts_t *opts)
{
    mf_redis_client_t *front = mf_xcalloc(1, sizeof(*front));
    mf_redis_cluster_t *cl = mf_xcalloc(1, sizeof(*cl));
    front->kind = &mf__cl_kind;
    front->cluster = cl;
    front->loop = loop;
    front->opts = *opts;
    mf_list_init(&front->subs);
    cl->front = front;
    cl->loop = loop;
    cl->node_opts = *opts;
    cl->node_opts.read_from_replica = false;
    mf_list_init(&cl->waiting);
    mf_timer_init(&cl->refresh_timer, mf__cl_refresh_later, cl);
    memset(cl->slot_node, 0xff, sizeof cl->slot_node);
    memset(cl->slot_shard, 0xff, sizeof cl->slot_shard);
    if (mf__parse_cluster_url(cl, &front->opts, url) < 0) {
        mf__cluster_free(front);
        return NULL;
    }
    front->url = mf_xmalloc(strlen(url) + 1);
    strcpy(front->url, url);
    snprintf(front->host, sizeof front->host, "%s", cl->nodes[0].host);
    front->port = cl->nodes[0].port;
    front->pubsub = cl->nodes[0].master;
    return front;
}

mf_redis_client_t *mf_redis_cluster_client(mf_loop_t *loop, const char *url,
                                           const mf_redis_opts_t *opts,
                                           int *error)
{
    mf_redis_client_t *c = NULL;
    if (url) {
        mf_redis_opts_t o;
        mf__redis_opts_normalize(&o, opts);
        char key[1024];
        int n = snprintf(key, sizeof key, "%s c%u r%u i%u p%u m%u x%llu v%d %s",
                         url, o.connect_timeout_ms, o.response_timeout_ms,
                         o.idle_timeout_ms, o.pipeline_connections,
                         o.max_connections, (unsigned long long)o.max_reply,
                         o.tls_verify ? 1 : 0, o.ca_file ? o.ca_file : "");
        if (n > 0 && (size_t)n < sizeof key) {
            mf_endpoint_t *ep =
                mf_endpoint_find(loop, &mf__cluster_endpoint_ops, key);
            c = ep ? mf_endpoint_data(ep) : NULL;
            if (!c && (c = mf__cluster_new(loop, url, &o)) != NULL) {
                mf_endpoint_limits_t limits = {0, 0, 0, 0};
                mf_endpoint_t *fresh = mf_endpoint_get(
                    loop, &mf__cluster_endpoint_ops, key, &limits);
                mf_endpoint_set_data(fresh, c);
                c->ep = fresh;
            }
        }
    }
    if (error)
        *error = c ? 0 : MF_EINVAL;
    return c;
}

int mf_redis_cluster_stats(const mf_redis_client_t *c,
                           mf_redis_cluster_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    if (!c->cluster)
        return MF_EINVAL;
    const mf_redis_cluster_t *cl = c->cluster;
    st->nodes = cl->nnodes;
    st->mapped = cl->mapped;
    st->refreshes = cl->refreshes;
    st->moved = cl->moved;
    st->asks = cl->asks;
    return 0;
}

mf_redis_client_t *mf__redis_cluster_slot_client(mf_redis_client_t *front,
                                                 int slot)
{
    mf_redis_cluster_t *cl = front->cluster;
    if (!cl->mapped)
        return NULL;
    return mf__target_client(cl, mf__slot_target(cl, slot, false));
}
