/*
 * test_mysql_pool.c — the pool and sessions against a real mariadbd: many
 * tasks through few connections (counted on the server), the wait queue's
 * bounds, idle connections closing, the reset before reuse, and sessions
 * (order, SET @v, transactions rolled back by the reset).
 */
#include <moonflow/endpoint.h>

#include "mysql/mysql_harness.h"

static mf_mysql_opts_t pool_opts(unsigned max, unsigned waiters,
                                 uint32_t wait_ms)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = max;
    o.max_waiters = waiters;
    o.wait_timeout_ms = wait_ms;
    return o;
}

TEST(five_hundred_queries_share_eight_connections)
{
    mf_mysql_opts_t o = pool_opts(8, 1024, 30000);
    mf_mysql_client_t *c = setup_with(&o);
    static result_t r[500];
    int done = 0;
    for (int i = 0; i < 500; i++) {
        char sql[64];
        memset(&r[i], 0, sizeof r[i]);
        snprintf(sql, sizeof sql, "SELECT %d, SLEEP(0.002)", i);
        mf_task_start(query_task(c, &r[i], sql));
    }
    int most = 0;
    for (int round = 0; round < 4000 && done < 500; round++) {
        mf_loop_run(loop, MF_RUN_ONCE);
        done = 0;
        for (int i = 0; i < 500; i++)
            done += r[i].done;
        if (round % 50 == 0) {
            int n = server_connections("app");
            most = n > most ? n : most;
        }
        ASSERT(mf_mysql_client_open(c) <= 8);
    }
    ASSERT_EQ(done, 500);
    for (int i = 0; i < 500; i++) {
        char want[32];
        EXPECT_STATE(r[i], MF_STATE_SUCCESS, 0);
        snprintf(want, sizeof want, "i:%d,i:0", i);
        ASSERT_STR_EQ(r[i].text, want);
    }
    fprintf(stderr, "500 queries: at most %d server connections seen\n", most);
    ASSERT(most >= 1 && most <= 8);
    ASSERT(server_connections("app") <= 8);
    ASSERT_EQ(mf_mysql_client_connects(c), 8);
    teardown();
}

