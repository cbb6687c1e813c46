/*
 * moonflow/endpoint.h — the endpoint pool: one per loop, under every
 * client (HTTP, Redis, MySQL, byte streams, the load generator).
 *
 * An endpoint is one place a protocol connects to, named by a key the
 * protocol builds from what makes two connections interchangeable (host,
 * port, TLS and its verification, credentials, database ...). It holds its
 * connections, busy and idle; the idle ones, most recently used first; the
 * tasks waiting for a connection, oldest first; its limits and its
 * counters. A protocol keeps its wire code and its task; it supplies an
 * ops table and embeds mf_pconn_t in its connection and mf_pwaiter_t in
 * its task, as tasks embed mf_task_t.
 *
 * The cycle of a connection:
 *   mf_endpoint_acquire(ep, w)   an idle connection that passes ops->healthy
 *                                goes to w->granted at once; else, below
 *                                max_conns, ops->open(ep, w) makes one for w
 *                                (the slot is w's from then on); else w
 *                                waits (MF_EBUSY when max_waiters wait).
 *   mf_pconn_add(ep, c)          ops->open counts its new connection in.
 *   mf_endpoint_release(c)       the user is done and c is clean: the
 *                                oldest waiter gets it, or it goes idle
 *                                (its idle timer runs; over max_idle the
 *                                least recently used idle one is closed).
 *   mf_pconn_remove(c)           the protocol closed c: its slot goes to the
 *                                oldest waiter (ops->open for it).
 *   mf_pconn_returning(c)        (optional) c is being cleaned before its
 *                                release (a session reset): a waiter waits
 *                                for it instead of opening another one.
 * The pool closes an idle connection itself (idle timeout, an event on an
 * idle socket, a failed health check, over max_idle, the loop's end) by
 * removing it and calling ops->close, which frees it.
 *
 * Ownership: the loop's pool owns the endpoints (freed with the loop, after
 * ops->close of every connection still in them and ops->free_data of the
 * endpoint's data). The protocol owns its connections' memory; the pool
 * owns only the links in mf_pconn_t. A waiter belongs to its task; the
 * pool only links it.
 *
 * Threads: loop thread only, like the loop.
 */
#ifndef MOONFLOW_ENDPOINT_H
#define MOONFLOW_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "list.h"
#include "loop.h"

/* The longest label ops->describe may write, NUL included. */
#define MF_ENDPOINT_LABEL_MAX 320

MF_EXTERN_C_BEGIN

typedef struct mf_endpoint mf_endpoint_t;
typedef struct mf_pconn mf_pconn_t;
typedef struct mf_pwaiter mf_pwaiter_t;

/* The part of a connection the pool links; embedded by the protocol. */
struct mf_pconn {
    mf_endpoint_t *ep;   /* NULL when in no endpoint */
    mf_list_t link;      /* ep's connections */
    mf_list_t idle_link; /* ep's idle list while idle */
    mf_timer_t idle_timer;
    mf_io_t *io; /* the protocol's watcher: unref'd while idle (may be NULL) */
    uint64_t uses; /* times handed out from idle */
    /* busy, on its way back (mf_pconn_returning) */
    bool returning;
};

/* c: an idle connection, the waiter's now (its socket keeps the loop
 * alive again). The waiter is unlinked before the call. */
typedef void (*mf_pwaiter_granted_fn)(mf_pwaiter_t *w, mf_pconn_t *c);

/* The part of a task that waits for a connection; embedded by the task.
 * Set it up with mf_pwaiter_init before its first acquire. */
struct mf_pwaiter {
    mf_list_t link;    /* ep's waiters while waiting */
    mf_endpoint_t *ep; /* where it waits */
    mf_pwaiter_granted_fn granted;
};

typedef struct mf_endpoint_stats mf_endpoint_stats_t;

