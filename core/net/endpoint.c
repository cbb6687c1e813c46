/*
 * endpoint.c — the endpoint pool (moonflow/endpoint.h): the loop's
 * endpoints, their connections, idle lists, waiters, limits and counters,
 * written once for every protocol.
 *
 * Ownership: the registry is the loop's value under mf__endpoint_key and
 * owns the endpoints (one mf_xmalloc each, key inline, kept until the loop
 * ends). Connections are the protocols': the pool links them and, when it
 * drops one, hands it to ops->close. Waiters are the tasks': linked only.
 *
 * May call: the loop (timers, watchers' ref), libc. Knows no protocol.
 */
#include <string.h>

#include "moonflow/endpoint.h"
#include "moonflow/error.h"

struct mf_endpoint {
    mf_list_t link; /* the registry's endpoints */
    mf_loop_t *loop;
    const mf_endpoint_ops_t *ops;
    mf_endpoint_limits_t limits;
    void *data;
    mf_list_t conns;   /* every connection: busy, idle or opening */
    mf_list_t idle;    /* idle ones, most recently used first */
    mf_list_t waiters; /* oldest first */
    size_t nconns, nidle, nwaiters;
    size_t nreturning; /* busy ones on their way back: mf_pconn_returning */
    uint64_t connects, evictions;
    bool closing; /* the loop is ending: no waiter is served */
    char key[];
};

/* A protocol's loop-wide limits (mf_endpoint_set_protocol_limits). */
typedef struct mf_protocol_limits {
    mf_list_t link; /* the registry's protocols */
    const mf_endpoint_ops_t *ops;
    mf_endpoint_limits_t limits;
} mf_protocol_limits_t;

typedef struct mf_endpoint_registry {
    mf_list_t endpoints;
    mf_list_t protocols; /* mf_protocol_limits_t, one per ops that set them */
} mf_endpoint_registry_t;

static void mf__registry_free(mf_loop_t *loop, void *value);

/* Above TLS and DNS (closing a connection frees its SSL object and cancels
 * its DNS query) and the protocols' other per-loop state; below the
 * bindings (a Lua host's teardown still closes pooled connections). */
#define MF_ENDPOINT_RANK 30
static mf_loop_key_t mf__endpoint_key =
    MF_LOOP_KEY_INIT(MF_ENDPOINT_RANK, mf__registry_free);

static mf_endpoint_registry_t *mf__registry(mf_loop_t *loop, bool create)
{
    mf_endpoint_registry_t *reg = mf_loop_get(loop, &mf__endpoint_key);
    if (reg || !create)
        return reg;
    reg = mf_xmalloc(sizeof(*reg));
    mf_list_init(&reg->endpoints);
    mf_list_init(&reg->protocols);
    mf_loop_set(loop, &mf__endpoint_key, reg);
    return reg;
}

/* ---- the idle list ------------------------------------------------------ */

static void mf__idle_unlink(mf_pconn_t *c)
{
    mf_endpoint_t *ep = c->ep;
    mf_list_remove(&c->idle_link);
    ep->nidle--;
    mf_timer_stop(ep->loop, &c->idle_timer);
    if (c->io)
        mf_io_set_ref(ep->loop, c->io, true);
}

/* Out of the endpoint at once, then closed by its protocol. */
static void mf__drop(mf_pconn_t *c)
{
    const mf_endpoint_ops_t *ops = c->ep->ops;
    mf_pconn_remove(c);
    ops->close(c);
}

static void mf__evict(mf_pconn_t *c)
{
    c->ep->evictions++;
    mf__drop(c);
}

static void mf__idle_expired(mf_timer_t *timer)
{
    mf__evict(timer->data);
}

static void mf__idle_link(mf_pconn_t *c, uint32_t idle_ms)
{
    mf_endpoint_t *ep = c->ep;
    if (ep->limits.max_idle)
        while (ep->nidle >= ep->limits.max_idle) /* the least recent goes */
            mf__evict(mf_container_of(ep->idle.prev, mf_pconn_t, idle_link));
    mf_list_push_front(&ep->idle, &c->idle_link);
    ep->nidle++;
    if (c->io)
        mf_io_set_ref(ep->loop, c->io, false);
    mf_timer_start(ep->loop, &c->idle_timer, idle_ms);
}

