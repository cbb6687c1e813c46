/*
 * test_mysql_pipeline.c — pipelined prepared statements (opts.pipeline)
 * against a real mariadbd: results identical to the unpipelined path for
 * every value type, a failing statement in the middle of a pipeline fails
 * alone, a result typed unlike the prepare's is read right when the
 * server leaves out its column definitions, statements submitted together
 * leave in one send, and the server
 * killed (SIGKILL) and restarted under 16 chains of
 * mixed selects and inserts: every statement reported exactly once, every
 * insert reported done is in the table, none applied twice.
 */
#include <linux/tcp.h> /* tcp_info's data segment count */

#include "mysql/mysql_harness.h"

static mf_mysql_opts_t piped(unsigned depth, unsigned conns)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.pipeline = depth;
    o.max_connections = conns;
    return o;
}

static mf_task_t *bound(mf_mysql_client_t *c, result_t *r, const char *sql,
                        size_t n, const mf_mysql_param_t *params)
{
    mf_task_t *t = query_task(c, r, sql);
    ASSERT_EQ(mf_task_mysql_bind(t, n, params), 0);
    return t;
}

#define TEXT(s) MF_MYSQL_TEXTN(s, sizeof(s) - 1)
#define NUL ((mf_mysql_param_t){.type = MF_MYSQL_NULL})

enum { NQ = 12 };

/* Runs the same statements on both clients: all at once on the pipelined
 * one (so they really share connections), one by one on the other. */
static void compare(mf_mysql_client_t *plain, mf_mysql_client_t *pipe,
                    const char *const *sqls, const mf_mysql_param_t *params,
                    int n)
{
    static result_t a[NQ], b[NQ];
    int done = 0;
    for (int i = 0; i < n; i++) {
        memset(&b[i], 0, sizeof b[i]);
        mf_task_start(bound(pipe, &b[i], sqls[i], 1, &params[i]));
    }
    for (int i = 0; i < n; i++) {
        memset(&a[i], 0, sizeof a[i]);
        mf_task_start(bound(plain, &a[i], sqls[i], 1, &params[i]));
        run_until(&a[i].done, 1);
    }
    for (int i = 0; i < n; i++) {
        run_until(&b[i].done, 1);
        done++;
        EXPECT_STATE(a[i], MF_STATE_SUCCESS, 0);
        EXPECT_STATE(b[i], MF_STATE_SUCCESS, 0);
        if (strcmp(a[i].text, b[i].text) != 0)
            MF_TEST_FAIL("%s: unpipelined \"%s\", pipelined \"%s\"", sqls[i],
                         a[i].text, b[i].text);
        ASSERT_EQ(a[i].nsets, b[i].nsets);
        ASSERT_EQ(a[i].first.affected_rows, b[i].first.affected_rows);
    }
    ASSERT_EQ(done, n);
}

