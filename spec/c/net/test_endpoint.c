/*
 * test_endpoint.c — the endpoint pool under a small protocol of the test's
 * own: each connection is one end of a socketpair (the other end plays the
 * peer), open as soon as the pool asks for it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonflow/endpoint.h>
#include <moonflow/moonflow.h>

#include "test.h"

typedef struct conn {
    mf_pconn_t pc;
    mf_io_t io;
    mf_loop_t *loop;
    int peer; /* the other end */
} conn_t;

typedef struct waiter {
    mf_pwaiter_t w;
    conn_t *got;
    bool opened; /* got is new */
} waiter_t;

static int opens, closes, data_freed;

static conn_t *conn_of(mf_pconn_t *pc)
{
    return mf_container_of(pc, conn_t, pc);
}

static void on_io(mf_io_t *io, unsigned events)
{
    (void)events;
    conn_t *c = io->data;
    if (mf_pconn_idle(&c->pc))
        mf_pconn_idle_fired(&c->pc);
}

static bool quiet(mf_pconn_t *pc)
{
    char byte;
    ssize_t n = recv(conn_of(pc)->io.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && errno == EAGAIN;
}

static void close_conn(mf_pconn_t *pc)
{
    conn_t *c = conn_of(pc);
    mf_io_stop(c->loop, &c->io);
    close(c->io.fd);
    close(c->peer);
    free(c);
    closes++;
}

static void open_conn(mf_endpoint_t *ep, mf_pwaiter_t *w)
{
    waiter_t *wt = mf_container_of(w, waiter_t, w);
    conn_t *c = calloc(1, sizeof(*c));
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    c->loop = mf_endpoint_loop(ep);
    c->peer = sv[1];
    mf_io_init(&c->io, sv[0], on_io, c);
    ASSERT_EQ(mf_io_start(c->loop, &c->io, MF_IO_READ), 0);
    mf_pconn_add(ep, &c->pc, &c->io);
    opens++;
    wt->got = c;
    wt->opened = true;
}

static void granted(mf_pwaiter_t *w, mf_pconn_t *pc)
{
    waiter_t *wt = mf_container_of(w, waiter_t, w);
    wt->got = conn_of(pc);
    wt->opened = false;
}

static void free_data(void *data)
{
    (void)data;
    data_freed++;
}

static const mf_endpoint_ops_t test_ops = {
    .protocol = "test",
    .open = open_conn,
    .healthy = quiet,
    .close = close_conn,
    .free_data = free_data,
};
/* Names an endpoint from its data, never from its key (which may hold a
 * password), and counts requests of its own. */
static void describe(const mf_endpoint_t *ep, mf_endpoint_stats_t *st,
                     char *label, size_t cap)
{
    snprintf(label, cap, "host-%s", (const char *)mf_endpoint_data(ep));
    st->label = label;
    st->requests = 7;
    st->waiters += 1;
}

static const mf_endpoint_ops_t other_ops = {.protocol = "other",
                                            .open = open_conn,
                                            .close = close_conn,
                                            .describe = describe};

static void reset(void)
{
    opens = closes = data_freed = 0;
}

static void waiter_init(waiter_t *w)
{
    memset(w, 0, sizeof(*w));
    mf_pwaiter_init(&w->w, granted);
}

static void timer_done(mf_timer_t *t)
{
    (void)t;
}

/* Runs the loop for ms milliseconds: a timer keeps it alive that long (the
 * pool's idle sockets and timers keep no loop running). */
static void run_for(mf_loop_t *loop, unsigned ms)
{
    mf_timer_t t;
    mf_timer_init(&t, timer_done, NULL);
    mf_timer_start(loop, &t, ms);
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

static void stats_check(void *ud, const mf_endpoint_stats_t *st)
{
    ASSERT_STR_EQ(st->protocol, "test");
    ASSERT_STR_EQ(st->key, "c:1");
    ASSERT_EQ(st->connections, 0);
    ASSERT_EQ(st->connects, 2);
    ASSERT_EQ(st->evictions, 2);
    *(bool *)ud = true;
}

TEST(idle_connections_time_out_and_a_peer_close_evicts)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    /* Timers count from the loop's cached time: read the clock first, and
     * keep the idle timeout well apart from the first wait (a loaded or
     * sanitized run may poll late). */
    mf_loop_update_time(loop);
    mf_endpoint_limits_t lim = {.idle_timeout_ms = 500};
    mf_endpoint_t *ep = mf_endpoint_get(loop, &test_ops, "c:1", &lim);
    waiter_t a, b;
    waiter_init(&a), waiter_init(&b);
    mf_endpoint_acquire(ep, &a.w);
    mf_endpoint_acquire(ep, &b.w);
    mf_endpoint_release(&a.got->pc);
    mf_endpoint_release(&b.got->pc);
    close(b.got->peer); /* the server closes one */
    b.got->peer = -1;
    run_for(loop, 50);
    ASSERT_EQ(closes, 1);
    ASSERT_EQ(mf_endpoint_idle_count(ep), 1);
    run_for(loop, 600);
    ASSERT_EQ(closes, 2);
    ASSERT_EQ(mf_endpoint_count(ep), 0);
    bool seen = false;
    mf_endpoint_stats(loop, "test", stats_check, &seen);
    ASSERT(seen);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0); /* nothing keeps it */
    mf_loop_destroy(loop);
}