static bool mf__healthy(const mf_endpoint_t *ep, mf_pconn_t *c)
{
    return !ep->ops->healthy || ep->ops->healthy(c);
}

mf_pconn_t *mf_endpoint_take_idle(mf_endpoint_t *ep)
{
    while (!mf_list_empty(&ep->idle)) {
        mf_pconn_t *c = mf_container_of(ep->idle.next, mf_pconn_t, idle_link);
        if (!mf__healthy(ep, c)) { /* what came since its last use */
            mf__evict(c);
            continue;
        }
        mf__idle_unlink(c);
        c->uses++;
        return c;
    }
    return NULL;
}

void mf_pconn_idle_fired(mf_pconn_t *c)
{
    if (!c->ep || !mf_pconn_idle(c))
        return;
    if (!c->ep->ops->idle_event || c->ep->ops->idle_event(c))
        mf__evict(c);
}

/* ---- waiters ------------------------------------------------------------ */

static bool mf__has_slot(const mf_endpoint_t *ep)
{
    return !ep->limits.max_conns || ep->nconns < ep->limits.max_conns;
}

/* A slot or an idle connection freed up: the oldest waiter takes it, unless
 * the connections on their way back will serve every waiter. */
static void mf__serve_waiter(mf_endpoint_t *ep)
{
    if (ep->closing || mf_list_empty(&ep->waiters))
        return;
    if (mf_list_empty(&ep->idle) &&
        (!mf__has_slot(ep) || ep->nwaiters <= ep->nreturning))
        return;
    mf_pwaiter_t *w =
        mf_container_of(mf_list_pop_front(&ep->waiters), mf_pwaiter_t, link);
    ep->nwaiters--;
    mf_endpoint_acquire(ep, w);
}

int mf_endpoint_acquire(mf_endpoint_t *ep, mf_pwaiter_t *w)
{
    mf_pconn_t *c = mf_endpoint_take_idle(ep);
    if (c) {
        w->granted(w, c);
        return 0;
    }
    bool returning = ep->nwaiters < ep->nreturning; /* one will serve w */
    if (!returning && mf__has_slot(ep) && !ep->closing) {
        ep->ops->open(ep, w);
        return 0;
    }
    if (ep->limits.max_waiters && ep->nwaiters >= ep->limits.max_waiters)
        return MF_EBUSY;
    w->ep = ep;
    mf_list_push_back(&ep->waiters, &w->link);
    ep->nwaiters++;
    return 0;
}

void mf_pwaiter_cancel(mf_pwaiter_t *w)
{
    if (!mf_list_linked(&w->link))
        return;
    mf_list_remove(&w->link);
    w->ep->nwaiters--;
}

/* ---- connections -------------------------------------------------------- */

/* Links c into ep, busy; counts no connect. */
static void mf__pconn_link(mf_endpoint_t *ep, mf_pconn_t *c, mf_io_t *io)
{
    c->ep = ep;
    c->io = io;
    c->uses = 0;
    c->returning = false;
    mf_list_init(&c->idle_link);
    mf_timer_init(&c->idle_timer, mf__idle_expired, c);
    mf_timer_set_ref(ep->loop, &c->idle_timer, false);
    mf_list_push_back(&ep->conns, &c->link);
    ep->nconns++;
}

void mf_pconn_add(mf_endpoint_t *ep, mf_pconn_t *c, mf_io_t *io)
{
    mf__pconn_link(ep, c, io);
    ep->connects++;
}

static void mf__unreturn(mf_pconn_t *c)
{
    if (!c->returning)
        return;
    c->returning = false;
    c->ep->nreturning--;
}

void mf_pconn_returning(mf_pconn_t *c)
{
    if (c->returning || !c->ep)
        return;
    c->returning = true;
    c->ep->nreturning++;
}