TEST(pipelined_results_equal_unpipelined_ones_for_every_type)
{
    mf_mysql_client_t *plain = setup();
    mf_mysql_opts_t o = piped(8, 2);
    mf_mysql_client_t *pipe = setup_with(&o);
    ASSERT(pipe != plain);
    expect(plain,
           "DROP TABLE IF EXISTS pt; CREATE TABLE pt (k INT PRIMARY KEY, "
           "ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT, "
           "ub BIGINT UNSIGNED, f FLOAT, d DOUBLE, dc DECIMAL(12,4), "
           "s VARCHAR(40), b BLOB, dt DATE, tm TIME(3), dtm DATETIME(6), "
           "ts TIMESTAMP NULL, y YEAR, bit BIT(9), e ENUM('x','y'), j JSON)",
           "ok | ok");
    expect(plain,
           "INSERT INTO pt VALUES (1, -128, 65535, -8388608, "
           "-9223372036854775808, 18446744073709551615, 3.14, -2.5e-300, "
           "-12345678.1234, 'h\xc3\xa9llo', 'a\\0b', '2024-02-29', "
           "'-838:59:58.999', '2024-02-29 23:59:58.123456', "
           "'2001-01-01 00:00:01', 2155, b'101010101', 'y', '{\"a\": [1]}'),"
           "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
           "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),"
           "(3, 0, 0, 0, 0, 0, 0, 0, 0, '', '', '0000-00-00', '00:00:00', "
           "'0000-00-00 00:00:00', NULL, 1901, b'0', 'x', '[]')",
           "ok");
    const char *all = "SELECT * FROM pt WHERE k = ?";
    const char *sqls[NQ] = {all, all, all,
                            "SELECT ?", "SELECT ?", "SELECT ?",
                            "SELECT ?", "SELECT ?",
                            "SELECT k FROM pt WHERE k > ? ORDER BY k",
                            "SELECT COUNT(*) FROM pt WHERE k = ?",
                            "UPDATE pt SET ti = ti WHERE k = ?",
                            "SELECT ? IS NULL"};
    mf_mysql_param_t params[NQ] = {
        MF_MYSQL_INT(1),  MF_MYSQL_INT(2),   MF_MYSQL_INT(3),
        TEXT("t\0x"),     MF_MYSQL_INT(-5),  {.type = MF_MYSQL_DOUBLE, .d = 0.1},
        {.type = MF_MYSQL_UINT, .u = UINT64_MAX},
        {.type = MF_MYSQL_BLOB, .s = "\x01\x02", .len = 2},
        MF_MYSQL_INT(0),  MF_MYSQL_INT(9),   MF_MYSQL_INT(1),
        NUL};
    for (int round = 0; round < 3; round++) /* prepared, then cached */
        compare(plain, pipe, sqls, params, NQ);
    teardown();
}

TEST(a_failing_statement_in_the_middle_fails_alone)
{
    mf_mysql_client_t *plain = setup();
    mf_mysql_opts_t o = piped(16, 1);
    mf_mysql_client_t *pipe = setup_with(&o);
    expect(plain, "DROP TABLE IF EXISTS pe; CREATE TABLE pe (k INT PRIMARY KEY)",
           "ok | ok");
    enum { N = 30 };
    static result_t r[N];
    for (int i = 0; i < N; i++) {
        memset(&r[i], 0, sizeof r[i]);
        /* 10 and 20 repeat key 5: duplicates in the middle of the pipe. */
        mf_mysql_param_t k = MF_MYSQL_INT(i == 10 || i == 20 ? 5 : i);
        const char *sql = i == 15 ? "SELECT * FROM no_such_table WHERE k = ?"
                                  : "INSERT INTO pe VALUES (?)";
        mf_task_start(bound(pipe, &r[i], sql, 1, &k));
    }
    for (int i = 0; i < N; i++)
        run_until(&r[i].done, 1);
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(r[i].done, 1);
        if (i == 10 || i == 20) {
            EXPECT_STATE(r[i], MF_STATE_TASK_ERROR, MF_ESQL);
            ASSERT_EQ(r[i].code, 1062);
        } else if (i == 15) {
            EXPECT_STATE(r[i], MF_STATE_TASK_ERROR, MF_ESQL);
            ASSERT_EQ(r[i].code, 1146);
        } else {
            EXPECT_STATE(r[i], MF_STATE_SUCCESS, 0);
            ASSERT_EQ(r[i].first.affected_rows, 1);
        }
    }
    expect(plain, "SELECT COUNT(*) FROM pe", "i:27");
    /* A wrong count of parameters fails alone too. */
    result_t bad, good;
    memset(&bad, 0, sizeof bad);
    memset(&good, 0, sizeof good);
    mf_mysql_param_t two[] = {MF_MYSQL_INT(1), MF_MYSQL_INT(2)};
    mf_task_start(bound(pipe, &bad, "INSERT INTO pe VALUES (?)", 2, two));
    mf_task_start(bound(pipe, &good, "SELECT COUNT(*) FROM pe WHERE k < ?", 1,
                        &two[1]));
    run_until(&bad.done, 1);
    run_until(&good.done, 1);
    EXPECT_STATE(bad, MF_STATE_TASK_ERROR, MF_EINVAL);
    EXPECT_STATE(good, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(good.text, "i:2");
    teardown();
}

