/*
 * test_mysql_faults.c — what goes wrong on the way, against a real
 * mariadbd: queries past their timeout (killed on the server, gone from
 * its process list; a burst of them killed over one connection), the
 * engine's per-task timeout, a canceled query that runs on (its connection
 * kept, or KILLed at its query timeout), a pooled connection
 * killed by the server, a refused port, a silent one past the connect
 * timeout, a name that does not resolve, and a server restart under load.
 */
/* before the harness: its parameter names the harness's global loop */
#include "dns_stub.h"

#include "mysql/mysql_harness.h"

/* Statements of user app still running on the server whose text starts
 * with prefix. */
static int running_like(const char *prefix)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE "
             "USER='app' AND INFO LIKE '%s%%'",
             prefix);
    return atoi(admin(sql));
}

/* Waits (bounded) until no such statement runs; says how long it took
 * after the task's timeout (t0). */
static void expect_gone(const char *prefix, uint64_t t0)
{
    for (int i = 0; i < 250 && running_like(prefix) > 0; i++)
        usleep(20000);
    ASSERT_EQ(running_like(prefix), 0);
    fprintf(stderr, "%s gone from the process list %llu ms after the timeout\n",
            prefix, (unsigned long long)(now_ms() - t0));
}

TEST(a_query_past_its_timeout_is_killed_on_the_server)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.query_timeout_ms = 300;
    mf_mysql_client_t *c = setup_with(&o);
    result_t r;
    uint64_t t0 = now_ms();
    run(c, &r, "SELECT SLEEP(20) /* timeout */");
    EXPECT_STATE(r, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT(now_ms() - t0 < 5000);
    uint64_t ended = now_ms();
    ASSERT_EQ(mf_mysql_client_open(c), 0); /* closed on our side */
    spin(50);                              /* the KILL goes out */
    expect_gone("SELECT SLEEP(20)", ended);
    expect(c, "SELECT 1", "i:1");
    ASSERT_EQ(mf_mysql_client_connects(c), 2);
    teardown();
}

TEST(the_engines_task_timeout_kills_the_query_too)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.query_timeout_ms = 0; /* none of its own */
    mf_mysql_client_t *c = setup_with(&o);
    result_t r = {0};
    mf_task_t *t = query_task(c, &r, "SELECT SLEEP(21)");
    mf_task_set_timeout(t, 300);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    uint64_t ended = now_ms();
    spin(50);
    expect_gone("SELECT SLEEP(21)", ended);
    expect(c, "SELECT 2", "i:2");
    teardown();
}

/* Connections the server has accepted so far, the asking one included. */
static long server_accepted(void)
{
    const char *v = admin("SELECT VARIABLE_VALUE FROM "
                          "information_schema.GLOBAL_STATUS WHERE "
                          "VARIABLE_NAME='CONNECTIONS'");
    return atol(v);
}

TEST(a_burst_of_timeouts_sends_its_kills_over_one_connection)
{
    enum { N = 8 };
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = N;
    o.query_timeout_ms = 300;
    mf_mysql_client_t *c = setup_with(&o);
    static result_t rs[N];
    /* N overlapping statements open the whole pool first, so the burst's
     * N statements go out in one iteration and time out together. */
    for (int i = 0; i < N; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        mf_task_start(query_task(c, &rs[i], "SELECT SLEEP(0.1)"));
    }
    for (int i = 0; i < N; i++)
        run_until(&rs[i].done, 1);
    ASSERT_EQ(mf_mysql_client_connects(c), N);
    long before = server_accepted();
    for (int i = 0; i < N; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        mf_task_start(query_task(c, &rs[i], "SELECT SLEEP(22) /* burst */"));
    }
    for (int i = 0; i < N; i++) {
        run_until(&rs[i].done, 1);
        EXPECT_STATE(rs[i], MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    }
    uint64_t ended = now_ms();
    spin(300); /* the KILLs go out, one after another */
    /* One KILL connection for the N statements (not N of them), and the
     * one asking. */
    ASSERT_EQ(server_accepted() - before, 2);
    expect_gone("SELECT SLEEP(22)", ended);
    expect(c, "SELECT 3", "i:3");
    teardown();
}

TEST(a_canceled_short_query_runs_on_and_keeps_its_connection)
{
    mf_mysql_client_t *c = setup();
    expect(c, "SELECT 1", "i:1");
    result_t r = {0};
    mf_task_t *t = query_task(c, &r, "SELECT SLEEP(0.3) /* run on */");
    mf_task_start(t);
    spin(50);
    ASSERT_EQ(r.done, 0);
    mf_task_cancel(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_CANCELED, MF_ECANCELED);
    /* The caller moved on; the statement finishes on the server. */
    ASSERT_EQ(running_like("SELECT SLEEP(0.3)"), 1);
    spin(500);
    ASSERT_EQ(running_like("SELECT SLEEP(0.3)"), 0);
    expect(c, "SELECT 2", "i:2");
    ASSERT_EQ(mf_mysql_client_connects(c), 1); /* no KILL, no reconnect */
    teardown();
}

TEST(a_canceled_query_that_runs_on_is_killed_at_its_query_timeout)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.query_timeout_ms = 600;
    mf_mysql_client_t *c = setup_with(&o);
    result_t r = {0};
    mf_task_t *t = query_task(c, &r, "SELECT SLEEP(23) /* run on */");
    mf_task_start(t);
    spin(50);
    mf_task_cancel(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_CANCELED, MF_ECANCELED);
    ASSERT_EQ(running_like("SELECT SLEEP(23)"), 1);
    spin(800); /* past the query timeout: KILLed */
    expect_gone("SELECT SLEEP(23)", now_ms());
    expect(c, "SELECT 3", "i:3");
    ASSERT_EQ(mf_mysql_client_connects(c), 2);
    teardown();
}