void mf_endpoint_release(mf_pconn_t *c)
{
    mf_endpoint_t *ep = c->ep;
    mf__unreturn(c);
    if (!mf_list_empty(&ep->waiters) && !ep->closing) {
        mf_pwaiter_t *w = mf_container_of(mf_list_pop_front(&ep->waiters),
                                          mf_pwaiter_t, link);
        ep->nwaiters--;
        c->uses++;
        w->granted(w, c);
        return;
    }
    if (!ep->limits.idle_timeout_ms || ep->closing) {
        mf__drop(c);
        return;
    }
    mf__idle_link(c, ep->limits.idle_timeout_ms);
}

void mf_pconn_detach(mf_pconn_t *c)
{
    mf_endpoint_t *ep = c->ep;
    if (!ep)
        return;
    if (mf_pconn_idle(c))
        mf__idle_unlink(c);
    mf__unreturn(c);
    mf_list_remove(&c->link);
    ep->nconns--;
    c->ep = NULL;
}

void mf_pconn_remove(mf_pconn_t *c)
{
    mf_endpoint_t *ep = c->ep;
    if (!ep)
        return;
    mf_pconn_detach(c);
    mf__serve_waiter(ep); /* a slot is free now */
}

void mf_endpoint_adopt_idle(mf_endpoint_t *ep, mf_pconn_t *c, mf_io_t *io,
                            uint32_t idle_ms)
{
    mf__pconn_link(ep, c, io); /* opened by its owner: no connect counted */
    if (!idle_ms)
        idle_ms = ep->limits.idle_timeout_ms;
    if (!idle_ms) {
        mf__drop(c);
        return;
    }
    mf__idle_link(c, idle_ms);
}

/* ---- the registry ------------------------------------------------------- */

static void mf__endpoint_free(mf_endpoint_t *ep)
{
    ep->closing = true;
    while (!mf_list_empty(&ep->waiters)) /* they go with the loop */
        mf_pwaiter_cancel(
            mf_container_of(ep->waiters.next, mf_pwaiter_t, link));
    while (!mf_list_empty(&ep->conns))
        mf__drop(mf_container_of(ep->conns.next, mf_pconn_t, link));
    if (ep->ops->free_data && ep->data)
        ep->ops->free_data(ep->data);
    mf_free(ep);
}

static void mf__registry_free(mf_loop_t *loop, void *value)
{
    mf_endpoint_registry_t *reg = value;
    (void)loop;
    mf_list_t *node;
    while ((node = mf_list_pop_front(&reg->endpoints)) != NULL)
        mf__endpoint_free(mf_container_of(node, mf_endpoint_t, link));
    while ((node = mf_list_pop_front(&reg->protocols)) != NULL)
        mf_free(mf_container_of(node, mf_protocol_limits_t, link));
    mf_free(reg);
}

mf_endpoint_t *mf_endpoint_find(const mf_loop_t *loop,
                                const mf_endpoint_ops_t *ops, const char *key)
{
    mf_endpoint_registry_t *reg = mf__registry((mf_loop_t *)loop, false);
    if (!reg)
        return NULL;
    mf_list_t *node;
    mf_list_foreach(node, &reg->endpoints)
    {
        mf_endpoint_t *ep = mf_container_of(node, mf_endpoint_t, link);
        if (ep->ops == ops && strcmp(ep->key, key) == 0) {
            mf_list_remove(&ep->link); /* busy endpoints are found first */
            mf_list_push_front(&reg->endpoints, &ep->link);
            return ep;
        }
    }
    return NULL;
}

static mf_protocol_limits_t *mf__protocol_limits(mf_endpoint_registry_t *reg,
                                                 const mf_endpoint_ops_t *ops)
{
    mf_list_t *node;
    mf_list_foreach(node, &reg->protocols)
    {
        mf_protocol_limits_t *p =
            mf_container_of(node, mf_protocol_limits_t, link);
        if (p->ops == ops)
            return p;
    }
    return NULL;
}

