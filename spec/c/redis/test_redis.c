/* The redis task against a real redis-server started by the test on a free
 * loopback port in a temporary directory: every reply type, pipelines in a
 * task and across tasks (one shared connection), dedicated connections for
 * blocking and state-changing commands, AUTH and SELECT from the URL,
 * failures in the task's state, timeouts, max_reply, a server that sends
 * garbage, no malloc per request, and pub/sub. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/moonflow.h>
#include <moonflow/redis.h>

#include "dns_stub.h"
#include "test.h"
#include "test_port.h"

extern char **environ;

static mf_loop_t *loop;

/* ---- the redis server ---------------------------------------------------- */

typedef struct server {
    pid_t pid;
    uint16_t port;
    char dir[64];
} server_t;

static server_t main_server;
/* Every server started, killed at exit even after a failed assertion. */
static server_t *started[8];
static int nstarted;

/* tls: the server speaks TLS only, with a self-signed certificate for
 * 127.0.0.1 (DIR/c.pem, its own CA) made here. */
static void server_start_on(server_t *s, bool tls, uint16_t port_no);

static void server_start(server_t *s, bool tls)
{
    server_start_on(s, tls, 0);
}

/* port_no 0: a free one. */
static void server_start_on(server_t *s, bool tls, uint16_t port_no)
{
    if (access("/usr/bin/redis-server", X_OK) != 0)
        MF_TEST_FAIL("redis-server is not installed (make installs it)");
    snprintf(s->dir, sizeof s->dir, "/tmp/mf-redis-XXXXXX");
    ASSERT(mkdtemp(s->dir) != NULL);
    s->port = port_no ? port_no : mf_test_free_port();
    char port[16], log[96], cert[96], key[96], cmd[512];
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    snprintf(cert, sizeof cert, "%s/c.pem", s->dir);
    snprintf(key, sizeof key, "%s/k.pem", s->dir);
    char *argv[32] = {"redis-server",
                      "--port",
                      port,
                      "--bind",
                      "127.0.0.1",
                      "--dir",
                      s->dir,
                      "--save",
                      "",
                      "--appendonly",
                      "no",
                      "--loglevel",
                      "warning",
                      "--logfile",
                      log,
                      NULL};
    if (tls) {
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s "
                 "-out %s -days 2 -subj /CN=127.0.0.1 "
                 "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
                 key, cert);
        ASSERT_EQ(system(cmd), 0);
        char *more[] = {"--tls-port",
                        port,
                        "--tls-cert-file",
                        cert,
                        "--tls-key-file",
                        key,
                        "--tls-ca-cert-file",
                        cert,
                        "--tls-auth-clients",
                        "no",
                        NULL};
        argv[2] = "0"; /* no plain port */
        int n = 15;
        for (int i = 0; more[i]; i++)
            argv[n++] = more[i];
        argv[n] = NULL;
    }
    /* Its output goes to the log file: the test's own stdout is not kept
     * open by a server that outlives a failed assertion. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ASSERT(posix_spawn(&s->pid, "/usr/bin/redis-server", &fa, NULL, argv,
                       environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    bool known = false;
    for (int i = 0; i < nstarted; i++)
        known = known || started[i] == s;
    if (!known)
        started[nstarted++] = s;
    for (int i = 0; i < 250; i++) { /* wait for the port, at most 5 s */
        if (mf_test_port_open(s->port))
            return;
        usleep(20000);
    }
    MF_TEST_FAIL("redis-server did not start");
}

static void server_stop(server_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
}

static void stop_servers(void)
{
    for (int i = 0; i < nstarted; i++)
        server_stop(started[i]);
}

static const char *url_of(const server_t *s, const char *userinfo, int db)
{
    static char url[256];
    snprintf(url, sizeof url, "redis://%s%s127.0.0.1:%u/%d",
             userinfo ? userinfo : "", userinfo ? "@" : "", s->port, db);
    return url;
}