typedef struct mf_endpoint_ops {
    const char *protocol; /* "http", "redis" ...: the stats' first column */
    /* Makes a new connection for w (whose slot it is): the protocol
     * allocates it, calls mf_pconn_add, opens it (resolve, connect, TLS,
     * handshake, or a library's own connect) and serves w when it is
     * open. A connection that fails to open is closed by the protocol with
     * mf_pconn_remove. Required for mf_endpoint_acquire. */
    void (*open)(mf_endpoint_t *ep, mf_pwaiter_t *w);
    /* Whether an idle connection can still be used (nothing to read, no
     * end of file) before it is handed out. NULL: always. */
    bool (*healthy)(mf_pconn_t *c);
    /* An idle connection's socket fired (the peer closed it or sent bytes
     * nobody asked for): true drops it. NULL: drop. */
    bool (*idle_event)(mf_pconn_t *c);
    /* Closes and frees a connection the pool dropped; it is already out of
     * its endpoint. Required. */
    void (*close)(mf_pconn_t *c);
    /* Frees the endpoint's data at the loop's end. NULL: nothing to free. */
    void (*free_data)(void *data);
    /* Completes an endpoint's stats for mf_endpoint_stats: writes a name
     * for people into label (cap bytes; never a credential, so it may be
     * logged and exported) and points st->label at it; fills the counters
     * only the protocol keeps (requests, writes) and may count what it
     * holds beside the pool (connections opened outside it, tasks bound to
     * a connection being opened). NULL: the label is the protocol's name. */
    void (*describe)(const mf_endpoint_t *ep, mf_endpoint_stats_t *st,
                     char *label, size_t cap);
} mf_endpoint_ops_t;

typedef struct mf_endpoint_limits {
    unsigned max_conns;       /* busy + idle + opening; 0: no limit */
    unsigned max_waiters;     /* 0: no limit */
    unsigned max_idle;        /* 0: no limit */
    uint32_t idle_timeout_ms; /* 0: a released connection is closed */
} mf_endpoint_limits_t;

struct mf_endpoint_stats {
    const char *protocol; /* ops->protocol */
    const char *label;    /* ops->describe's name for people: printable */
    const char *key;      /* the endpoint's key; valid during the call. It
                             may hold credentials (a URL's password): never
                             print or export it, describe the endpoint from
                             the protocol's data instead */
    const void *data;     /* the protocol's data (mf_endpoint_data) */
    size_t connections;   /* busy, idle or opening */
    size_t idle;
    size_t waiters;
    uint64_t connects;  /* connections added */
    uint64_t evictions; /* idle ones closed: timed out, by the peer, unhealthy
                           or over max_idle */
    uint64_t requests;  /* requests carried, where the protocol counts them
                           (ops->describe); else 0 */
    uint64_t writes;    /* writes that carried them (requests / writes: the
                           batching), where counted; else 0 */
};
typedef void (*mf_endpoint_stats_fn)(void *ud, const mf_endpoint_stats_t *st);

/* The loop's endpoint of (ops, key), made on first use with limits (NULL:
 * none) and no data. Endpoints live until the loop ends: a process talks
 * to few peers. A found endpoint moves to the front of the search. */
MF_API mf_endpoint_t *mf_endpoint_get(mf_loop_t *loop,
                                      const mf_endpoint_ops_t *ops,
                                      const char *key,
                                      const mf_endpoint_limits_t *limits);
/* The endpoint of (ops, key) if the loop has one, else NULL. */
MF_API mf_endpoint_t *mf_endpoint_find(const mf_loop_t *loop,
                                       const mf_endpoint_ops_t *ops,
                                       const char *key);
MF_API void mf_endpoint_set_limits(mf_endpoint_t *ep,
                                   const mf_endpoint_limits_t *limits);
/* A protocol's loop-wide limits (a configuration call such as
 * mf_http_pool_configure): every endpoint of ops on the loop gets them
 * now, and an endpoint of ops made later gets them instead of the limits
 * mf_endpoint_get is given. */
MF_API void mf_endpoint_set_protocol_limits(mf_loop_t *loop,
                                            const mf_endpoint_ops_t *ops,
                                            const mf_endpoint_limits_t *limits);
