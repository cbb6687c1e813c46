/* The redis client when things go wrong: malformed URLs refused by the
 * factory, failures (nothing listening, a name that does not resolve) in
 * the task's state, a server that sends garbage, a server that goes away
 * under tasks and a subscriber, and kill -9 in the middle of a load with a
 * restart after it. */
#include <arpa/inet.h>
#include <sys/socket.h>

#include "dns_stub.h"
#include "redis_harness.h"

/* ---- failures in the task ------------------------------------------------ */

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

/* ---- a server that goes away --------------------------------------------- */

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