TEST(an_unhealthy_idle_connection_is_never_handed_out)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_limits_t lim = {.idle_timeout_ms = 60000};
    mf_endpoint_t *ep = mf_endpoint_get(loop, &test_ops, "d:1", &lim);
    waiter_t a, b, c;
    waiter_init(&a), waiter_init(&b), waiter_init(&c);
    mf_endpoint_acquire(ep, &a.w);
    mf_endpoint_acquire(ep, &b.w);
    mf_endpoint_release(&a.got->pc);
    mf_endpoint_release(&b.got->pc);
    /* Bytes nobody asked for, not yet seen by the loop. */
    ASSERT_EQ(write(b.got->peer, "x", 1), 1);
    ASSERT_EQ(mf_endpoint_acquire(ep, &c.w), 0);
    ASSERT(c.got == a.got && !c.opened);
    ASSERT_EQ(closes, 1);
    mf_loop_destroy(loop);
    ASSERT_EQ(closes, 2);
}

TEST(max_idle_and_no_keepalive)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_limits_t lim = {.max_idle = 1, .idle_timeout_ms = 60000};
    mf_endpoint_t *ep = mf_endpoint_get(loop, &test_ops, "e:1", &lim);
    waiter_t a, b;
    waiter_init(&a), waiter_init(&b);
    mf_endpoint_acquire(ep, &a.w);
    mf_endpoint_acquire(ep, &b.w);
    mf_endpoint_release(&a.got->pc);
    mf_endpoint_release(&b.got->pc); /* a, the least recent, goes */
    ASSERT_EQ(closes, 1);
    ASSERT_EQ(mf_endpoint_idle_count(ep), 1);
    lim.idle_timeout_ms = 0; /* keep nothing */
    mf_endpoint_set_limits(ep, &lim);
    waiter_t c;
    waiter_init(&c);
    mf_endpoint_acquire(ep, &c.w);
    ASSERT(c.got == b.got);
    mf_endpoint_release(&c.got->pc);
    ASSERT_EQ(closes, 2);
    ASSERT_EQ(mf_endpoint_count(ep), 0);
    mf_loop_destroy(loop);
}

TEST(an_adopted_connection_is_taken_back_and_detached)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_t *ep = mf_endpoint_get(loop, &other_ops, "f:1", NULL);
    waiter_t a;
    waiter_init(&a);
    open_conn(ep, &a.w); /* opened by its owner, outside the pool */
    mf_pconn_detach(&a.got->pc);
    ASSERT_EQ(mf_endpoint_count(ep), 0);
    mf_endpoint_adopt_idle(ep, &a.got->pc, &a.got->io, 50);
    ASSERT_EQ(mf_endpoint_idle_count(ep), 1);
    mf_pconn_t *pc = mf_endpoint_take_idle(ep);
    ASSERT(pc == &a.got->pc);
    mf_pconn_detach(pc);
    ASSERT_EQ(mf_endpoint_count(ep), 0);
    ASSERT(mf_endpoint_take_idle(ep) == NULL);
    close_conn(pc);
    mf_loop_destroy(loop);
    ASSERT_EQ(closes, 1);
}

TEST(protocol_limits_reach_existing_and_later_endpoints_of_that_protocol)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_limits_t own = {.max_conns = 1, .idle_timeout_ms = 1000};
    mf_endpoint_t *before = mf_endpoint_get(loop, &test_ops, "g:1", &own);
    mf_endpoint_t *other = mf_endpoint_get(loop, &other_ops, "g:1", &own);
    waiter_t a, b;
    waiter_init(&a), waiter_init(&b);
    mf_endpoint_acquire(before, &a.w);
    mf_endpoint_acquire(before, &b.w); /* over max_conns: it waits */
    ASSERT(b.got == NULL && mf_endpoint_waiter_count(before) == 1);
    mf_endpoint_limits_t wide = {.max_conns = 2, .idle_timeout_ms = 5000};
    mf_endpoint_set_protocol_limits(loop, &test_ops, &wide);
    ASSERT(b.got != NULL && b.opened); /* the new slot served the waiter */
    ASSERT_EQ(mf_endpoint_limits(before)->idle_timeout_ms, 5000);
    ASSERT_EQ(mf_endpoint_limits(other)->max_conns, 1); /* another protocol */
    mf_endpoint_t *later = mf_endpoint_get(loop, &test_ops, "g:2", &own);
    ASSERT_EQ(mf_endpoint_limits(later)->max_conns, 2);
    ASSERT_EQ(mf_endpoint_limits(later)->idle_timeout_ms, 5000);
    wide.max_conns = 3; /* set again: replaced, not added */
    mf_endpoint_set_protocol_limits(loop, &test_ops, &wide);
    ASSERT_EQ(mf_endpoint_limits(later)->max_conns, 3);
    mf_loop_destroy(loop);
    ASSERT_EQ(closes, 2);
}

