/* The redis client's connections against a real redis-server
 * (redis_harness.h): dedicated connections for blocking and state-changing
 * commands and their bounded pool, AUTH and SELECT from the URL on every
 * connection, task timeouts on shared, dedicated and pooled connections,
 * the response and idle timeouts, cancel, and TLS (rediss://) verified
 * against a CA. */
#include "redis_harness.h"

/* ---- dedicated connections and their pool -------------------------------- */

static void on_blpop(mf_task_t *task)
{
    on_done(task);
}

TEST(blocking_command_waits_on_a_dedicated_connection_while_others_go_on)
{
    mf_redis_client_t *c = setup();
    expect(c, "DEL queue", ":0");
    result_t blpop = {0};
    mf_task_t *t = task_of(c, &blpop, "BLPOP queue 5");
    mf_task_set_callback(t, on_blpop);
    mf_task_start(t);
    for (int i = 0; i < 5; i++)
        expect(c, "PING", "+PONG"); /* not stuck behind BLPOP */
    ASSERT_EQ(blpop.done, 0);
    expect(c, "RPUSH queue job", ":1");
    run_until(&blpop.done, 1);
    ASSERT_STR_EQ(blpop.text, "[$queue,$job]");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    /* The dedicated connection is clean: the next blocking task reuses it. */
    expect(c, "RPUSH queue again; BLPOP queue 1", ":1 | [$queue,$again]");
    expect(c, "BLPOP queue 0.01", "*nil");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    teardown();
}

/* Waits until redis-server counts n clients blocked in a command: the
 * dedicated connections connect and send asynchronously, in no fixed
 * order. */
static void wait_blocked(mf_redis_client_t *c, int n)
{
    char want[64];
    snprintf(want, sizeof want, "blocked_clients:%d\r", n);
    for (int i = 0; i < 500; i++) {
        result_t r;
        run(c, &r, "INFO clients");
        if (strstr(r.text, want))
            return;
        usleep(10000);
    }
    MF_TEST_FAIL("redis-server never counted %d blocked clients", n);
}

static int popped(const result_t *r, const char *value)
{
    char line[32];
    snprintf(line, sizeof line, "[$q1,$%s]", value);
    return r->done && strcmp(r->text, line) == 0;
}

static int stats_clients;
static mf_redis_client_stats_t stats_last;

static void on_client_stats(void *ud, const mf_redis_client_stats_t *st)
{
    (void)ud;
    stats_clients++;
    stats_last = *st;
    stats_last.host = NULL; /* valid during the call only */
}

/* The loop's one Redis client, as mf_redis_clients_stats reports it. */
static void stats_of(mf_redis_client_stats_t *out, int *clients)
{
    stats_clients = 0;
    mf_redis_clients_stats(loop, on_client_stats, NULL);
    *out = stats_last;
    *clients = stats_clients;
}

TEST(dedicated_pool_is_bounded_and_waiters_get_the_next_free_connection)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_connections = 2;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    expect(c, "DEL q1", ":0");
    static result_t rs[4];
    for (int i = 0; i < 4; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        mf_task_start(task_of(c, &rs[i], "BLPOP q1 5"));
    }
    /* Two block in BLPOP (which of them first is up to the connects), two
     * wait for a connection. */
    wait_blocked(c, 2);
    ASSERT_EQ(rs[2].done + rs[3].done, 0);
    mf_redis_client_stats_t st = {0};
    int clients = 0;
    stats_of(&st, &clients);
    ASSERT_EQ(clients, 1);
    ASSERT_EQ(st.dedicated, 2);
    ASSERT_EQ(st.idle, 0);
    ASSERT_EQ(st.waiters, 2);
    ASSERT_EQ(st.commands, 1 + 4); /* DEL, then the BLPOPs */
    expect(c, "RPUSH q1 v0", ":1");
    uint64_t end = now_ms() + 10000;
    while (rs[0].done + rs[1].done < 1 && now_ms() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    result_t *first = rs[0].done ? &rs[0] : &rs[1];
    result_t *second = rs[0].done ? &rs[1] : &rs[0];
    ASSERT(popped(first, "v0"));
    /* The freed connection goes to the oldest waiter, rs[2]; had rs[3]
     * taken it, v2 below would go to rs[3], blocked longer. */
    wait_blocked(c, 2);
    expect(c, "RPUSH q1 v1", ":1"); /* redis serves the longest blocked */
    run_until(&second->done, 1);
    ASSERT(popped(second, "v1"));
    wait_blocked(c, 2);
    expect(c, "RPUSH q1 v2", ":1");
    run_until(&rs[2].done, 1);
    ASSERT(popped(&rs[2], "v2"));
    expect(c, "RPUSH q1 v3", ":1");
    run_until(&rs[3].done, 1);
    ASSERT(popped(&rs[3], "v3"));
    ASSERT_EQ(mf_redis_client_connects(c), 3); /* shared + 2 pooled */
    stats_of(&st, &clients);
    ASSERT_EQ(st.connects, 3);
    ASSERT_EQ(st.dedicated, 2);
    ASSERT_EQ(st.idle, 2);
    ASSERT_EQ(st.waiters, 0);
    ASSERT(st.commands >= 1 + 4 + 4); /* and the RPUSHes, the checks */
    ASSERT(st.writes >= 5 && st.writes <= st.commands + 3);
    teardown();
}