void mf_endpoint_set_protocol_limits(mf_loop_t *loop,
                                     const mf_endpoint_ops_t *ops,
                                     const mf_endpoint_limits_t *limits)
{
    mf_endpoint_registry_t *reg = mf__registry(loop, true);
    mf_protocol_limits_t *p = mf__protocol_limits(reg, ops);
    if (!p) {
        p = mf_xmalloc(sizeof(*p));
        p->ops = ops;
        mf_list_push_back(&reg->protocols, &p->link);
    }
    p->limits = *limits;
    mf_list_t *node, *next;
    /* set_limits may serve a waiter, whose open may make endpoints (at
     * the front): walk from a saved next. */
    for (node = reg->endpoints.next; node != &reg->endpoints; node = next) {
        next = node->next;
        mf_endpoint_t *ep = mf_container_of(node, mf_endpoint_t, link);
        if (ep->ops == ops)
            mf_endpoint_set_limits(ep, limits);
    }
}

mf_endpoint_t *mf_endpoint_get(mf_loop_t *loop, const mf_endpoint_ops_t *ops,
                               const char *key,
                               const mf_endpoint_limits_t *limits)
{
    mf_endpoint_t *ep = mf_endpoint_find(loop, ops, key);
    if (ep)
        return ep;
    mf_endpoint_registry_t *reg = mf__registry(loop, true);
    size_t n = strlen(key) + 1;
    ep = mf_xcalloc(1, sizeof(*ep) + n);
    memcpy(ep->key, key, n);
    ep->loop = loop;
    ep->ops = ops;
    const mf_protocol_limits_t *p = mf__protocol_limits(reg, ops);
    if (p)
        ep->limits = p->limits;
    else if (limits)
        ep->limits = *limits;
    mf_list_init(&ep->conns);
    mf_list_init(&ep->idle);
    mf_list_init(&ep->waiters);
    mf_list_push_front(&reg->endpoints, &ep->link);
    return ep;
}

void mf_endpoint_set_limits(mf_endpoint_t *ep,
                            const mf_endpoint_limits_t *limits)
{
    ep->limits = *limits;
    mf__serve_waiter(ep); /* a higher max_conns frees slots */
}

const mf_endpoint_limits_t *mf_endpoint_limits(const mf_endpoint_t *ep)
{
    return &ep->limits;
}

void mf_endpoint_set_data(mf_endpoint_t *ep, void *data)
{
    ep->data = data;
}

void *mf_endpoint_data(const mf_endpoint_t *ep)
{
    return ep->data;
}

const char *mf_endpoint_key(const mf_endpoint_t *ep)
{
    return ep->key;
}

mf_loop_t *mf_endpoint_loop(const mf_endpoint_t *ep)
{
    return ep->loop;
}

size_t mf_endpoint_count(const mf_endpoint_t *ep)
{
    return ep->nconns;
}

size_t mf_endpoint_idle_count(const mf_endpoint_t *ep)
{
    return ep->nidle;
}

size_t mf_endpoint_waiter_count(const mf_endpoint_t *ep)
{
    return ep->nwaiters;
}

void mf_endpoint_stats(mf_loop_t *loop, const char *protocol,
                       mf_endpoint_stats_fn fn, void *ud)
{
    mf_endpoint_registry_t *reg = mf__registry(loop, false);
    if (!reg)
        return;
    mf_list_t *node;
    mf_list_foreach(node, &reg->endpoints)
    {
        const mf_endpoint_t *ep = mf_container_of(node, mf_endpoint_t, link);
        if (protocol && strcmp(ep->ops->protocol, protocol) != 0)
            continue;
        mf_endpoint_stats_t st = {.protocol = ep->ops->protocol,
                                  .label = ep->ops->protocol,
                                  .key = ep->key,
                                  .data = ep->data,
                                  .connections = ep->nconns,
                                  .idle = ep->nidle,
                                  .waiters = ep->nwaiters,
                                  .connects = ep->connects,
                                  .evictions = ep->evictions};
        char label[MF_ENDPOINT_LABEL_MAX];
        if (ep->ops->describe)
            ep->ops->describe(ep, &st, label, sizeof label);
        fn(ud, &st);
    }
}