static mf_redis_client_t *setup_with(const char *userinfo, int db,
                                     const mf_redis_opts_t *opts)
{
    signal(SIGPIPE, SIG_IGN);
    if (!main_server.pid) {
        atexit(stop_servers);
        server_start(&main_server, false);
    }
    if (!loop)
        loop = mf_loop_create();
    int err = -1;
    mf_redis_client_t *c =
        mf_redis_client(loop, url_of(&main_server, userinfo, db), opts, &err);
    ASSERT(c != NULL);
    ASSERT_EQ(err, 0);
    return c;
}

static mf_redis_client_t *setup(void)
{
    return setup_with(NULL, 0, NULL);
}

static void teardown(void)
{
    mf_loop_destroy(loop);
    loop = NULL;
}

/* ---- tasks and their results --------------------------------------------- */

typedef struct result {
    int done;
    int state;
    int error;
    size_t n;
    char text[8192];
} result_t;

static void put(result_t *r, const char *s, size_t n)
{
    size_t len = strlen(r->text);
    if (len + n + 1 > sizeof r->text)
        n = sizeof r->text - len - 1;
    memcpy(r->text + len, s, n);
    r->text[len + n] = 0;
}

/* A reply as text: +status -error :int $bulk nil *nil [a,b]; NUL as \0. */
static void render(result_t *r, const mf_redis_reply_t *rep)
{
    char num[32];
    switch (rep->type) {
    case MF_REDIS_NIL:
        put(r, "nil", 3);
        return;
    case MF_REDIS_STATUS:
    case MF_REDIS_ERROR:
    case MF_REDIS_STRING:
        put(r,
            rep->type == MF_REDIS_STATUS  ? "+"
            : rep->type == MF_REDIS_ERROR ? "-"
                                          : "$",
            1);
        for (size_t i = 0; i < rep->len; i++)
            put(r, rep->str[i] ? &rep->str[i] : "\\0", rep->str[i] ? 1 : 2);
        ASSERT(rep->str[rep->len] == 0);
        return;
    case MF_REDIS_INTEGER:
        snprintf(num, sizeof num, ":%lld", rep->integer);
        put(r, num, strlen(num));
        return;
    case MF_REDIS_ARRAY:
        if (!rep->elements) {
            put(r, "*nil", 4);
            return;
        }
        put(r, "[", 1);
        for (size_t i = 0; i < rep->len; i++) {
            if (i)
                put(r, ",", 1);
            render(r, &rep->elements[i]);
        }
        put(r, "]", 1);
        return;
    }
}

static void on_done(mf_task_t *task)
{
    result_t *r = task->user;
    r->done++;
    r->state = mf_task_state(task);
    r->error = mf_task_error(task);
    r->n = mf_task_redis_nreplies(task);
    r->text[0] = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (i)
            put(r, " | ", 3);
        render(r, mf_task_redis_reply(task, i));
    }
}