TEST(watch_runs_dedicated_and_a_clean_connection_is_reused)
{
    mf_redis_client_t *c = setup();
    expect(c, "SET w 1", "+OK");
    expect(c, "WATCH w; MULTI; INCR w; EXEC", "+OK | +OK | +QUEUED | [:2]");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    expect(c, "WATCH w; UNWATCH", "+OK | +OK");
    ASSERT_EQ(mf_redis_client_connects(c), 2); /* reused: state clean */
    /* WATCH left open: the connection is closed after the task. */
    expect(c, "WATCH w", "+OK");
    expect(c, "WATCH w; UNWATCH", "+OK | +OK");
    ASSERT_EQ(mf_redis_client_connects(c), 3);
    /* SELECT changes the connection: never reused either. */
    expect(c, "SELECT 2; SET indb2 yes", "+OK | +OK");
    expect(c, "GET indb2", "nil"); /* the shared connection is still on 0 */
    mf_task_t *t = mf_task_redis_create(c, on_done, NULL);
    result_t r = {0};
    t->user = &r;
    const char *argv[] = {"PING"};
    mf_task_redis_add_command(t, 1, argv, NULL);
    mf_task_redis_set_dedicated(t, true);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+PONG");
    ASSERT_EQ(mf_redis_client_connects(c), 4); /* SELECT's was closed */
    teardown();
}

TEST(url_db_and_credentials_apply_to_every_connection)
{
    mf_redis_client_t *c = setup();
    expect(c, "ACL SETUSER alice on >s3cret ~* &* +@all", "+OK");
    mf_redis_client_t *db3 = setup_with(NULL, 3, NULL);
    expect(db3, "SET where three", "+OK");
    expect(c, "GET where", "nil");
    mf_redis_client_t *alice = setup_with("alice:s3cret", 3, NULL);
    expect(alice, "ACL WHOAMI; GET where", "$alice | $three");
    /* A dedicated connection says AUTH/SELECT too. */
    expect(alice, "BLPOP nothing 0.01; GET where", "*nil | $three");
    /* A refused AUTH fails the tasks waiting for that connection. */
    mf_redis_client_t *bad = setup_with("alice:wrong", 0, NULL);
    result_t r;
    run(bad, &r, "PING");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_EQ(r.n, 0);
    /* ... and the task keeps Redis's reason. */
    ASSERT(strncmp(r.text, "WRONGPASS ", 10) == 0);
    /* A database that does not exist: SELECT is refused the same way. */
    mf_redis_client_t *nodb = setup_with(NULL, 99, NULL);
    run(nodb, &r, "PING");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_STR_EQ(r.text, "ERR DB index is out of range");
    /* Every task that waited for the refused connection has the reason. */
    static result_t waiting[3];
    for (int i = 0; i < 3; i++) {
        memset(&waiting[i], 0, sizeof waiting[i]);
        mf_task_start(task_of(nodb, &waiting[i], "PING"));
    }
    for (int i = 0; i < 3; i++) {
        run_until(&waiting[i].done, 1);
        EXPECT_STATE(waiting[i], MF_STATE_TASK_ERROR, MF_EACCES);
        ASSERT_STR_EQ(waiting[i].text, "ERR DB index is out of range");
    }
    teardown();
}

/* ---- timeouts and cancel ------------------------------------------------- */

