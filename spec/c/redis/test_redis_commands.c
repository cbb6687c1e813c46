/* The redis task's commands against a real redis-server
 * (redis_harness.h): every reply type, binary-safe arguments and replies,
 * big values and max_reply, replies nested deeper than the reader allows,
 * pipelines in a task and across tasks on one shared connection, MULTI/EXEC,
 * prepared commands (encoded once, run by many tasks, routed as added ones)
 * and no malloc per request in steady state. */
#include "redis_harness.h"

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
    result_t e;
    run(c, &e, "GET k; NOSUCHCOMMAND; GET k; NOSUCHCOMMAND y");
    ASSERT_EQ(e.n, 4);
    ASSERT_EQ(e.errors, 2); /* counted as they arrive */
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
    ASSERT_EQ(r.errors, 0);
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

/* ---- pipelines and transactions ------------------------------------------ */

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

/* ---- prepared commands ----------------------------------------------------
 */

static void add_to_prepared(void *p, int argc, const char **argv)
{
    ASSERT_EQ(mf_redis_prepared_add(p, argc, argv, NULL), 0);
}

/* A prepared list from "SET a 1; GET a". */
static mf_redis_prepared_t *prepared_of(const char *line)
{
    mf_redis_prepared_t *p = mf_redis_prepared_create();
    split_commands(line, add_to_prepared, p);
    return p;
}

static void run_prepared(mf_redis_client_t *c, result_t *r,
                         const mf_redis_prepared_t *p)
{
    memset(r, 0, sizeof *r);
    mf_task_t *t = mf_task_redis_create(c, on_done, r);
    mf_task_redis_add_prepared(t, p);
    mf_task_start(t);
    run_until(&r->done, 1);
}

TEST(prepared_commands_run_in_many_tasks_as_added_ones_do)
{
    mf_redis_client_t *c = setup();
    mf_redis_prepared_t *p = prepared_of("DEL pk; INCR pk; INCRBY pk 10");
    ASSERT_EQ(mf_redis_prepared_count(p), 3);
    result_t r;
    for (int i = 0; i < 3; i++) {
        run_prepared(c, &r, p);
        ASSERT_EQ(r.state, MF_STATE_SUCCESS);
        ASSERT_STR_EQ(r.text, i ? ":1 | :1 | :11" : ":0 | :1 | :11");
    }
    /* Binary-safe lengths, and a task mixing added and prepared commands. */
    mf_redis_prepared_t *bin = mf_redis_prepared_create();
    const char *argv[] = {"SET", "pk\0bin", "v\r\n\0"};
    const size_t lens[] = {3, 6, 4};
    ASSERT_EQ(mf_redis_prepared_add(bin, 3, argv, lens), 0);
    ASSERT_EQ(mf_redis_prepared_add(bin, 0, argv, lens), MF_EINVAL);
    ASSERT_EQ(mf_redis_prepared_count(bin), 1);
    memset(&r, 0, sizeof r);
    mf_task_t *t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_prepared(t, bin);
    mf_task_redis_add_command(t, 2, (const char *[]){"STRLEN", "pk\0bin"},
                              (const size_t[]){6, 6});
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, "+OK | :4");
    /* The task copied the bytes: the list may go before the task ends. */
    memset(&r, 0, sizeof r);
    t = mf_task_redis_create(c, on_done, &r);
    mf_task_redis_add_prepared(t, p);
    mf_redis_prepared_destroy(p);
    mf_task_start(t);
    run_until(&r.done, 1);
    ASSERT_STR_EQ(r.text, ":1 | :1 | :11");
    mf_redis_prepared_destroy(bin);
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    teardown();
}

TEST(prepared_commands_are_routed_as_added_ones_are)
{
    mf_redis_client_t *c = setup();
    /* MULTI ... EXEC stays on the shared connection; a blocking command
     * takes a dedicated one; an empty list fails the task. */
    mf_redis_prepared_t *tx = prepared_of("DEL pc; MULTI; INCR pc; EXEC");
    mf_redis_prepared_t *block = prepared_of("BLPOP pq 0.01");
    mf_redis_prepared_t *empty = mf_redis_prepared_create();
    result_t r;
    run_prepared(c, &r, tx);
    ASSERT_STR_EQ(r.text, ":0 | +OK | +QUEUED | [:1]");
    ASSERT_EQ(mf_redis_client_connects(c), 1);
    run_prepared(c, &r, block);
    ASSERT_STR_EQ(r.text, "*nil");
    ASSERT_EQ(mf_redis_client_connects(c), 2);
    run_prepared(c, &r, empty);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);
    mf_redis_prepared_destroy(tx);
    mf_redis_prepared_destroy(block);
    mf_redis_prepared_destroy(empty);
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
