/* Redis sessions against a real redis-server (redis_harness.h): one held
 * connection for commands of several tasks in order, WATCH ... MULTI ...
 * EXEC across them (and EXEC's nil when a watched key changed), and the
 * connection handed back clean: the pool's next user sees no MULTI, WATCH,
 * SELECT or other state of the session (RESET, then the URL's AUTH and
 * database), and a connection in pub/sub mode or whose cleanup Redis
 * refused is closed, not pooled. */
#include "redis_harness.h"

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

/* A session holding its connection. */
static mf_redis_session_t *session_of(mf_redis_client_t *c)
{
    opened_t o = {0};
    mf_redis_session_t *s = mf_redis_session_open(c, on_open, &o);
    ASSERT_EQ(o.done, 0); /* never from inside the open */
    run_until(&o.done, 1);
    ASSERT_EQ(o.error, 0);
    ASSERT(mf_redis_session_has_connection(s));
    return s;
}

/* Runs line as one task of the session and checks its replies. */
static void in_session(mf_redis_session_t *s, const char *line,
                       const char *want)
{
    result_t r = {0};
    mf_task_t *t = mf_task_redis_session_create(s, on_done, &r);
    split_commands(line, add_to_task, t);
    mf_task_start(t);
    run_until(&r.done, 1);
    if (r.state != MF_STATE_SUCCESS)
        MF_TEST_FAIL("%s: %s / %s", line, mf_state_name(r.state),
                     mf_err_name(r.error));
    if (strcmp(r.text, want) != 0)
        MF_TEST_FAIL("%s: got \"%s\", want \"%s\"", line, r.text, want);
}

static int stats_count;
static mf_redis_client_stats_t stats_last;

static void on_stats(void *ud, const mf_redis_client_stats_t *st)
{
    (void)ud;
    stats_count++;
    stats_last = *st;
    stats_last.host = NULL;
}

/* The pool of the loop's one client: dedicated connections, idle ones. */
static mf_redis_client_stats_t pool_now(void)
{
    stats_count = 0;
    mf_redis_clients_stats(loop, on_stats, NULL);
    ASSERT_EQ(stats_count, 1);
    return stats_last;
}

static unsigned dedicated_sum;

static void on_stats_sum(void *ud, const mf_redis_client_stats_t *st)
{
    (void)ud;
    dedicated_sum += st->dedicated;
}

/* Dedicated connections of every client of the loop. */
static unsigned all_dedicated(void)
{
    dedicated_sum = 0;
    mf_redis_clients_stats(loop, on_stats_sum, NULL);
    return dedicated_sum;
}

TEST(commands_of_several_tasks_run_in_order_on_one_held_connection)
{
    mf_redis_client_t *c = setup();
    mf_redis_session_t *s = session_of(c);
    in_session(s, "DEL sess:n; INCR sess:n", ":0 | :1");
    in_session(s, "INCRBY sess:n 10", ":11");
    in_session(s, "GET sess:n", "$11");
    /* Every command went on the session's connection: one connection in
     * all, and it is dedicated (no shared one was opened). */
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    ASSERT_EQ(pool_now().dedicated, 1);
    mf_redis_session_close(s);
    ASSERT_EQ(pool_now().idle, 1); /* nothing to clean: back at once */
    teardown();
}

TEST(watch_multi_exec_across_tasks_commits)
{
    mf_redis_client_t *c = setup();
    expect(c, "SET sess:w 1", "+OK");
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:w", "+OK");
    in_session(s, "GET sess:w", "$1");
    in_session(s, "MULTI", "+OK");
    in_session(s, "SET sess:w 2", "+QUEUED");
    in_session(s, "EXEC", "[+OK]");
    mf_redis_session_close(s);
    expect(c, "GET sess:w", "$2");
    teardown();
}

TEST(exec_is_nil_when_a_watched_key_changed_from_another_connection)
{
    mf_redis_client_t *c = setup();
    expect(c, "SET sess:x 1", "+OK");
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:x; GET sess:x", "+OK | $1");
    expect(c, "SET sess:x other", "+OK"); /* the shared connection */
    in_session(s, "MULTI; SET sess:x mine; EXEC", "+OK | +QUEUED | *nil");
    mf_redis_session_close(s);
    expect(c, "GET sess:x", "$other");
    teardown();
}

/* One dedicated connection in all: the next session gets the same one. */
static mf_redis_client_t *setup_one_connection(void)
{
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_connections = 1;
    return setup_with(NULL, 0, &o);
}

TEST(a_session_left_in_multi_is_discarded_before_the_next_user)
{
    mf_redis_client_t *c = setup_one_connection();
    expect(c, "SET sess:m 1", "+OK");
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:m; MULTI; SET sess:m lost",
               "+OK | +OK | +QUEUED");
    mf_redis_session_close(s); /* no EXEC */
    uint64_t connects = mf_redis_client_connects(c);
    s = session_of(c);
    in_session(s, "EXEC", "-ERR EXEC without MULTI");
    in_session(s, "SET sess:m 2", "+OK"); /* not QUEUED */
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects); /* the same one */
    expect(c, "GET sess:m", "$2");
    teardown();
}