TEST(a_pooled_connection_killed_by_the_server_is_replaced)
{
    mf_mysql_client_t *c = setup();
    result_t r;
    run(c, &r, "SELECT CONNECTION_ID()");
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    char sql[64];
    snprintf(sql, sizeof sql, "KILL CONNECTION %d", atoi(r.text + 2));
    admin(sql);
    /* no wait: the next task must not be handed the dead connection */
    run(c, &r, "SELECT 3");
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "i:3");
    ASSERT_EQ(mf_mysql_client_connects(c), 2);
    ASSERT_EQ(mf_mysql_client_open(c), 1);
    teardown();
}

TEST(a_refused_port_fails_with_econnrefused)
{
    setup();
    uint16_t port = mf_test_free_port();
    char url[128];
    snprintf(url, sizeof url, "mysql://app:secret@127.0.0.1:%u/test", port);
    mf_mysql_client_t *c = client_at(url);
    result_t r;
    run(c, &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    ASSERT(r.code == 2002 || r.code == 2003);
    ASSERT(r.message[0] != '\0');
    ASSERT_EQ(mf_mysql_client_open(c), 0);
    teardown();
}

TEST(a_host_name_is_resolved_by_the_net_layer)
{
    setup();
    char url[128];
    snprintf(url, sizeof url, "mysql://app:secret@localhost:%u/test",
             main_server.port);
    mf_mysql_client_t *c = client_at(url);
    /* over TCP (the connector would take "localhost" for its socket) */
    expect(c,
           "SELECT HOST LIKE '127.0.0.1:%' FROM "
           "information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
           "i:1");
    teardown();
}

TEST(a_server_that_never_greets_fails_with_the_connect_timeout)
{
    setup();
    uint16_t port = 0;
    int fd = mf_test_bind_loopback(&port, 8); /* accepts, never speaks */
    ASSERT(fd >= 0);
    char url[160];
    snprintf(url, sizeof url,
             "mysql://app:secret@127.0.0.1:%u/test?connect_timeout=300", port);
    mf_mysql_client_t *c = client_at(url);
    result_t r;
    uint64_t t0 = now_ms();
    run(c, &r, "SELECT 1");
    uint64_t took = now_ms() - t0;
    close(fd);
    EXPECT_STATE(r, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT(took >= 250 && took < 3000);
    ASSERT_EQ(mf_mysql_client_open(c), 0);
    teardown();
}

TEST(a_name_that_does_not_resolve_fails_with_edns)
{
    setup();
    dns_stub_start();
    dns_stub_use(loop);
    mf_mysql_client_t *c = client_at("mysql://app:secret@nowhere.test/test");
    result_t r;
    run(c, &r, "SELECT 1");
    dns_stub_stop();
    EXPECT_STATE(r, MF_STATE_DNS_ERROR, MF_EDNS);
    ASSERT_EQ(mf_mysql_client_open(c), 0);
    teardown();
}

/* Tasks started one after another, each when the previous ended. */
typedef struct load {
    mf_mysql_client_t *client;
    int ok, failed, running;
    int causes; /* failures with a state and an error */
    uint64_t last_ok_ms;
    bool stop;
} load_t;

static void load_next(load_t *l);

static void load_done(mf_task_t *task)
{
    load_t *l = task->user;
    l->running--;
    if (mf_task_state(task) == MF_STATE_SUCCESS) {
        l->ok++;
        l->last_ok_ms = now_ms();
    } else {
        l->failed++;
        if (mf_task_error(task) != 0)
            l->causes++;
    }
    if (!l->stop)
        load_next(l);
}

static void load_next(load_t *l)
{
    mf_task_t *t = mf_task_mysql_create(l->client, load_done, l);
    mf_task_mysql_set_query(t, "SELECT 1", 0);
    l->running++;
    mf_task_start(t);
}

static void load_for(load_t *l, uint64_t ms)
{
    uint64_t end = now_ms() + ms;
    while (now_ms() < end) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(500);
    }
}

TEST(the_pool_recovers_within_a_second_of_a_server_restart)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 4;
    o.wait_timeout_ms = 300;
    o.connect_timeout_ms = 1000;
    mf_mysql_client_t *c = setup_with(&o);
    load_t l = {.client = c};
    for (int i = 0; i < 4; i++)
        load_next(&l);
    load_for(&l, 300);
    ASSERT(l.ok > 0);
    ASSERT_EQ(l.failed, 0);
    db_kill(&main_server);
    load_for(&l, 500);
    ASSERT(l.failed > 0);
    ASSERT_EQ(l.causes, l.failed); /* every failure says why */
    int ok_down = l.ok;
    load_for(&l, 200);
    ASSERT_EQ(l.ok, ok_down); /* nothing succeeds without a server */
    db_restart(&main_server);
    uint64_t back = now_ms();
    while (l.ok == ok_down && now_ms() - back < 5000)
        load_for(&l, 10);
    uint64_t recovered = l.last_ok_ms - back;
    fprintf(stderr, "recovered %llu ms after the server's return\n",
            (unsigned long long)recovered);
    ASSERT(l.ok > ok_down);
    ASSERT(recovered < 1000);
    l.stop = true;
    while (l.running > 0)
        load_for(&l, 10);
    ASSERT(mf_mysql_client_open(c) <= 4);
    teardown();
}