/* The server sends a statement's column definitions with its first
 * result, then none while they stay the same: the types are those it
 * sent, not the prepare's (LONG for CAST(? AS SIGNED), LONGLONG when
 * executed; SELECT ? takes the parameter's). */
TEST(a_result_typed_unlike_the_prepare_is_read_when_no_definitions_come)
{
    mf_mysql_opts_t o = piped(4, 1);
    mf_mysql_client_t *pipe = setup_with(&o);
    const char *sqls[] = {"SELECT CAST(? AS SIGNED)", "SELECT ?"};
    for (size_t q = 0; q < MF_ARRAY_SIZE(sqls); q++) {
        for (int i = 1; i <= 3; i++) {
            result_t r;
            memset(&r, 0, sizeof r);
            mf_mysql_param_t k = MF_MYSQL_INT(i * 1000);
            mf_task_start(bound(pipe, &r, sqls[q], 1, &k));
            run_until(&r.done, 1);
            EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
            char want[16];
            snprintf(want, sizeof want, "i:%d", i * 1000);
            ASSERT_STR_EQ(r.text, want);
        }
    }
    teardown();
}

/* ---- statements submitted together share one send ------------------------ */

/* Data segments this process sent to the main server so far (every TCP
 * socket whose peer is its port): loopback carries one send as one
 * segment (the connector sets TCP_NODELAY). */
static uint64_t segs_to_server(void)
{
    uint64_t segs = 0;
    for (int fd = 3; fd < 1024; fd++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0 ||
            peer.sin_family != AF_INET ||
            ntohs(peer.sin_port) != main_server.port)
            continue;
        struct tcp_info ti;
        len = sizeof ti;
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
            segs += ti.tcpi_data_segs_out;
    }
    return segs;
}

TEST(statements_submitted_together_leave_in_one_send)
{
    mf_mysql_opts_t o = piped(16, 1);
    mf_mysql_client_t *pipe = setup_with(&o);
    static result_t r[NQ];
    mf_mysql_param_t one = MF_MYSQL_INT(1);
    memset(&r[0], 0, sizeof r[0]);
    /* A result whose type is not the parameter's: the server's cached
     * column definitions are the prepared statement's. */
    const char *sql = "SELECT CAST(? AS SIGNED)";
    mf_task_start(bound(pipe, &r[0], sql, 1, &one)); /* prepared */
    run_until(&r[0].done, 1);
    EXPECT_STATE(r[0], MF_STATE_SUCCESS, 0);
    uint64_t before = segs_to_server();
    int done = 0;
    for (int i = 0; i < NQ; i++) {
        memset(&r[i], 0, sizeof r[i]);
        mf_mysql_param_t k = MF_MYSQL_INT(i);
        mf_task_start(bound(pipe, &r[i], sql, 1, &k));
    }
    for (int i = 0; i < NQ; i++) {
        run_until(&r[i].done, 1);
        EXPECT_STATE(r[i], MF_STATE_SUCCESS, 0);
        char want[16];
        snprintf(want, sizeof want, "i:%d", i);
        ASSERT_STR_EQ(r[i].text, want);
        done++;
    }
    ASSERT_EQ(done, NQ);
    uint64_t segs = segs_to_server() - before;
    if (segs != 1)
        MF_TEST_FAIL("%d statements went out in %llu segments, not 1", NQ,
                     (unsigned long long)segs);
    teardown();
}

/* ---- the server killed under load ------------------------------------------ */

#ifdef MF_TEST_SANITIZED
enum { CHAINS = 16, PER_CHAIN = 1000 };
#else
enum { CHAINS = 16, PER_CHAIN = 10000 };
#endif

