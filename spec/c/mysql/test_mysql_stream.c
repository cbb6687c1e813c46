/*
 * test_mysql_stream.c — streamed results against a real mariadbd: a
 * 1,000,000-row result through the text and the binary protocol with the
 * process's memory bounded, batches of at most batch_rows with nothing read
 * while the consumer holds one, an abandoned stream closing its connection
 * while the pool goes on, a server error mid-way, statements without rows.
 */
#include <stdbool.h>

#include "mysql/mysql_harness.h"

typedef struct seen {
    mf_task_t *task;
    size_t batch_rows;
    int batches;
    int done;
    int state;
    int error;
    unsigned code;
    char sqlstate[6];
    char message[600];
    size_t rows;
    size_t last_nrows;
    uint64_t sum;   /* of the first column */
    uint64_t bytes; /* of the text columns */
    long rss_start;
    long rss_max;
    bool hold;        /* keep each batch until told */
    int cancel_at;    /* cancel the task in this batch (0: never) */
    bool bad_batch;   /* more rows than batch_rows, or a bad value */
    size_t nresults;  /* in the callback */
    unsigned nfields; /* of the task's result */
    uint64_t affected;
} seen_t;

/* Resident memory in bytes. */
static long rss(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ASSERT(f != NULL);
    ASSERT_EQ(fscanf(f, "%ld %ld", &pages, &resident), 2);
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static void on_batch(mf_task_t *task, const mf_mysql_result_t *b, void *user)
{
    seen_t *s = user;
    s->batches++;
    s->last_nrows = b->nrows;
    if (b->nrows > s->batch_rows)
        s->bad_batch = true;
    for (size_t i = 0; i < b->nrows; i++) {
        const mf_mysql_value_t *v = b->rows[i];
        if (v[0].type == MF_MYSQL_INT || v[0].type == MF_MYSQL_UINT)
            s->sum += v[0].u;
        else
            s->bad_batch = true;
        for (unsigned c = 1; c < b->nfields; c++)
            if (v[c].type == MF_MYSQL_TEXT)
                s->bytes += v[c].len;
    }
    s->rows += b->nrows;
    if ((s->batches & 63) == 0) {
        long now = rss();
        if (now > s->rss_max)
            s->rss_max = now;
    }
    if (s->cancel_at && s->batches == s->cancel_at) {
        mf_task_cancel(task);
        return;
    }
    if (!s->hold)
        mf_task_mysql_next_batch(task);
}

static void on_stream_done(mf_task_t *task)
{
    seen_t *s = task->user;
    s->done++;
    s->state = mf_task_state(task);
    s->error = mf_task_error(task);
    const mf_mysql_error_t *e = mf_task_mysql_error(task);
    s->code = e->code;
    snprintf(s->sqlstate, sizeof s->sqlstate, "%s", e->sqlstate);
    snprintf(s->message, sizeof s->message, "%s", e->message ? e->message : "");
    s->nresults = mf_task_mysql_nresults(task);
    if (s->nresults) {
        s->nfields = mf_task_mysql_result(task, 0)->nfields;
        s->affected = mf_task_mysql_result(task, 0)->affected_rows;
    }
}

/* Starts a streaming task (params: a prepared statement). */
static void stream(mf_mysql_client_t *c, seen_t *s, const char *sql,
                   size_t batch_rows, size_t n, const mf_mysql_param_t *params)
{
    bool hold = s->hold;
    int cancel_at = s->cancel_at;
    memset(s, 0, sizeof *s);
    s->hold = hold;
    s->cancel_at = cancel_at;
    s->batch_rows = batch_rows;
    s->task = mf_task_mysql_create(c, on_stream_done, s);
    ASSERT_EQ(mf_task_mysql_set_query(s->task, sql, 0), 0);
    if (params)
        ASSERT_EQ(mf_task_mysql_bind(s->task, n, params), 0);
    mf_task_mysql_stream(s->task, batch_rows, on_batch, s);
    mf_task_start(s->task);
}

#ifdef MF_TEST_SANITIZED
#define RSS_BOUND (64l << 20) /* ASan's shadow and quarantine */
#else
#define RSS_BOUND (16l << 20)
#endif

static void expect_million(mf_mysql_client_t *c, size_t n,
                           const mf_mysql_param_t *params)
{
    /* Warm: the loop's free lists and the connection exist already. */
    expect(c, "SELECT 1", "i:1");
    seen_t s = {0};
    long start = rss();
    uint64_t t0 = now_ms();
    stream(c, &s,
           params ? "SELECT seq, REPEAT('x', ?) FROM seq_1_to_1000000"
                  : "SELECT seq, REPEAT('x', 100) FROM seq_1_to_1000000",
           256, n, params);
    run_until_for(&s.done, 1, 240000);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT(!s.bad_batch);
    ASSERT_EQ(s.rows, 1000000);
    ASSERT_EQ(s.sum, 500000500000ull);
    ASSERT_EQ(s.bytes, 100000000ull);
    ASSERT_EQ(s.batches, 1000000 / 256 + 1);
    ASSERT_EQ(s.last_nrows, 1000000 % 256);
    ASSERT_EQ(s.nresults, 1);
    ASSERT_EQ(s.nfields, 2);
    long growth = s.rss_max - start;
    fprintf(stderr,
            "%s stream of 1,000,000 rows (100 MB of text): %llu ms, RSS "
            "%ld KiB at start, growth %ld KiB at most\n",
            params ? "prepared" : "text", (unsigned long long)(now_ms() - t0),
            start >> 10, growth > 0 ? growth >> 10 : 0);
    ASSERT(growth < RSS_BOUND);
}

TEST(a_million_rows_stream_through_the_text_protocol_in_bounded_memory)
{
    mf_mysql_client_t *c = setup();
    expect_million(c, 0, NULL);
    teardown();
}

TEST(a_million_rows_stream_through_a_prepared_statement_in_bounded_memory)
{
    mf_mysql_client_t *c = setup();
    mf_mysql_param_t width = MF_MYSQL_INT(100);
    expect_million(c, 1, &width);
    teardown();
}

static void expect_held_batches(mf_mysql_client_t *c, size_t n,
                                const mf_mysql_param_t *params)
{
    seen_t s = {.hold = true};
    stream(c, &s,
           params ? "SELECT seq, 'v' FROM seq_1_to_1000 WHERE seq > ?"
                  : "SELECT seq, 'v' FROM seq_1_to_1000",
           100, n, params);
    for (int b = 1; b <= 11; b++) {
        run_until(&s.batches, b);
        /* Nothing more comes while the batch is held. */
        spin(b == 1 ? 200 : 5);
        ASSERT_EQ(s.batches, b);
        ASSERT_EQ(s.done, 0);
        ASSERT_EQ(s.last_nrows, b <= 10 ? 100 : 0);
        mf_task_mysql_next_batch(s.task);
        mf_task_mysql_next_batch(s.task); /* twice: no harm */
    }
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.batches, 11);
    ASSERT_EQ(s.rows, 1000);
    ASSERT_EQ(s.sum, 500500);
    ASSERT(!s.bad_batch);
}