/* A script that keeps the server busy for ms milliseconds. */
static mf_task_t *busy_task(mf_redis_client_t *c, result_t *r, int ms)
{
    mf_task_t *t = mf_task_redis_create(c, on_done, r);
    char script[256];
    snprintf(script, sizeof script,
             "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] "
             "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s "
             "> %d return 'slept'",
             ms * 1000);
    const char *argv[] = {"EVAL", script, "0"};
    mf_task_redis_add_command(t, 3, argv, NULL);
    return t;
}

TEST(a_task_that_times_out_on_the_shared_connection_fails_alone)
{
    mf_redis_client_t *c = setup();
    expect(c, "SET after ok", "+OK");
    result_t slow = {0}, next = {0};
    mf_task_t *t = busy_task(c, &slow, 300);
    mf_task_set_timeout(t, 50);
    mf_task_start(t);
    mf_task_start(task_of(c, &next, "GET after"));
    run_until(&slow.done, 1);
    EXPECT_STATE(slow, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT_EQ(slow.n, 0);
    ASSERT_EQ(next.done, 0);
    run_until(&next.done, 1);
    /* The late "slept" was dropped; the next task got its own reply. */
    ASSERT_STR_EQ(next.text, "$ok");
    expect(c, "PING", "+PONG");
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

TEST(a_task_that_times_out_on_a_dedicated_connection_closes_it)
{
    mf_redis_client_t *c = setup();
    result_t r = {0};
    mf_task_t *t = task_of(c, &r, "BLPOP never 10");
    mf_task_set_timeout(t, 50);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    expect(c, "BLPOP never 0.01", "*nil");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    teardown();
}

/* A client whose connections wait ms for a reply. */
static mf_redis_client_t *setup_response_timeout(uint32_t ms)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.response_timeout_ms = ms;
    return setup_with(NULL, 0, &o);
}

TEST(a_silent_shared_connection_is_closed_after_the_response_timeout)
{
    mf_redis_client_t *c = setup_response_timeout(100);
    expect(c, "PING", "+PONG");
    result_t slow = {0}, other = {0};
    mf_task_start(busy_task(c, &slow, 400));
    mf_task_start(task_of(c, &other, "PING"));
    run_until(&other.done, 1);
    ASSERT_EQ(slow.done, 1);
    EXPECT_STATE(slow, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    EXPECT_STATE(other, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    usleep(400000); /* let the script end; then a new connection serves */
    expect(c, "PING", "+PONG");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    teardown();
}

TEST(a_shared_connection_whose_replies_keep_coming_outlives_the_timeout)
{
    /* Each reply restarts the response timeout: A's reply comes at 90 ms,
     * B's (sent at 50 ms) at 180 ms; no silence reaches 150 ms, the busy
     * time does (a silent one is closed: the test above). */
    mf_redis_client_t *c = setup_response_timeout(150);
    expect(c, "PING", "+PONG");
    result_t a = {0}, b = {0};
    uint64_t t0 = now_ms();
    mf_task_start(busy_task(c, &a, 90));
    while (now_ms() - t0 < 50)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    mf_task_start(busy_task(c, &b, 90));
    run_until(&b.done, 1);
    ASSERT_EQ(a.done, 1);
    EXPECT_STATE(a, MF_STATE_SUCCESS, 0);
    EXPECT_STATE(b, MF_STATE_SUCCESS, 0);
    ASSERT(now_ms() - t0 >= 170);
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

TEST(a_blocking_command_may_wait_past_the_response_timeout)
{
    mf_redis_client_t *c = setup_response_timeout(100);
    uint64_t t0 = now_ms();
    expect(c, "BLPOP nothing-here 0.4", "*nil");
    ASSERT(now_ms() - t0 >= 350);
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

TEST(a_task_waiting_for_a_pooled_connection_can_time_out)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_connections = 1;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    result_t holder = {0}, waiter = {0}, after = {0};
    mf_task_start(task_of(c, &holder, "BLPOP wq 5"));
    mf_task_t *t = task_of(c, &waiter, "BLPOP wq 5");
    mf_task_set_timeout(t, 50);
    mf_task_start(t);
    mf_task_start(task_of(c, &after, "BLPOP wq 5"));
    run_until(&waiter.done, 1);
    EXPECT_STATE(waiter, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    expect(c, "RPUSH wq a", ":1");
    run_until(&holder.done, 1);
    ASSERT_STR_EQ(holder.text, "[$wq,$a]");
    expect(c, "RPUSH wq b", ":1");
    run_until(&after.done, 1); /* the timed-out waiter left the line */
    ASSERT_STR_EQ(after.text, "[$wq,$b]");
    ASSERT_EQ(mf_redis_client_connects(c), 2); /* shared + the one pooled */
    teardown();
}

TEST(a_canceled_task_completes_once_with_canceled)
{
    mf_redis_client_t *c = setup();
    result_t r = {0}, next = {0};
    mf_task_t *t = busy_task(c, &r, 100);
    mf_task_start(t);
    mf_task_start(task_of(c, &next, "ECHO fine"));
    mf_loop_run(loop, MF_RUN_NOWAIT);
    mf_task_cancel(t);
    run_until(&next.done, 1);
    EXPECT_STATE(r, MF_STATE_CANCELED, MF_ECANCELED);
    ASSERT_EQ(r.done, 1);
    ASSERT_STR_EQ(next.text, "$fine");
    teardown();
}

/* ---- idle connections and TLS -------------------------------------------- */

TEST(idle_connections_close_after_the_idle_timeout_or_when_the_server_does)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.idle_timeout_ms = 100;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    expect(c, "PING", "+PONG");
    expect(c, "BLPOP idle 0.01", "*nil");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    /* Idle connections do not keep the loop alive... */
    uint64_t t0 = now_ms();
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(now_ms() - t0 < 50);
    usleep(150000);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* ...and their timers close them */
    expect(c, "PING", "+PONG");
    expect(c, "BLPOP idle 0.01", "*nil");
    ASSERT_EQ(mf_redis_client_connects(c), 4);

    /* The server drops every other client: the next task reconnects. */
    mf_redis_client_t *d = setup();
    expect(d, "PING", "+PONG");
    uint64_t before = mf_redis_client_connects(d);
    /* d's shared connection goes, and c's dedicated one unless its 100 ms
     * idle timeout closed it first (a loaded machine is that slow). */
    result_t kill;
    run(c, &kill, "CLIENT KILL TYPE normal SKIPME yes");
    ASSERT_EQ(kill.state, MF_STATE_SUCCESS);
    ASSERT(strcmp(kill.text, ":2") == 0 || strcmp(kill.text, ":1") == 0);
    for (int i = 0; i < 20; i++) { /* the hang-up reaches us */
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(2000);
    }
    expect(d, "PING", "+PONG");
    ASSERT_EQ(mf_redis_client_connects(d), before + 1);
    int err = 0;
    ASSERT(mf_redis_client(loop, NULL, NULL, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
    teardown();
}

TEST(rediss_verifies_the_server_against_the_given_ca)
{
    static server_t tls; /* static: stop_servers may see it at exit */
    server_start(&tls, true);
    loop = mf_loop_create();
    char url[64], ca[128];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%u/1", tls.port);
    snprintf(ca, sizeof ca, "%s/c.pem", tls.dir);
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.ca_file = ca;
    mf_redis_client_t *good = mf_redis_client(loop, url, &o, NULL);
    expect(good, "SET t 1; GET t", "+OK | $1");
    expect(good, "BLPOP tq 0.01", "*nil");
    subres_t s = {0};
    const char *chans[] = {"tls"};
    mf_redis_subscriber_t *sub =
        mf_redis_subscribe(good, 1, chans, NULL, false, on_message, &s);
    wait_subscribers(good, "tls", 1);
    publish_until(good, &s, 1, "PUBLISH tls hi");
    mf_redis_subscriber_close(sub);
    run_until(&s.ended, 1);
    /* The system bundle does not know this self-signed certificate. */
    mf_redis_client_t *sys = mf_redis_client(loop, url, NULL, NULL);
    result_t r;
    run(sys, &r, "PING");
    EXPECT_STATE(r, MF_STATE_TLS_ERROR, MF_ETLS);
    o.ca_file = NULL;
    o.tls_verify = false;
    expect(mf_redis_client(loop, url, &o, NULL), "GET t", "$1");
    /* Plain text to a TLS port: the server hangs up. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", tls.port);
    run(mf_redis_client(loop, url, NULL, NULL), &r, "PING");
    ASSERT(r.state != MF_STATE_SUCCESS);
    teardown();
    server_stop(&tls);
}