/* "SET a 1; GET a": commands split on ';', arguments on spaces. */
static mf_task_t *task_of(mf_redis_client_t *c, result_t *r, const char *line)
{
    mf_task_t *t = mf_task_redis_create(c, on_done, r);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", line);
    char *save = NULL;
    for (char *cmd = strtok_r(copy, ";", &save); cmd;
         cmd = strtok_r(NULL, ";", &save)) {
        const char *argv[32];
        int argc = 0;
        char *s2 = NULL;
        for (char *w = strtok_r(cmd, " ", &s2); w && argc < 32;
             w = strtok_r(NULL, " ", &s2))
            argv[argc++] = w;
        if (argc)
            mf_task_redis_add_command(t, argc, argv, NULL);
    }
    return t;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs the loop until *count reaches want: bounded in time. */
static void run_until(const int *count, int want)
{
    uint64_t end = now_ms() + 10000;
    while (*count < want && now_ms() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    if (*count < want)
        MF_TEST_FAIL("only %d of %d done", *count, want);
}

static void run(mf_redis_client_t *c, result_t *r, const char *line)
{
    memset(r, 0, sizeof *r);
    mf_task_start(task_of(c, r, line));
    run_until(&r->done, 1);
}

static void expect(mf_redis_client_t *c, const char *line, const char *want)
{
    result_t r;
    run(c, &r, line);
    if (r.state != MF_STATE_SUCCESS)
        MF_TEST_FAIL("%s: %s / %s", line, mf_state_name(r.state),
                     mf_err_name(r.error));
    if (strcmp(r.text, want) != 0)
        MF_TEST_FAIL("%s: got \"%s\", want \"%s\"", line, r.text, want);
}

#define EXPECT_STATE(r, st, err)                                        \
    do {                                                                \
        if ((r).state != (st) || (r).error != (err))                    \
            MF_TEST_FAIL("state %s error %s", mf_state_name((r).state), \
                         mf_err_name((r).error));                       \
    } while (0)

/* ---- replies ------------------------------------------------------------- */

TEST(replies_of_every_type_are_faithful)
{
    mf_redis_client_t *c = setup();
    expect(c, "FLUSHALL", "+OK");
    expect(c, "SET k v", "+OK");
    expect(c, "GET k", "$v");
    expect(c, "GET missing", "nil");
    expect(c, "INCR n; INCRBY n 41", ":1 | :42");
    expect(c, "RPUSH l a b c; LRANGE l 0 -1; LRANGE none 0 -1",
           ":3 | [$a,$b,$c] | []");
    /* An error reply is a reply: the task still succeeds. */
    expect(c, "NOSUCHCOMMAND x; GET k",
           "-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: "
           "'x'  | $v");
    expect(c, "EVAL return{1,{2,{'x',{}}},'y',false} 0",
           "[:1,[:2,[$x,[]]],$y,nil]");
    expect(c, "BLPOP emptylist 0.01", "*nil"); /* a nil array */

    /* Binary-safe both ways: NUL bytes in arguments and replies. */
    const char *argv[] = {"SET", "bin\0key", "a\0b\r\nc"};
    const size_t lens[] = {3, 7, 6};
    result_t r = {0};
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_command(t, 3, argv, lens);
    const char *get[] = {"GET", "bin\0key"};
    const size_t glens[] = {3, 7};
    mf_task_redis_add_command(t, 2, get, glens);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+OK | $a\\0b\r\nc");
    ASSERT_EQ(r.n, 2);
    ASSERT_EQ(mf_redis_client_connects(c), 2); /* shared + one for BLPOP */
    teardown();
}

TEST(a_big_bulk_reply_arrives_whole)
{
    mf_redis_client_t *c = setup();
    static char big[300000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('a' + i % 26);
    const char *argv[] = {"SET", "big", big};
    const size_t lens[] = {3, 3, sizeof big};
    result_t r = {0};
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_command(t, 3, argv, lens);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+OK");
    run(c, &r, "STRLEN big; GET big");
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT(strncmp(r.text, ":300000 | $abcdefghijklmnopqrstuvwxyzabc", 40) ==
           0);
    teardown();
}

/* ---- pipelines and connections ------------------------------------------- */

TEST(concurrent_tasks_share_one_connection_and_get_their_own_replies)
{
    mf_redis_client_t *c = setup();
    enum { N = 64 };
    static result_t rs[N];
    int done = 0;
    for (int i = 0; i < N; i++) {
        char line[64];
        snprintf(line, sizeof line, "SET key%d %d; GET key%d", i, i * 7, i);
        memset(&rs[i], 0, sizeof rs[i]);
        mf_task_start(task_of(c, &rs[i], line));
    }
    uint64_t end = now_ms() + 10000;
    while (done < N && now_ms() < end) {
        mf_loop_run(loop, MF_RUN_ONCE);
        done = 0;
        for (int i = 0; i < N; i++)
            done += rs[i].done;
    }
    ASSERT_EQ(done, N);
    for (int i = 0; i < N; i++) {
        char want[64];
        snprintf(want, sizeof want, "+OK | $%d", i * 7);
        ASSERT_STR_EQ(rs[i].text, want);
    }
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    /* The same URL and options on the same loop: the same client. */
    ASSERT(mf_redis_client(loop, url_of(&main_server, NULL, 0), NULL, NULL) ==
           c);
    teardown();
}

TEST(pipeline_connections_spread_tasks_over_several_connections)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.pipeline_connections = 3;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    static result_t rs[9];
    int done = 0;
    for (int i = 0; i < 9; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        mf_task_start(task_of(c, &rs[i], "PING"));
    }
    uint64_t end = now_ms() + 10000;
    while (done < 9 && now_ms() < end) {
        mf_loop_run(loop, MF_RUN_ONCE);
        done = 0;
        for (int i = 0; i < 9; i++)
            done += rs[i].done;
    }
    ASSERT_EQ(done, 9);
    ASSERT_STR_EQ(rs[8].text, "+PONG");
    ASSERT_EQ(mf_redis_client_connects(c), 3);
    teardown();
}

TEST(multi_exec_in_one_task_is_atomic_on_the_shared_connection)
{
    mf_redis_client_t *c = setup();
    expect(c, "DEL ctr; MULTI; INCR ctr; INCR ctr; EXEC",
           ":0 | +OK | +QUEUED | +QUEUED | [:1,:2]");
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

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
    /* Two wait in BLPOP, two wait for a connection; four pushes serve all,
     * the oldest waiter first. */
    for (int k = 0; k < 4; k++) {
        char line[32];
        snprintf(line, sizeof line, "RPUSH q1 v%d", k);
        expect(c, line, ":1");
        run_until(&rs[k].done, 1);
        snprintf(line, sizeof line, "[$q1,$v%d]", k);
        ASSERT_STR_EQ(rs[k].text, line);
    }
    ASSERT_EQ(mf_redis_client_connects(c), 3); /* shared + 2 pooled */
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
    /* A database that does not exist: SELECT is refused the same way. */
    mf_redis_client_t *nodb = setup_with(NULL, 99, NULL);
    run(nodb, &r, "PING");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    teardown();
}

/* ---- failures ------------------------------------------------------------ */

TEST(malformed_urls_are_refused_by_the_factory)
{
    loop = mf_loop_create();
    const char *bad[] = {"http://127.0.0.1:6379", "redis://",
                         "redis://:1/0",          "redis://h:0",
                         "redis://h:99999",       "redis://h/x",
                         "redis://user@h",        "redis://[::1",
                         "redis://h:1/0?x",       "redis://a:%zz@h"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(bad); i++) {
        int err = 0;
        if (mf_redis_client(loop, bad[i], NULL, &err) != NULL)
            MF_TEST_FAIL("accepted %s", bad[i]);
        ASSERT_EQ(err, MF_EINVAL);
    }
    int err = -1;
    ASSERT(mf_redis_client(loop, "rediss://u:p%40ss@[::1]:7000/", NULL, &err));
    ASSERT_EQ(err, 0);
    teardown();
}

TEST(failures_come_back_in_the_task)
{
    mf_redis_client_t *c = setup();
    result_t r = {0};
    /* No command at all. */
    mf_task_start(mf_task_redis_create(c, on_done, &r));
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);

    /* Nothing listens there. */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", mf_test_free_port());
    mf_redis_client_t *dead = mf_redis_client(loop, url, NULL, NULL);
    run(dead, &r, "PING");
    EXPECT_STATE(r, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    run(dead, &r, "BLPOP x 1");
    EXPECT_STATE(r, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    ASSERT_EQ(mf_redis_client_connects(dead), 2); /* each tried again */

    /* A name that does not resolve. */
    dns_stub_start();
    dns_stub_use(loop);
    mf_redis_client_t *nx =
        mf_redis_client(loop, "redis://no-such-host.test:6379", NULL, NULL);
    run(nx, &r, "PING");
    dns_stub_stop();
    EXPECT_STATE(r, MF_STATE_DNS_ERROR, MF_EDNS);
    teardown();
}

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

TEST(a_silent_shared_connection_is_closed_after_the_response_timeout)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.response_timeout_ms = 100;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
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

TEST(a_reply_over_max_reply_fails_its_task_alone)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_reply = 4096;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    static char big[10000];
    memset(big, 'x', sizeof big);
    const char *argv[] = {"SET", "big10k", big};
    const size_t lens[] = {3, 6, sizeof big};
    result_t r = {0}, next = {0};
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_command(t, 3, argv, lens);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+OK");
    memset(&r, 0, sizeof r);
    mf_task_start(task_of(c, &r, "GET big10k; PING"));
    mf_task_start(
        task_of(c, &next, "RPUSH biglist a b c; LRANGE biglist 0 -1"));
    run_until(&next.done, 1);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    ASSERT_EQ(r.n, 0);
    ASSERT_EQ(next.state, MF_STATE_SUCCESS);
    ASSERT_STR_EQ(next.text, ":3 | [$a,$b,$c]");
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

/* ---- a server that sends garbage ------------------------------------------
 */

typedef struct fake {
    mf_io_t listen;
    mf_io_t conn;
    const char *answer;
} fake_t;

static void fake_on_conn(mf_io_t *io, unsigned events)
{
    fake_t *f = io->data;
    char buf[512];
    if (read(io->fd, buf, sizeof buf) > 0)
        ASSERT(write(io->fd, f->answer, strlen(f->answer)) > 0);
}

static void fake_on_listen(mf_io_t *io, unsigned events)
{
    fake_t *f = io->data;
    int fd = accept(io->fd, NULL, NULL);
    if (fd < 0)
        return;
    mf_io_init(&f->conn, fd, fake_on_conn, f);
    mf_io_start(loop, &f->conn, MF_IO_READ);
}

TEST(garbage_from_the_server_is_a_protocol_error)
{
    loop = mf_loop_create();
    fake_t f = {.answer = "+OK\r\n?garbage\r\n"};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(lfd, 8), 0);
    getsockname(lfd, (struct sockaddr *)&a, &len);
    mf_io_init(&f.listen, lfd, fake_on_listen, &f);
    mf_io_start(loop, &f.listen, MF_IO_READ);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", ntohs(a.sin_port));
    mf_redis_client_t *c = mf_redis_client(loop, url, NULL, NULL);
    result_t r1 = {0}, r2 = {0};
    mf_task_start(task_of(c, &r1, "PING"));
    mf_task_start(task_of(c, &r2, "PING"));
    run_until(&r2.done, 1);
    EXPECT_STATE(r1, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r1.text, "+OK");
    EXPECT_STATE(r2, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
    mf_io_stop(loop, &f.listen);
    mf_io_stop(loop, &f.conn);
    close(lfd);
    close(f.conn.fd);
    teardown();
}

/* ---- memory -------------------------------------------------------------- */

static mf_redis_client_t *chain_client;

static void on_chain(mf_task_t *task)
{
    result_t *r = task->user;
    on_done(task);
    ASSERT_STR_EQ(r->text, "+OK | $val");
    if (r->done < 200) {
        mf_task_t *t = task_of(chain_client, r, "SET mk val; GET mk");
        mf_task_set_callback(t, on_chain);
        mf_series_push_back(mf_series_of(task), t);
    }
}

TEST(steady_state_requests_do_not_malloc)
{
    chain_client = setup();
    result_t r = {0};
    mf_task_t *t = task_of(chain_client, &r, "SET mk val; GET mk");
    mf_task_set_callback(t, on_chain);
    mf_task_start(t);
    run_until(&r.done, 20); /* warm: connection, slabs */
    uint64_t before = mf_alloc_count();
    run_until(&r.done, 200);
    uint64_t after = mf_alloc_count();
    if (after != before)
        MF_TEST_FAIL("%" PRIu64 " mallocs for 180 tasks", after - before);
    teardown();
}

/* ---- pub/sub ------------------------------------------------------------- */

typedef struct subres {
    int messages;
    int confirms;
    int ended;
    int error;
    char text[2048];
    char confirmed[512];
} subres_t;

/* A (p)(un)subscribe confirmation: ("subscribe", channel, count). */
static bool is_confirmation(const mf_redis_reply_t *msg)
{
    return msg->len == 3 && msg->elements[2].type == MF_REDIS_INTEGER;
}

static void on_message(mf_redis_subscriber_t *sub, const mf_redis_reply_t *msg,
                       int error, void *user)
{
    subres_t *s = user;
    if (!msg) {
        s->ended++;
        s->error = error;
        return;
    }
    result_t r = {0};
    render(&r, msg);
    if (is_confirmation(msg)) {
        snprintf(s->confirmed + strlen(s->confirmed),
                 sizeof s->confirmed - strlen(s->confirmed), "%s%s",
                 s->confirms ? " " : "", r.text);
        s->confirms++;
        return;
    }
    snprintf(s->text + strlen(s->text), sizeof s->text - strlen(s->text),
             "%s%s", s->messages ? " " : "", r.text);
    s->messages++;
}

/* Waits until the server counts n subscribers of channel (pattern: n
 * pattern subscriptions in all): subscribing is asynchronous. */
static void wait_subscribers(mf_redis_client_t *c, const char *channel, int n)
{
    char line[128], want[128];
    if (channel)
        snprintf(line, sizeof line, "PUBSUB NUMSUB %s", channel);
    else
        snprintf(line, sizeof line, "PUBSUB NUMPAT");
    if (channel)
        snprintf(want, sizeof want, "[$%s,:%d]", channel, n);
    else
        snprintf(want, sizeof want, ":%d", n);
    for (int i = 0; i < 500; i++) {
        result_t r;
        run(c, &r, line);
        if (strcmp(r.text, want) == 0)
            return;
        usleep(10000);
    }
    MF_TEST_FAIL("%s never answered %s", line, want);
}

/* Runs line once, then the loop until the subscriber has seen want
 * messages in all. */
static void publish_until(mf_redis_client_t *c, subres_t *s, int want,
                          const char *line)
{
    result_t r;
    run(c, &r, line);
    run_until(&s->messages, want);
    ASSERT_EQ(s->messages, want);
}

TEST(subscriber_gets_messages_in_order_and_its_end_once)
{
    expect(setup(), "ACL SETUSER alice on >s3cret ~* &* +@all", "+OK");
    mf_redis_client_t *c = setup_with("alice:s3cret", 0, NULL);
    subres_t s = {0};
    const char *chans[] = {"news", "sport"};
    mf_redis_subscriber_t *sub =
        mf_redis_subscribe(c, 2, chans, NULL, false, on_message, &s);
    run_until(&s.confirms, 2); /* subscribed once both are confirmed */
    publish_until(c, &s, 1, "PUBLISH news first");
    expect(c, "PUBLISH sport a; PUBLISH news b; PUBLISH other x",
           ":1 | :1 | :0");
    publish_until(c, &s, 3, "PING");
    const char *pats[] = {"we*"};
    mf_redis_subscriber_update(sub, true, 1, pats, NULL, true);
    run_until(&s.confirms, 3);
    publish_until(c, &s, 4, "PUBLISH weather sunny");
    mf_redis_subscriber_update(sub, false, 1, chans, NULL, false);
    run_until(&s.confirms, 4);
    publish_until(c, &s, 5, "PUBLISH news gone; PUBLISH sport last");
    mf_redis_subscriber_update(sub, false, 0, NULL, NULL, false); /* all */
    run_until(&s.confirms, 5);
    wait_subscribers(c, "sport", 0);
    ASSERT_STR_EQ(s.text, "[$message,$news,$first] [$message,$sport,$a] "
                          "[$message,$news,$b] "
                          "[$pmessage,$we*,$weather,$sunny] "
                          "[$message,$sport,$last]");
    ASSERT_STR_EQ(s.confirmed, "[$subscribe,$news,:1] [$subscribe,$sport,:2] "
                               "[$psubscribe,$we*,:3] [$unsubscribe,$news,:2] "
                               "[$unsubscribe,$sport,:1]");
    mf_redis_subscriber_close(sub);
    ASSERT_EQ(s.ended, 0); /* never inside the call */
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* nothing keeps the loop now */
    ASSERT_EQ(s.ended, 1);
    teardown();
}

TEST(server_going_away_fails_tasks_and_ends_subscribers)
{
    static server_t s2; /* static: stop_servers may see it at exit */
    server_start(&s2, false);
    loop = mf_loop_create();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", s2.port);
    mf_redis_client_t *c = mf_redis_client(loop, url, NULL, NULL);
    subres_t s = {0};
    const char *chans[] = {"c"};
    mf_redis_subscriber_t *sub =
        mf_redis_subscribe(c, 1, chans, NULL, false, on_message, &s);
    (void)sub;
    wait_subscribers(c, "c", 1);
    publish_until(c, &s, 1, "PUBLISH c hello");
    result_t blocked = {0};
    mf_task_start(task_of(c, &blocked, "BLPOP q 10"));
    expect(c, "PING", "+PONG");
    server_stop(&s2);
    run_until(&s.ended, 1);
    ASSERT(s.error < 0);
    run_until(&blocked.done, 1);
    ASSERT_EQ(blocked.state, MF_STATE_SYS_ERROR);
    result_t r;
    run(c, &r, "PING");
    EXPECT_STATE(r, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    teardown();
}

/* Load: `chains` tasks in flight, each ending task starting the next until
 * the load stops; what ended how is counted. */
typedef struct load {
    mf_redis_client_t *c;
    bool stop;
    int started, done, ok, failed, wrong;
} load_t;

static void load_next(load_t *l);

static void on_load_done(mf_task_t *task)
{
    load_t *l = task->user;
    l->done++;
    if (mf_task_state(task) == MF_STATE_SUCCESS) {
        const mf_redis_reply_t *r = mf_task_redis_reply(task, 0);
        l->ok++;
        l->wrong += r->type != MF_REDIS_STATUS || strcmp(r->str, "PONG") != 0;
    } else {
        l->failed++;
    }
    if (!l->stop)
        load_next(l);
}

static void load_next(load_t *l)
{
    const char *argv[] = {"PING"};
    mf_task_t *t = mf_task_redis_create(l->c, on_load_done, l);
    mf_task_redis_add_command(t, 1, argv, NULL);
    l->started++;
    mf_task_start(t);
}

TEST(kill_9_mid_load_fails_the_tasks_in_flight_and_a_restart_serves_again)
{
    static server_t s3;
    signal(SIGPIPE, SIG_IGN);
    server_start(&s3, false);
    loop = mf_loop_create();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", s3.port);
    load_t l = {.c = mf_redis_client(loop, url, NULL, NULL)};
    for (int i = 0; i < 256; i++)
        load_next(&l);
    run_until(&l.ok, 5000);
    /* kill -9 with 256 tasks in flight; the load goes on while it is down */
    kill(s3.pid, SIGKILL);
    waitpid(s3.pid, NULL, 0);
    run_until(&l.failed, 2000);
    l.stop = true;
    run_until(&l.done, l.started); /* every task ended: none hangs */
    ASSERT_EQ(l.wrong, 0);
    int ok_before = l.ok;
    /* back on the same port: new tasks succeed again */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s3.dir);
    ASSERT_EQ(system(cmd), 0);
    server_start_on(&s3, false, s3.port);
    l.stop = false;
    for (int i = 0; i < 64; i++)
        load_next(&l);
    run_until(&l.ok, ok_before + 5000);
    l.stop = true;
    run_until(&l.done, l.started);
    ASSERT_EQ(l.wrong, 0);
    teardown();
    server_stop(&s3);
}

/* ---- more edges ---------------------------------------------------------- */

TEST(a_blocking_command_may_wait_past_the_response_timeout)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.response_timeout_ms = 100;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
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

TEST(replies_nested_deeper_than_the_reader_allows_are_a_protocol_error)
{
    mf_redis_client_t *c = setup();
    expect(c, "EVAL return{{{{{{{1}}}}}}} 0", "[[[[[[[:1]]]]]]]");
    result_t r;
    run(c, &r, "EVAL return{{{{{{{{{1}}}}}}}}} 0");
    EXPECT_STATE(r, MF_STATE_PROTOCOL_ERROR, MF_EPROTO);
    expect(c, "PING", "+PONG"); /* on a new connection */
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    teardown();
}

TEST(a_reply_far_over_max_reply_closes_the_connection)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_reply = 1000;
    mf_redis_client_t *c = setup_with(NULL, 0, &o);
    static char huge[3 << 20];
    memset(huge, 'h', sizeof huge);
    const char *argv[] = {"SET", "huge", huge};
    const size_t lens[] = {3, 4, sizeof huge};
    result_t r = {0}, next = {0};
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_command(t, 3, argv, lens);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+OK");
    memset(&r, 0, sizeof r);
    mf_task_start(task_of(c, &r, "GET huge"));
    mf_task_start(task_of(c, &next, "PING"));
    run_until(&next.done, 1);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    EXPECT_STATE(next, MF_STATE_SYS_ERROR, MF_ECONNABORTED);
    expect(c, "DEL huge", ":1");
    teardown();
}

static void on_message_close(mf_redis_subscriber_t *sub,
                             const mf_redis_reply_t *msg, int error, void *user)
{
    subres_t *s = user;
    if (msg && is_confirmation(msg))
        return;
    if (msg) {
        mf_redis_subscriber_close(sub); /* from inside: msg stays valid */
        mf_redis_subscriber_close(sub); /* twice: no effect */
        snprintf(s->text, sizeof s->text, "%.*s", (int)msg->elements[2].len,
                 msg->elements[2].str);
        s->messages++;
        return;
    }
    s->ended++;
    s->error = error;
}

TEST(a_subscriber_may_close_from_its_callback)
{
    mf_redis_client_t *c = setup();
    subres_t s = {0};
    const char *chans[] = {"bye"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message_close, &s);
    wait_subscribers(c, "bye", 1);
    publish_until(c, &s, 1, "PUBLISH bye one; PUBLISH bye two");
    run_until(&s.ended, 1);
    ASSERT_EQ(s.messages, 1);
    ASSERT_STR_EQ(s.text, "one");
    ASSERT_EQ(s.error, 0);
    teardown();
}

TEST(a_subscriber_that_cannot_connect_ends_with_the_error)
{
    loop = mf_loop_create();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", mf_test_free_port());
    mf_redis_client_t *c = mf_redis_client(loop, url, NULL, NULL);
    subres_t s = {0};
    const char *chans[] = {"x"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message, &s);
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, MF_ECONNREFUSED);
    teardown();
}

TEST(a_loop_destroyed_with_live_subscribers_and_idle_connections_frees_all)
{
    mf_redis_client_t *c = setup();
    subres_t s = {0};
    const char *chans[] = {"live"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message, &s);
    wait_subscribers(c, "live", 1);
    publish_until(c, &s, 1, "PUBLISH live 1");
    expect(c, "BLPOP none 0.01", "*nil"); /* an idle pooled connection */
    teardown();                           /* ASan: nothing leaks */
    ASSERT_EQ(s.ended, 0);                /* no call into a dead loop */
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
    expect(c, "CLIENT KILL TYPE normal SKIPME yes", ":2"); /* c, d shared */
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

TEST(a_refused_subscription_ends_the_subscriber_with_eacces)
{
    mf_redis_client_t *c = setup();
    expect(c, "ACL SETUSER deaf on >pw ~* resetchannels +@all", "+OK");
    mf_redis_client_t *deaf = setup_with("deaf:pw", 0, NULL);
    subres_t s = {0};
    const char *chans[] = {"secret"};
    mf_redis_subscribe(deaf, 1, chans, NULL, false, on_message, &s);
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, MF_EACCES);
    ASSERT_EQ(s.messages, 0);
    teardown();
}