TEST(a_waiter_waits_for_a_returning_connection_instead_of_opening)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_limits_t lim = {.max_conns = 4, .idle_timeout_ms = 60000};
    mf_endpoint_t *ep = mf_endpoint_get(loop, &test_ops, "g:1", &lim);
    waiter_t a, b, c, d;
    waiter_init(&a), waiter_init(&b), waiter_init(&c), waiter_init(&d);
    mf_endpoint_acquire(ep, &a.w);
    mf_endpoint_acquire(ep, &b.w);
    ASSERT_EQ(opens, 2);
    conn_t *ca = a.got, *cb = b.got;
    mf_pconn_returning(&ca->pc); /* being reset, say */
    mf_pconn_returning(&cb->pc);
    c.got = d.got = NULL;
    ASSERT_EQ(mf_endpoint_acquire(ep, &c.w), 0);
    ASSERT_EQ(mf_endpoint_acquire(ep, &d.w), 0);
    ASSERT_EQ(opens, 2); /* both wait, though there are free slots */
    ASSERT_EQ(mf_endpoint_waiter_count(ep), 2);
    mf_endpoint_release(&ca->pc); /* clean again: the oldest waiter's */
    ASSERT(c.got == ca && !c.opened);
    ASSERT_EQ(mf_endpoint_waiter_count(ep), 1);
    /* The other one cannot be cleaned: its waiter gets a new connection. */
    mf_pconn_remove(&cb->pc);
    close_conn(&cb->pc);
    ASSERT(d.opened && d.got != NULL && d.got != cb);
    ASSERT_EQ(opens, 3);
    ASSERT_EQ(mf_endpoint_waiter_count(ep), 0);
    /* Nothing returns now: a new waiter opens at once. */
    waiter_t e;
    waiter_init(&e);
    mf_endpoint_acquire(ep, &e.w);
    ASSERT(e.opened);
    ASSERT_EQ(opens, 4);
    mf_loop_destroy(loop);
    ASSERT_EQ(closes, 4);
}

typedef struct walk {
    int seen;
    char labels[2][64];
    uint64_t requests[2];
    size_t waiters[2];
} walk_t;

static void walk_one(void *ud, const mf_endpoint_stats_t *st)
{
    walk_t *wk = ud;
    ASSERT(wk->seen < 2);
    snprintf(wk->labels[wk->seen], sizeof wk->labels[0], "%s %s", st->protocol,
             st->label);
    wk->requests[wk->seen] = st->requests;
    wk->waiters[wk->seen] = st->waiters;
    wk->seen++;
}

TEST(one_walk_reports_every_protocol_with_its_printable_label)
{
    reset();
    mf_loop_t *loop = mf_loop_create();
    mf_endpoint_get(loop, &test_ops, "user:secret@a:1", NULL);
    mf_endpoint_t *o =
        mf_endpoint_get(loop, &other_ops, "user:secret@b:2", NULL);
    static char host[] = "b:2";
    mf_endpoint_set_data(o, host);
    walk_t wk = {0};
    mf_endpoint_stats(loop, NULL, walk_one, &wk);
    ASSERT_EQ(wk.seen, 2);
    /* Without describe the label is the protocol; with it, the protocol's
     * words and numbers; neither shows the key. */
    int t = strncmp(wk.labels[0], "test", 4) == 0 ? 0 : 1;
    ASSERT_STR_EQ(wk.labels[t], "test test");
    ASSERT_EQ(wk.requests[t], 0);
    ASSERT_STR_EQ(wk.labels[1 - t], "other host-b:2");
    ASSERT_EQ(wk.requests[1 - t], 7);
    ASSERT_EQ(wk.waiters[1 - t], 1);
    wk.seen = 0;
    mf_endpoint_stats(loop, "other", walk_one, &wk);
    ASSERT_EQ(wk.seen, 1);
    mf_loop_destroy(loop);
}