typedef struct chain {
    int id;
    int issued; /* statements started */
    bool parked; /* its last one failed: waits for the server */
} chain_t;

static chain_t chains[CHAINS];
static uint8_t reports[CHAINS][PER_CHAIN]; /* completions per statement */
static uint8_t inserted[CHAINS][PER_CHAIN]; /* 1: an insert reported done */
static uint8_t is_insert[CHAINS][PER_CHAIN];
static int completed, failed, parked;
static mf_mysql_client_t *load_client;

static void chain_next(chain_t *ch);

static void chain_cb(mf_task_t *t)
{
    uintptr_t tag = (uintptr_t)t->user;
    chain_t *ch = &chains[tag / PER_CHAIN];
    int i = (int)(tag % PER_CHAIN);
    reports[ch->id][i]++;
    completed++;
    if (mf_task_state(t) == MF_STATE_SUCCESS) {
        if (is_insert[ch->id][i])
            inserted[ch->id][i] = 1;
        chain_next(ch);
        return;
    }
    failed++;
    int e = mf_task_error(t);
    if (e != MF_ECONNRESET && e != MF_ECLOSED && e != MF_ECONNREFUSED &&
        e != MF_EPROTO && e != MF_ETIMEDOUT)
        MF_TEST_FAIL("chain %d statement %d: %s (%u %s)", ch->id, i,
                     mf_err_name(e), mf_task_mysql_error(t)->code,
                     mf_task_mysql_error(t)->message);
    ch->parked = true; /* the next one waits for the server */
    parked++;
}

static void chain_next(chain_t *ch)
{
    if (ch->issued == PER_CHAIN)
        return;
    int i = ch->issued++;
    bool ins = i % 2 == 0;
    is_insert[ch->id][i] = ins;
    mf_task_t *t = mf_task_mysql_create(load_client, chain_cb,
                                        (void *)(uintptr_t)(ch->id * PER_CHAIN + i));
    mf_mysql_param_t k = MF_MYSQL_INT((int64_t)ch->id * PER_CHAIN + i);
    if (ins) {
        mf_task_mysql_set_query(t, "INSERT INTO pk (k, v) VALUES (?, 'x')", 0);
    } else {
        k = MF_MYSQL_INT((int64_t)ch->id * PER_CHAIN + i - 1);
        mf_task_mysql_set_query(t, "SELECT v FROM pk WHERE k = ?", 0);
    }
    mf_task_mysql_bind(t, 1, &k);
    mf_task_start(t);
}

static void unpark_all(void)
{
    for (int c = 0; c < CHAINS; c++)
        if (chains[c].parked) {
            chains[c].parked = false;
            parked--;
            chain_next(&chains[c]);
        }
}


static int rows_seen, rows_of_failed, rows_bad;

/* The table after the run: each key belongs to an insert that was reported
 * done or failed, once. */
static void rows_cb(mf_task_t *t)
{
    int *ok = t->user;
    static uint8_t seen[CHAINS][PER_CHAIN];
    if (mf_task_state(t) != MF_STATE_SUCCESS)
        MF_TEST_FAIL("reading the table: %s %s", mf_err_name(mf_task_error(t)),
                     mf_task_mysql_error(t)->message);
    const mf_mysql_result_t *r = mf_task_mysql_result(t, 0);
    for (size_t i = 0; i < r->nrows; i++) {
        int64_t k = r->rows[i][0].i;
        int c = (int)(k / PER_CHAIN), n = (int)(k % PER_CHAIN);
        if (k < 0 || c >= CHAINS || !is_insert[c][n] || seen[c][n]++) {
            rows_bad++;
            continue;
        }
        rows_seen++;
        if (!inserted[c][n])
            rows_of_failed++;
    }
    for (int c = 0; c < CHAINS; c++)
        for (int n = 0; n < PER_CHAIN; n++)
            if (inserted[c][n] && !seen[c][n])
                rows_bad++; /* reported done, not there */
    (*ok)++;
}