MF_API const mf_endpoint_limits_t *mf_endpoint_limits(const mf_endpoint_t *ep);
/* The protocol's data for the endpoint (freed by ops->free_data). */
MF_API void mf_endpoint_set_data(mf_endpoint_t *ep, void *data);
MF_API void *mf_endpoint_data(const mf_endpoint_t *ep);
MF_API const char *mf_endpoint_key(const mf_endpoint_t *ep);
MF_API mf_loop_t *mf_endpoint_loop(const mf_endpoint_t *ep);
MF_API size_t mf_endpoint_count(const mf_endpoint_t *ep);
MF_API size_t mf_endpoint_idle_count(const mf_endpoint_t *ep);
MF_API size_t mf_endpoint_waiter_count(const mf_endpoint_t *ep);

/* Gives w a connection: an idle healthy one through w->granted before
 * returning, a new one through ops->open, or a place in the wait queue.
 * 0, or MF_EBUSY when max_waiters are waiting already (w is not linked). */
MF_API int mf_endpoint_acquire(mf_endpoint_t *ep, mf_pwaiter_t *w);
/* The most recently used idle connection that is healthy, taken out of
 * the idle list (still counted in the endpoint), or NULL: for a caller
 * that opens its own when there is none (mf_pconn_add). Unhealthy ones met
 * on the way are closed. */
MF_API mf_pconn_t *mf_endpoint_take_idle(mf_endpoint_t *ep);
static inline void mf_pwaiter_init(mf_pwaiter_t *w,
                                   mf_pwaiter_granted_fn granted)
{
    mf_list_init(&w->link);
    w->ep = NULL;
    w->granted = granted;
}
/* A waiting w gives up (timeout, cancel); harmless when not waiting. */
MF_API void mf_pwaiter_cancel(mf_pwaiter_t *w);
static inline bool mf_pwaiter_waiting(const mf_pwaiter_t *w)
{
    return mf_list_linked(&w->link);
}

/* Counts c, a new connection, in ep (busy). io: its watcher, which the
 * pool unrefs while c is idle (idle sockets keep no loop running); NULL
 * when the protocol has none of its own. */
MF_API void mf_pconn_add(mf_endpoint_t *ep, mf_pconn_t *c, mf_io_t *io);
/* c is done and clean: to the oldest waiter, or idle (closed at once with
 * ops->close when the limits keep no idle connection). */
MF_API void mf_endpoint_release(mf_pconn_t *c);
/* c leaves its endpoint (the protocol closes it): idle or busy, its slot
 * goes to the oldest waiter. Harmless when c is in no endpoint. */
MF_API void mf_pconn_remove(mf_pconn_t *c);
/* c, busy, is on its way back: the protocol cleans it (resets a session)
 * before mf_endpoint_release, or closes it (mf_pconn_remove) if that fails.
 * Until then a task that finds no idle connection waits for it instead of
 * opening one, one waiter per returning connection, as a connection about
 * to be free is cheaper than a new one. */
MF_API void mf_pconn_returning(mf_pconn_t *c);
/* Takes c out of its endpoint without serving a waiter: for a connection
 * handed to an owner the pool no longer counts (a byte stream taken back
 * by its user). */
MF_API void mf_pconn_detach(mf_pconn_t *c);
/* Puts an open connection the pool did not count into ep's idle list
 * (mf_pconn_add + mf_endpoint_release in one), with an idle timeout of
 * idle_ms (0: the endpoint's). */
MF_API void mf_endpoint_adopt_idle(mf_endpoint_t *ep, mf_pconn_t *c,
                                   mf_io_t *io, uint32_t idle_ms);
/* The watcher of an idle connection fired: ask ops->idle_event, drop it
 * if so. For the protocol's io callback while c is idle. */
MF_API void mf_pconn_idle_fired(mf_pconn_t *c);
static inline bool mf_pconn_idle(const mf_pconn_t *c)
{
    return mf_list_linked(&c->idle_link);
}

/* Calls fn for each endpoint of the loop, every protocol in one walk (for
 * a metrics scrape, not per request). protocol NULL: all, else only
 * endpoints whose ops->protocol is that string. */
MF_API void mf_endpoint_stats(mf_loop_t *loop, const char *protocol,
                              mf_endpoint_stats_fn fn, void *ud);

MF_EXTERN_C_END

#endif /* MOONFLOW_ENDPOINT_H */