TEST(batches_hold_at_most_batch_rows_and_reading_waits_for_the_consumer)
{
    mf_mysql_client_t *c = setup();
    expect_held_batches(c, 0, NULL);
    mf_mysql_param_t zero = MF_MYSQL_INT(0);
    expect_held_batches(c, 1, &zero);
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

static void expect_abandoned(mf_mysql_client_t *c, size_t n,
                             const mf_mysql_param_t *params)
{
    uint64_t connects = mf_mysql_client_connects(c);
    seen_t s = {.cancel_at = 3};
    stream(c, &s,
           params ? "SELECT seq, REPEAT('y', ?) FROM seq_1_to_1000000"
                  : "SELECT seq, REPEAT('y', 50) FROM seq_1_to_1000000",
           256, n, params);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_CANCELED, MF_ECANCELED);
    ASSERT_EQ(s.batches, 3);
    ASSERT_EQ(s.rows, 3 * 256);
    /* The connection was mid-result: never handed out again. */
    expect(c, "SELECT 2", "i:2");
    ASSERT_EQ(mf_mysql_client_connects(c), connects + 1);
    ASSERT_EQ(mf_mysql_client_open(c), 1);
    /* And the server forgot it (KILLed): only the new one is left. */
    for (int i = 0; i < 250 && server_connections("app") > 1; i++)
        spin(20);
    ASSERT_EQ(server_connections("app"), 1);
}

TEST(an_abandoned_stream_closes_its_connection_and_the_pool_goes_on)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 1;
    mf_mysql_client_t *c = setup_with(&o);
    expect(c, "SELECT 1", "i:1");
    expect_abandoned(c, 0, NULL);
    mf_mysql_param_t width = MF_MYSQL_INT(50);
    expect_abandoned(c, 1, &width);
    teardown();
}

TEST(a_batch_held_past_the_query_timeout_ends_the_stream_and_its_connection)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 1;
    o.query_timeout_ms = 300;
    mf_mysql_client_t *c = setup_with(&o);
    seen_t s = {.hold = true};
    stream(c, &s, "SELECT seq, REPEAT('z', 80) FROM seq_1_to_1000000", 100, 0,
           NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    ASSERT_EQ(s.batches, 1);
    expect(c, "SELECT 4", "i:4");
    ASSERT_EQ(mf_mysql_client_connects(c), 2);
    teardown();
}

