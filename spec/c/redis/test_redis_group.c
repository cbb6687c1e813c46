/* A redis:// client whose host is an upstream group of two real
 * redis-servers (redis_harness.h): consistent_hash puts each key on the
 * server the group names for it, a task whose keys are on two servers is
 * refused before anything is sent, a task whose connect was refused moves
 * to a live server, and a session opened on keys holds a connection of
 * their server (keys on two servers: MF_EINVAL). */
#include <moonflow/upstream.h>

#include "redis_harness.h"

static server_t second;

/* The group "name" over the main server, the second one and, when dead is
 * not 0, a port where nothing listens (first). */
static mf_redis_client_t *group_client(const char *name, uint16_t dead)
{
    setup();
    if (!second.pid)
        server_start(&second, false);
    char a[32], b[32], d[32];
    snprintf(a, sizeof a, "127.0.0.1:%u", main_server.port);
    snprintf(b, sizeof b, "127.0.0.1:%u", second.port);
    snprintf(d, sizeof d, "127.0.0.1:%u", dead);
    mf_upstream_server_conf_t two[] = {{a, 1, false}, {b, 1, false}};
    mf_upstream_server_conf_t with_dead[] = {{d, 1, false}, {a, 1, false}};
    mf_upstream_conf_t conf;
    mf_upstream_conf_init(&conf);
    conf.policy = MF_UPSTREAM_CONSISTENT_HASH;
    conf.fail_timeout_ms = 60000;
    char err[128];
    ASSERT_EQ(mf_upstream_define(name, &conf, dead ? with_dead : two, 2, err,
                                 sizeof err),
              0);
    char url[128];
    snprintf(url, sizeof url, "redis://%s/0", name);
    int e = -1;
    mf_redis_client_t *c = mf_redis_client(loop, url, NULL, &e);
    ASSERT(c != NULL);
    return c;
}

/* The port of the server the group places key on. */
static uint16_t home_of(const char *group, const char *key)
{
    mf_upstream_try_t t;
    mf_upstream_try_init(&t, mf_upstream_find(group, MF_UPSTREAM_NUL));
    ASSERT_EQ(mf_upstream_pick(&t, key, strlen(key)), 0);
    uint16_t port = t.port;
    mf_upstream_abandon(&t);
    return port;
}

static mf_redis_client_t *direct(uint16_t port)
{
    server_t s = {.port = port};
    return mf_redis_client(loop, url_of(&s, NULL, 0), NULL, NULL);
}

/* Two keys the group places on different servers. */
static void split_keys(const char *group, char *a, char *b, size_t cap)
{
    snprintf(a, cap, "grp:x0");
    for (int i = 1; i < 100; i++) {
        snprintf(b, cap, "grp:x%d", i);
        if (home_of(group, a) != home_of(group, b))
            return;
    }
    MF_TEST_FAIL("no two keys on different servers");
}

TEST(keys_land_on_the_server_the_group_picks_for_them)
{
    mf_redis_client_t *c = group_client("cgroup", 0);
    int on_main = 0;
    for (int i = 0; i < 30; i++) {
        char line[128], key[32], want[32];
        snprintf(key, sizeof key, "grp:k%d", i);
        snprintf(line, sizeof line, "SET %s v%d; GET %s", key, i, key);
        snprintf(want, sizeof want, "+OK | $v%d", i);
        expect(c, line, want);
        uint16_t home = home_of("cgroup", key);
        uint16_t other =
            home == main_server.port ? second.port : main_server.port;
        on_main += home == main_server.port;
        snprintf(line, sizeof line, "GET %s", key);
        snprintf(want, sizeof want, "$v%d", i);
        expect(direct(home), line, want);
        expect(direct(other), line, "nil");
    }
    ASSERT(on_main > 0 && on_main < 30);
    teardown();
}

TEST(a_task_whose_keys_are_on_two_servers_is_refused_unsent)
{
    mf_redis_client_t *c = group_client("cgroup", 0);
    char a[32], b[32], line[128];
    split_keys("cgroup", a, b, sizeof a);
    result_t r;
    snprintf(line, sizeof line, "SET %s 1; SET %s 2", a, b);
    run(c, &r, line);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(r.errors, 2);
    ASSERT(strncmp(r.text, "-CROSSSERVER", 12) == 0);
    snprintf(line, sizeof line, "GET %s", a);
    expect(direct(home_of("cgroup", a)), line, "nil");
    teardown();
}

TEST(a_refused_connect_moves_the_task_to_a_live_server)
{
    uint16_t dead = mf_test_free_port();
    mf_redis_client_t *c = group_client("cdead", dead);
    for (int i = 0; i < 20; i++) {
        char line[64];
        snprintf(line, sizeof line, "SET grp:d%d x", i);
        expect(c, line, "+OK");
    }
    teardown();
}

typedef struct opened {
    int done;
    int error;
} opened_t;

static void on_open(mf_redis_session_t *s, int error, void *user)
{
    opened_t *o = user;
    (void)s;
    o->done++;
    o->error = error;
}

TEST(a_session_on_keys_holds_a_connection_of_their_server)
{
    mf_redis_client_t *c = group_client("cgroup", 0);
    char a[32], b[32];
    split_keys("cgroup", a, b, sizeof a);
    opened_t o = {0};
    const char *keys[] = {a};
    mf_redis_session_t *s =
        mf_redis_session_open_keys(c, 1, keys, NULL, on_open, &o);
    run_until(&o.done, 1);
    ASSERT_EQ(o.error, 0);
    result_t r = {0};
    mf_task_t *t = mf_task_redis_session_create(s, on_done, &r);
    const char *set[] = {"SET", a, "held"};
    mf_task_redis_add_command(t, 3, set, NULL);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    mf_redis_session_close(s);
    char line[64];
    snprintf(line, sizeof line, "GET %s", a);
    expect(direct(home_of("cgroup", a)), line, "$held");

    opened_t o2 = {0};
    const char *both[] = {a, b};
    s = mf_redis_session_open_keys(c, 2, both, NULL, on_open, &o2);
    run_until(&o2.done, 1);
    ASSERT_EQ(o2.error, MF_EINVAL);
    mf_redis_session_close(s);
    teardown();
}

/* Last: it kills the second server. */
TEST(a_task_written_before_its_server_died_fails_and_is_not_sent_again)
{
    mf_redis_client_t *c = group_client("cwritten", 0);
    char key[32];
    for (int i = 0;; i++) {
        ASSERT(i < 100);
        snprintf(key, sizeof key, "grp:w%d", i);
        if (home_of("cwritten", key) == second.port)
            break;
    }
    result_t r = {0};
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    const char *blpop[] = {"BLPOP", key, "3"};
    mf_task_redis_add_command(t, 3, blpop, NULL);
    uint64_t start = now_ms();
    mf_task_start(t);
    while (now_ms() < start + 300) { /* connected, BLPOP written */
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(1000);
    }
    server_stop(&second);
    run_until(&r.done, 1);
    /* Sent again to the live server it would block there 3 s and answer. */
    ASSERT(r.state != MF_STATE_SUCCESS);
    ASSERT(now_ms() - start < 2000);
    teardown();
}