TEST(a_full_wait_queue_fails_at_once_with_ebusy)
{
    mf_mysql_opts_t o = pool_opts(1, 2, 30000);
    mf_mysql_client_t *c = setup_with(&o);
    result_t r[4] = {0};
    mf_task_start(query_task(c, &r[0], "SELECT SLEEP(0.5)"));
    mf_task_start(query_task(c, &r[1], "SELECT 1"));
    mf_task_start(query_task(c, &r[2], "SELECT 2"));
    mf_task_start(query_task(c, &r[3], "SELECT 3"));
    run_until(&r[3].done, 1);
    EXPECT_STATE(r[3], MF_STATE_TASK_ERROR, MF_EBUSY);
    ASSERT_EQ(r[0].done + r[1].done + r[2].done, 0);
    run_until(&r[2].done, 1);
    ASSERT_STR_EQ(r[1].text, "i:1");
    ASSERT_STR_EQ(r[2].text, "i:2");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_task_that_waits_too_long_for_a_connection_times_out)
{
    mf_mysql_opts_t o = pool_opts(1, 8, 200);
    mf_mysql_client_t *c = setup_with(&o);
    result_t slow = {0}, waiter = {0};
    mf_task_start(query_task(c, &slow, "SELECT SLEEP(1.5)"));
    mf_task_start(query_task(c, &waiter, "SELECT 1"));
    uint64_t t0 = now_ms();
    run_until(&waiter.done, 1);
    uint64_t waited = now_ms() - t0;
    EXPECT_STATE(waiter, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT(waited >= 150 && waited < 1400);
    ASSERT_EQ(slow.done, 0);
    run_until(&slow.done, 1);
    EXPECT_STATE(slow, MF_STATE_SUCCESS, 0);
    teardown();
}

typedef struct mysql_seen {
    int clients;
    mf_mysql_client_stats_t last;
} mysql_seen_t;

static void on_mysql_stats(void *ud, const mf_mysql_client_stats_t *st)
{
    mysql_seen_t *seen = ud;
    seen->clients++;
    seen->last = *st;
    seen->last.host = seen->last.db = NULL; /* valid during the call only */
}

/* The endpoint pool's walk, as serve's metrics read it. */
static void on_endpoint(void *ud, const mf_endpoint_stats_t *st)
{
    char expect[64];
    snprintf(expect, sizeof expect, "127.0.0.1:%u/test", main_server.port);
    ASSERT_STR_EQ(st->protocol, "mysql");
    ASSERT_STR_EQ(st->label, expect); /* not the user, not the password */
    ASSERT_EQ(st->connects, 3);
    (*(int *)ud)++;
}

TEST(idle_connections_close_after_the_idle_timeout)
{
    mf_mysql_opts_t o = pool_opts(4, 8, 5000);
    o.idle_timeout_ms = 200;
    mf_mysql_client_t *c = setup_with(&o);
    result_t r[3] = {0};
    for (int i = 0; i < 3; i++)
        mf_task_start(query_task(c, &r[i], "SELECT SLEEP(0.1)"));
    run_until(&r[2].done, 1);
    ASSERT_EQ(mf_mysql_client_open(c), 3);
    mysql_seen_t seen = {0};
    mf_mysql_clients_stats(loop, on_mysql_stats, &seen);
    ASSERT_EQ(seen.clients, 1);
    ASSERT_EQ(seen.last.connections, 3);
    ASSERT(seen.last.idle <= 3); /* some may still be resetting */
    ASSERT_EQ(seen.last.waiters, 0);
    ASSERT_EQ(seen.last.connects, 3);
    ASSERT_EQ(seen.last.evictions, 0);
    int walked = 0;
    mf_endpoint_stats(loop, NULL, on_endpoint, &walked);
    ASSERT_EQ(walked, 1);
    spin(600);
    ASSERT_EQ(mf_mysql_client_open(c), 0);
    seen.clients = 0;
    mf_mysql_clients_stats(loop, on_mysql_stats, &seen);
    ASSERT_EQ(seen.last.connections, 0);
    ASSERT_EQ(seen.last.evictions, 3);
    for (int i = 0; i < 100 && server_connections("app") > 0; i++)
        usleep(20000);
    ASSERT_EQ(server_connections("app"), 0);
    teardown();
}

TEST(a_transaction_left_open_is_rolled_back_before_reuse)
{
    mf_mysql_opts_t o = pool_opts(1, 8, 5000);
    mf_mysql_client_t *c = setup_with(&o);
    expect(c,
           "DROP TABLE IF EXISTS acct; CREATE TABLE acct (id INT) "
           "ENGINE=InnoDB",
           "ok | ok");
    expect(c, "START TRANSACTION; INSERT INTO acct VALUES (1); SET @v = 5",
           "ok | ok | ok");
    expect(c, "SELECT COUNT(*), @v, @@in_transaction FROM acct",
           "i:0,NULL,u:0");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

/* ---- sessions ------------------------------------------------------------ */

static void session_run(mf_mysql_client_t *c, mf_mysql_session_t *s,
                        result_t *r, const char *sql)
{
    memset(r, 0, sizeof *r);
    mf_task_t *t = query_task(c, r, sql);
    mf_task_mysql_set_session(t, s);
    mf_task_start(t);
    run_until(&r->done, 1);
}

TEST(a_session_keeps_its_variables_until_closed)
{
    mf_mysql_opts_t o = pool_opts(2, 8, 5000);
    mf_mysql_client_t *c = setup_with(&o);
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    result_t r;
    session_run(c, s, &r, "SET @v = 42");
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    session_run(c, s, &r, "SELECT @v, CONNECTION_ID()");
    ASSERT(strncmp(r.text, "i:42,", 5) == 0);
    char id[32];
    ASSERT(strlen(r.text + 5) < sizeof id);
    memcpy(id, r.text + 5, strlen(r.text + 5) + 1);
    ASSERT(!mf_mysql_session_broken(s));
    mf_mysql_session_close(s);
    /* the same connection, reset: the variable is gone */
    run(c, &r, "SELECT @v, CONNECTION_ID()");
    char want[64];
    snprintf(want, sizeof want, "NULL,%s", id);
    ASSERT_STR_EQ(r.text, want);
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_session_runs_its_tasks_in_order_on_one_connection)
{
    mf_mysql_opts_t o = pool_opts(4, 8, 5000);
    mf_mysql_client_t *c = setup_with(&o);
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    static result_t r[5];
    const char *sqls[5] = {"SET @n = 1", "SELECT SLEEP(0.05)",
                           "SET @n = @n * 10 + 2", "SET @n = @n * 10 + 3",
                           "SELECT @n"};
    for (int i = 0; i < 5; i++) {
        memset(&r[i], 0, sizeof r[i]);
        mf_task_t *t = query_task(c, &r[i], sqls[i]);
        mf_task_mysql_set_session(t, s);
        mf_task_start(t);
    }
    run_until(&r[4].done, 1);
    for (int i = 0; i < 5; i++)
        EXPECT_STATE(r[i], MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r[4].text, "i:123");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    mf_mysql_session_close(s);
    teardown();
}

TEST(closing_a_session_rolls_back_its_open_transaction)
{
    mf_mysql_opts_t o = pool_opts(1, 8, 5000);
    mf_mysql_client_t *c = setup_with(&o);
    expect(c, "DROP TABLE IF EXISTS tx; CREATE TABLE tx (id INT) ENGINE=InnoDB",
           "ok | ok");
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    result_t r;
    session_run(c, s, &r, "START TRANSACTION");
    session_run(c, s, &r, "INSERT INTO tx VALUES (1)");
    session_run(c, s, &r, "SELECT COUNT(*) FROM tx");
    ASSERT_STR_EQ(r.text, "i:1");
    mf_mysql_session_close(s);
    expect(c, "SELECT COUNT(*) FROM tx", "i:0");
    /* a committed one stays */
    s = mf_mysql_session_open(c);
    session_run(c, s, &r, "START TRANSACTION; INSERT INTO tx VALUES (2)");
    session_run(c, s, &r, "COMMIT");
    mf_mysql_session_close(s);
    expect(c, "SELECT id FROM tx", "i:2");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_session_whose_connection_was_killed_is_broken)
{
    mf_mysql_opts_t o = pool_opts(2, 8, 5000);
    o.query_timeout_ms = 200;
    mf_mysql_client_t *c = setup_with(&o);
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    static result_t r[300];
    int done = 0;
    for (int i = 0; i < 300; i++) {
        memset(&r[i], 0, sizeof r[i]);
        mf_task_t *t = query_task(c, &r[i], i ? "SELECT 1" : "SELECT SLEEP(3)");
        mf_task_mysql_set_session(t, s);
        mf_task_start(t);
    }
    for (int round = 0; round < 2000 && done < 300; round++) {
        mf_loop_run(loop, MF_RUN_ONCE);
        done = 0;
        for (int i = 0; i < 300; i++)
            done += r[i].done;
    }
    ASSERT_EQ(done, 300);
    EXPECT_STATE(r[0], MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT(mf_mysql_session_broken(s));
    for (int i = 1; i < 300; i++) /* queued behind it: never run */
        EXPECT_STATE(r[i], MF_STATE_SYS_ERROR, MF_ECLOSED);
    result_t after;
    session_run(c, s, &after, "SELECT 1");
    EXPECT_STATE(after, MF_STATE_SYS_ERROR, MF_ECLOSED);
    mf_mysql_session_close(s);
    expect(c, "SELECT 2", "i:2");
    teardown();
}

TEST(destroying_the_loop_with_tasks_in_flight_closes_everything)
{
    mf_mysql_opts_t o = pool_opts(2, 8, 5000);
    mf_mysql_client_t *c = setup_with(&o);
    expect(c, "SELECT 1", "i:1"); /* one idle connection */
    static result_t r[5];
    for (int i = 0; i < 5; i++) {
        memset(&r[i], 0, sizeof r[i]);
        mf_task_start(query_task(c, &r[i], "SELECT SLEEP(5) /* dropped */"));
    }
    spin(100); /* two running, three waiting */
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    (void)s; /* left open: the loop frees it */
    teardown();
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(r[i].done, 0); /* dropped, never called back */
    /* the server sees the connections go and ends their statements */
    for (int i = 0; i < 250 && server_connections("app") > 0; i++)
        usleep(20000);
    ASSERT_EQ(server_connections("app"), 0);
}