TEST(a_stream_past_its_timeout_while_reading_ends_and_the_pool_goes_on)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 1;
    o.query_timeout_ms = 500;
    mf_mysql_client_t *c = setup_with(&o);
    /* The server stalls at row 250 (the rows before it out of its
     * buffers, 200 bytes each): the fetch in flight is cut off. */
    const char *sql = "SELECT seq, REPEAT('x', 200), SLEEP(IF(seq = 250, 5, "
                      "0)) FROM seq_1_to_1000 WHERE seq > ?";
    mf_mysql_param_t zero = MF_MYSQL_INT(0);
    for (int prepared = 0; prepared < 2; prepared++) {
        seen_t s = {0};
        stream(c, &s,
               prepared ? sql
                        : "SELECT seq, REPEAT('x', 200), SLEEP(IF(seq = "
                          "250, 5, 0)) FROM seq_1_to_1000",
               100, prepared, prepared ? &zero : NULL);
        run_until(&s.done, 1);
        EXPECT_STATE(s, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
        ASSERT(s.rows >= 100 && s.rows <= 200); /* whole batches */
        expect(c, "SELECT 5", "i:5");
    }
    /* The cached statement went with its connection: prepared anew. */
    seen_t s = {0};
    mf_mysql_param_t big = MF_MYSQL_INT(990);
    stream(c, &s, sql, 100, 1, &big);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.rows, 10);
    teardown();
}

TEST(a_stream_error_mid_way_fails_with_the_servers_code)
{
    mf_mysql_client_t *c = setup();
    const char *sql =
        "SELECT seq, IF(seq < 500, 'ok', (SELECT 1 UNION SELECT 2)) FROM "
        "seq_1_to_1000";
    seen_t s = {0};
    stream(c, &s, sql, 100, 0, NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(s.code, 1242);
    ASSERT_STR_EQ(s.sqlstate, "21000");
    ASSERT_EQ(s.rows, 400); /* the full batches before the error */
    mf_mysql_param_t limit = MF_MYSQL_INT(500);
    stream(c, &s,
           "SELECT seq, IF(seq < ?, 'ok', (SELECT 1 UNION SELECT 2)) FROM "
           "seq_1_to_1000",
           100, 1, &limit);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(s.code, 1242);
    ASSERT_EQ(s.rows, 400);
    expect(c, "SELECT 3", "i:3"); /* the pool goes on */
    teardown();
}

TEST(a_streamed_statement_without_rows_gives_its_counts)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS st; CREATE TABLE st (v INT); INSERT INTO st "
           "SELECT seq FROM seq_1_to_10",
           "ok | ok | ok");
    seen_t s = {0};
    stream(c, &s, "UPDATE st SET v = v + 1", 16, 0, NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.batches, 1);
    ASSERT_EQ(s.rows, 0);
    ASSERT_EQ(s.nresults, 1);
    ASSERT_EQ(s.nfields, 0);
    ASSERT_EQ(s.affected, 10);
    mf_mysql_param_t five = MF_MYSQL_INT(5);
    stream(c, &s, "DELETE FROM st WHERE v > ?", 16, 1, &five);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.batches, 1);
    ASSERT_EQ(s.affected, 6);
    /* An empty result: one empty batch, with its columns. */
    stream(c, &s, "SELECT v, 'x' FROM st WHERE v > 100", 16, 0, NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.batches, 1);
    ASSERT_EQ(s.nfields, 2);
    /* A batch as big as anything: the whole result in one (last) batch. */
    stream(c, &s, "SELECT v, 'x' FROM st", SIZE_MAX, 0, NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.batches, 1);
    ASSERT_EQ(s.rows, 4);
    ASSERT_EQ(s.sum, 2 + 3 + 4 + 5);
    /* Only the first of several statements streams; the connection that
     * still has the others to read is closed after. */
    uint64_t connects = mf_mysql_client_connects(c);
    stream(c, &s, "SELECT 7, 'a'; SELECT 8", 16, 0, NULL);
    run_until(&s.done, 1);
    EXPECT_STATE(s, MF_STATE_SUCCESS, 0);
    ASSERT_EQ(s.rows, 1);
    ASSERT_EQ(s.sum, 7);
    expect(c, "SELECT 9", "i:9");
    ASSERT_EQ(mf_mysql_client_connects(c), connects + 1);
    teardown();
}