TEST(the_server_killed_mid_run_fails_each_statement_once_and_applies_none_twice)
{
    mf_mysql_client_t *plain = setup();
    expect(plain,
           "DROP TABLE IF EXISTS pk; CREATE TABLE pk (k BIGINT PRIMARY KEY, "
           "v CHAR(1))",
           "ok | ok");
    /* A commit without its fsync: 80,000 fsynced inserts would take
     * minutes; a killed server keeps what it wrote (the kernel has it). */
    admin("SET GLOBAL innodb_flush_log_at_trx_commit = 2");
    mf_mysql_opts_t o = piped(16, 4);
    o.connect_timeout_ms = 2000;
    load_client = setup_with(&o);
    for (int c = 0; c < CHAINS; c++) {
        chains[c] = (chain_t){.id = c};
        chain_next(&chains[c]);
    }
    const int total = CHAINS * PER_CHAIN;
    bool killed = false;
    uint64_t end = now_ms() + 600000;
    while (completed < total && now_ms() < end) {
        mf_loop_run(loop, MF_RUN_ONCE);
        if (!killed && completed >= total / 3) {
            killed = true;
            db_kill(&main_server);
            spin(200); /* the pipelines see their connections go */
            db_restart(&main_server);
            admin("SET GLOBAL innodb_flush_log_at_trx_commit = 2");
            unpark_all();
        }
        if (killed && parked == CHAINS && completed < total)
            unpark_all(); /* every chain failed after the restart too */
    }
    if (completed < total)
        MF_TEST_FAIL("only %d of %d statements reported", completed, total);
    fprintf(stderr, "%d statements, %d failed around the kill\n", total, failed);
    ASSERT(killed);
    ASSERT(failed > 0);
    int done_inserts = 0;
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < PER_CHAIN; i++) {
            if (reports[c][i] != 1)
                MF_TEST_FAIL("chain %d statement %d reported %d times", c, i,
                             reports[c][i]);
            done_inserts += inserted[c][i];
        }
    /* Every insert reported done is there; beyond those only the ones
     * that failed (in flight when the server died) may be; nothing is
     * there twice (the key is unique, and a statement sent again would
     * have failed with a duplicate, which no chain saw). */
    mf_mysql_opts_t big;
    mf_mysql_opts_init(&big);
    big.wait_timeout_ms = 20000;
    int err = 0;
    mf_mysql_client_t *check = mf_mysql_client(loop, main_url(), &big, &err);
    ASSERT(check != NULL);
    int ok = 0;
    mf_task_t *t = mf_task_mysql_create(check, rows_cb, &ok);
    ASSERT_EQ(mf_task_mysql_set_query(t, "SELECT k FROM pk", 0), 0);
    mf_task_start(t);
    run_until(&ok, 1);
    fprintf(stderr, "%d inserts done, %d rows, %d of them from failed inserts\n",
            done_inserts, rows_seen, rows_of_failed);
    ASSERT_EQ(rows_bad, 0);
    ASSERT_EQ(rows_seen - rows_of_failed, done_inserts);
    teardown();
}

/* The loop goes away with statements queued and in flight: the client's
 * pipelines, their buffers and statements are freed with it (the sanitizer
 * twin checks for leaks). */
TEST(a_loop_destroyed_mid_pipeline_frees_its_pipelines)
{
    mf_mysql_opts_t o = piped(4, 2);
    mf_mysql_client_t *c = setup_with(&o);
    enum { N = 40 };
    static result_t r[N];
    for (int i = 0; i < N; i++) {
        memset(&r[i], 0, sizeof r[i]);
        mf_mysql_param_t ms = MF_MYSQL_INT(i % 3);
        mf_task_start(bound(c, &r[i], "SELECT SLEEP(? / 100)", 1, &ms));
    }
    run_until(&r[0].done, 1);
    int done = 0;
    for (int i = 0; i < N; i++)
        done += r[i].done;
    ASSERT(done < N); /* some still queued or in flight */
    teardown();
}