TEST(a_session_left_watching_is_unwatched_before_the_next_user)
{
    mf_redis_client_t *c = setup_one_connection();
    expect(c, "SET sess:u 1", "+OK");
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:u", "+OK");
    mf_redis_session_close(s);
    uint64_t connects = mf_redis_client_connects(c);
    expect(c, "SET sess:u 2", "+OK"); /* would fail a WATCH left behind */
    s = session_of(c);
    in_session(s, "MULTI; SET sess:u 3; EXEC", "+OK | +QUEUED | [+OK]");
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects);
    teardown();
}

TEST(a_session_that_selected_another_db_is_put_back_on_the_urls)
{
    mf_redis_client_t *c = setup_one_connection();
    mf_redis_session_t *s = session_of(c);
    in_session(s, "SELECT 3; SET sess:db three", "+OK | +OK");
    mf_redis_session_close(s);
    uint64_t connects = mf_redis_client_connects(c);
    s = session_of(c);
    in_session(s, "SET sess:db zero", "+OK");
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects);
    expect(c, "GET sess:db", "$zero"); /* db 0, the URL's */
    teardown();
}

TEST(waiters_for_the_pool_wait_for_a_session_being_cleaned)
{
    mf_redis_client_t *c = setup_one_connection();
    mf_redis_session_t *s = session_of(c);
    in_session(s, "MULTI", "+OK");
    opened_t o = {0};
    mf_redis_session_t *next = mf_redis_session_open(c, on_open, &o);
    mf_redis_session_close(s); /* the cleanup runs; next waits for it */
    run_until(&o.done, 1);
    ASSERT_EQ(o.error, 0);
    in_session(next, "PING", "+PONG"); /* not queued in an old MULTI */
    mf_redis_session_close(next);
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

TEST(a_connection_whose_cleanup_fails_is_closed_not_pooled)
{
    mf_redis_client_t *admin = setup();
    /* A user that may not UNWATCH: the session's cleanup is refused. */
    expect(admin, "ACL SETUSER mfsess on >pw ~* &* +@all -unwatch -discard",
           "+OK");
    mf_redis_client_t *c = setup_with("mfsess:pw", 0, NULL);
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:f", "+OK");
    mf_redis_session_close(s);
    for (int i = 0; i < 500 && all_dedicated() != 0; i++) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(2000);
    }
    ASSERT_EQ(all_dedicated(), 0); /* closed, its slot free */
    uint64_t connects = mf_redis_client_connects(c);
    s = session_of(c);
    in_session(s, "PING", "+PONG");
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects + 1); /* a new one */
    expect(admin, "ACL DELUSER mfsess", ":1");
    teardown();
}

TEST(other_state_is_reset_and_the_urls_auth_and_db_come_back)
{
    mf_redis_client_t *admin = setup();
    expect(admin, "ACL SETUSER mfreset on >pw ~* &* +@all", "+OK");
    mf_redis_opts_t o;
    mf_redis_opts_init(&o);
    o.max_connections = 1;
    mf_redis_client_t *c = setup_with("mfreset:pw", 2, &o);
    mf_redis_session_t *s = session_of(c);
    /* another name, database and user (the default one takes any
     * password) */
    in_session(s, "CLIENT SETNAME sess; SELECT 4; AUTH default x",
               "+OK | +OK | +OK");
    mf_redis_session_close(s);
    uint64_t connects = mf_redis_client_connects(c);
    s = session_of(c);
    in_session(s, "CLIENT GETNAME; ACL WHOAMI; SET sess:r two",
               "nil | $mfreset | +OK");
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects); /* RESET, reused */
    expect(c, "GET sess:r", "$two");                  /* db 2, the URL's */
    expect(admin, "ACL DELUSER mfreset", ":1");
    teardown();
}

TEST(a_session_left_in_pub_sub_mode_closes_its_connection)
{
    mf_redis_client_t *c = setup_one_connection();
    mf_redis_session_t *s = session_of(c);
    in_session(s, "SUBSCRIBE sess:ch", "[$subscribe,$sess:ch,:1]");
    mf_redis_session_close(s);
    uint64_t connects = mf_redis_client_connects(c);
    s = session_of(c);
    in_session(s, "PING", "+PONG");
    mf_redis_session_close(s);
    ASSERT_EQ(mf_redis_client_connects(c), connects + 1);
    teardown();
}

TEST(a_canceled_task_closes_the_sessions_connection_and_later_ones_fail)
{
    mf_redis_client_t *c = setup();
    mf_redis_session_t *s = session_of(c);
    in_session(s, "WATCH sess:c", "+OK");
    result_t r = {0};
    mf_task_t *t = mf_task_redis_session_create(s, on_done, &r);
    split_commands("BLPOP sess:never 5", add_to_task, t);
    mf_task_start(t);
    mf_loop_run(loop, MF_RUN_NOWAIT);
    mf_task_cancel(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_CANCELED, MF_ECANCELED);
    ASSERT(!mf_redis_session_has_connection(s));
    result_t later = {0};
    t = mf_task_redis_session_create(s, on_done, &later);
    split_commands("PING", add_to_task, t);
    mf_task_start(t);
    run_until(&later.done, 1);
    ASSERT_EQ(later.state, MF_STATE_SYS_ERROR);
    mf_redis_session_close(s);
    ASSERT_EQ(pool_now().dedicated, 0);
    teardown();
}
