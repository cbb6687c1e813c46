/*
 * test_mysql_stmt.c — prepared statements against a real mariadbd: every
 * parameter type and NULL, the binary protocol's values equal to the text
 * protocol's for the type table, injection attempts landing as data, the
 * per-connection LRU cache (its bound seen on the server, evictions closing
 * statements, a reset dropping it), re-prepare after a table change, the
 * server's words on errors, procedures with several results, max_result,
 * and the allocations of a cached point select.
 */
#include "mysql/mysql_harness.h"

#ifndef MF_TEST_SANITIZED
/* bench/malloc_count.c, linked in (spec/CMakeLists.txt): it replaces
 * malloc, calloc and realloc with counting ones for the whole process, the
 * connector included. */
unsigned long malloc_count_read(void);

static unsigned long libc_mallocs(void)
{
    return malloc_count_read();
}
#else
static unsigned long libc_mallocs(void)
{
    return 0; /* ASan owns malloc: moonflow's own count only */
}
#endif

/* Options of a pool of one connection: the tests see what it does. */
static mf_mysql_opts_t one_connection(void)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 1;
    return o;
}

static inline mf_task_t *bound_task(mf_mysql_client_t *c, result_t *r,
                                    const char *sql, size_t n,
                                    const mf_mysql_param_t *params)
{
    mf_task_t *t = query_task(c, r, sql);
    ASSERT_EQ(mf_task_mysql_bind(t, n, params), 0);
    return t;
}

static inline void run_bound(mf_mysql_client_t *c, result_t *r, const char *sql,
                             size_t n, const mf_mysql_param_t *params)
{
    memset(r, 0, sizeof *r);
    mf_task_start(bound_task(c, r, sql, n, params));
    run_until(&r->done, 1);
}

static inline void expect_bound(mf_mysql_client_t *c, const char *sql, size_t n,
                                const mf_mysql_param_t *params,
                                const char *want)
{
    result_t r;
    run_bound(c, &r, sql, n, params);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    if (strcmp(r.text, want) != 0)
        MF_TEST_FAIL("%s: got \"%s\", want \"%s\"", sql, r.text, want);
}

/* A server counter, read as root (not through the pool under test). */
static inline unsigned long global_status(const char *name)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS"
             " WHERE VARIABLE_NAME = '%s'",
             name);
    return strtoul(admin(sql), NULL, 10);
}

/* Statements left by earlier tests' connections go when the server notices
 * those closed: wait for none, so counts on the server are this test's. */
static inline void wait_no_prepared(void)
{
    const char *sql = "SELECT VARIABLE_VALUE FROM information_schema."
                      "GLOBAL_STATUS WHERE VARIABLE_NAME = "
                      "'PREPARED_STMT_COUNT'";
    for (int i = 0; i < 250 && strcmp(admin(sql), "0") != 0; i++)
        usleep(20000);
    ASSERT_STR_EQ(admin(sql), "0");
}

#define TEXT(s) MF_MYSQL_TEXTN(s, sizeof(s) - 1)
#define UINT(v) ((mf_mysql_param_t){.type = MF_MYSQL_UINT, .u = (v)})
#define DOUBLE(v) ((mf_mysql_param_t){.type = MF_MYSQL_DOUBLE, .d = (v)})
#define BLOB(p, n) \
    ((mf_mysql_param_t){.type = MF_MYSQL_BLOB, .len = (n), .s = (p)})
#define NUL ((mf_mysql_param_t){.type = MF_MYSQL_NULL})

TEST(every_parameter_type_and_null_round_trip)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS p; CREATE TABLE p (k INT PRIMARY KEY, "
           "i BIGINT, u BIGINT UNSIGNED, d DOUBLE, s VARCHAR(64) CHARSET "
           "utf8mb4, b BLOB, n INT)",
           "ok | ok");
    mf_mysql_param_t row[] = {MF_MYSQL_INT(1),
                              MF_MYSQL_INT(INT64_MIN),
                              UINT(UINT64_MAX),
                              DOUBLE(-2.5e-300),
                              TEXT("h\xc3\xa9llo \xf0\x9f\x98\x80"),
                              BLOB("a\0b'\"\\", 6),
                              NUL};
    result_t r;
    run_bound(c, &r, "INSERT INTO p VALUES (?, ?, ?, ?, ?, ?, ?)", 7, row);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "ok");
    ASSERT_EQ(r.first.affected_rows, 1);
    mf_mysql_param_t k = MF_MYSQL_INT(1);
    expect_bound(c, "SELECT i, u, d, s, b, n FROM p WHERE k = ?", 1, &k,
                 "i:-9223372036854775808,u:18446744073709551615,"
                 "d:-2.5e-300,h\xc3\xa9llo \xf0\x9f\x98\x80,"
                 "a\\0b'\"\\,NULL");
    /* Each type as a bare parameter: the server types the column. */
    mf_mysql_param_t each[] = {MF_MYSQL_INT(-7), UINT(7),     DOUBLE(0.125),
                               TEXT(""),         BLOB("", 0), NUL};
    expect_bound(c, "SELECT ?, ?, ?, ?, ?, ?", 6, each,
                 "i:-7,u:7,d:0.125,,,NULL");
    /* A NULL compares as NULL, not as a value. */
    mf_mysql_param_t null_key = NUL;
    expect_bound(c, "SELECT COUNT(*) FROM p WHERE n <=> ?", 1, &null_key,
                 "i:1");
    teardown();
}

/* The type table: every kind of column at its limits, read through both
 * protocols; the rendered values (type and bytes) must be identical. */
TEST(binary_values_equal_text_values_for_the_type_table)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS ty; CREATE TABLE ty (k INT PRIMARY KEY, "
           "a TINYINT, b TINYINT UNSIGNED, c SMALLINT, d SMALLINT UNSIGNED, "
           "e MEDIUMINT, f MEDIUMINT UNSIGNED, g INT, h INT UNSIGNED, "
           "i BIGINT, j BIGINT UNSIGNED, y YEAR, z INT(6) ZEROFILL, "
           "m DECIMAL(65,30), fl FLOAT, fd FLOAT(9,3), db DOUBLE, "
           "dt DATE, tm DATETIME(6), t0 DATETIME, ti TIME, t3 TIME(3), "
           "ts TIMESTAMP(2) NULL, bl BLOB, vs VARCHAR(32) CHARSET utf8mb4, "
           "js JSON, bi BIT(12), en ENUM('x','y'), se SET('p','q'))",
           "ok | ok");
    expect(c,
           "INSERT INTO ty VALUES (1, -128, 255, -32768, 65535, -8388608, "
           "16777215, -2147483648, 4294967295, -9223372036854775808, "
           "18446744073709551615, 1901, 42, "
           "'-12345678901234567890123456789012345.123456789012345678901234567"
           "890', 3.14, 123456.789, 2.718281828459045, '1000-01-01', "
           "'9999-12-31 23:59:59.999999', '2024-02-29 12:00:00', "
           "'-838:59:59', '12:34:56.5', '2030-01-01 00:00:00.5', "
           "x'00ff00410042', '\xf0\x9f\x98\x80 emoji', '{\"a\": [1, null]}', "
           "b'101010101010', 'y', 'p,q'), (2, 127, 0, 32767, 0, 8388607, 0, "
           "2147483647, 0, 9223372036854775807, 0, 2155, 0, 0.000000000000000"
           "000000000000001, -1.17549e-38, -0.5, 1.7976931348623157e308, "
           "'0000-00-00', '0000-00-00 00:00:00', '1970-01-01 00:00:01', "
           "'00:00:00', '838:59:59.999', NULL, '', '', '[]', b'0', 'x', '')",
           "ok");
    expect(c, "INSERT INTO ty (k) VALUES (3)", "ok");
    const char *sql = "SELECT * FROM ty WHERE k >= ? ORDER BY k";
    char text_sql[96];
    snprintf(text_sql, sizeof text_sql, "%s", sql);
    memcpy(strchr(text_sql, '?'), "1", 1);
    result_t text, binary;
    run(c, &text, text_sql);
    EXPECT_STATE(text, MF_STATE_SUCCESS, 0);
    mf_mysql_param_t one = MF_MYSQL_INT(1);
    run_bound(c, &binary, sql, 1, &one);
    EXPECT_STATE(binary, MF_STATE_SUCCESS, 0);
    if (strcmp(text.text, binary.text) != 0)
        MF_TEST_FAIL("text \"%s\"\nbinary \"%s\"", text.text, binary.text);
    ASSERT_EQ(binary.first.nrows, 3);
    ASSERT_EQ(binary.first.nfields, 29);
    /* Spot checks of the shared form. */
    ASSERT(strstr(binary.text, "9999-12-31 23:59:59.999999,2024-02-29 "
                               "12:00:00,-838:59:59,12:34:56.500,2030-01-01 "
                               "00:00:00.50") != NULL);
    ASSERT(strstr(binary.text, "d:3.1400001049041748") == NULL);
    ASSERT(strstr(binary.text, "d:3.1400000000000001") != NULL);
    ASSERT(strstr(binary.text, "u:1901,u:42") != NULL);
    /* Expressions too (the server picks their types). */
    const char *exprs =
        "SELECT 1.50, -0.0e0, CAST(1 AS UNSIGNED), NOW(6) - NOW(6), "
        "DATE('2024-01-02'), CAST('10:11:12.123456' AS TIME(6)), NULL, "
        "X'00', 'a' = 'a', CONCAT('x', 1)";
    char bsql[256];
    snprintf(bsql, sizeof bsql, "%s FROM DUAL WHERE ? = 1", exprs);
    run(c, &text, exprs);
    EXPECT_STATE(text, MF_STATE_SUCCESS, 0);
    run_bound(c, &binary, bsql, 1, &one);
    EXPECT_STATE(binary, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(text.text, binary.text);
    teardown();
}

TEST(injection_attempts_through_parameters_land_as_data)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS users; CREATE TABLE users (name "
           "VARBINARY(64)); INSERT INTO users VALUES ('alice')",
           "ok | ok | ok");
    const mf_mysql_param_t attempts[] = {
        TEXT("'; DROP TABLE users; --"), TEXT("\\' OR 1=1 --"),
        TEXT("' OR '1'='1"), BLOB("x\0' OR 1=1 --", 14),
        TEXT("\"; DELETE FROM users; #")};
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
        /* Nothing matches a name that is not there... */
        expect_bound(c, "SELECT COUNT(*) FROM users WHERE name = ?", 1,
                     &attempts[i], "i:0");
        /* ...and stored, the attempt is a value like any other. */
        result_t r;
        run_bound(c, &r, "INSERT INTO users VALUES (?)", 1, &attempts[i]);
        EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
        mf_mysql_param_t back[] = {attempts[i], MF_MYSQL_INT(0)};
        run_bound(c, &r,
                  "SELECT name, LENGTH(name) FROM users WHERE name = ? AND "
                  "? = 0",
                  2, back);
        EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
        ASSERT_EQ(r.first.nrows, 1);
    }
    expect(c, "SELECT COUNT(*) FROM users", "i:6");
    expect(c, "SELECT LENGTH(name) FROM users WHERE name LIKE 'x%'", "i:14");
    teardown();
}

TEST(a_parameter_count_mismatch_fails_with_einval_and_the_connection_goes_on)
{
    mf_mysql_client_t *c = setup();
    mf_mysql_param_t one = MF_MYSQL_INT(1);
    result_t r;
    run_bound(c, &r, "SELECT ? + ?", 1, &one);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);
    ASSERT_EQ(r.code, 2034);
    ASSERT_STR_EQ(r.sqlstate, "HY000");
    ASSERT(strstr(r.message, "2 parameter markers") != NULL);
    mf_mysql_param_t three[] = {MF_MYSQL_INT(1), MF_MYSQL_INT(2),
                                MF_MYSQL_INT(3)};
    run_bound(c, &r, "SELECT ? + ?", 3, three);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);
    run_bound(c, &r, "SELECT 1", 1, &one);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);
    expect_bound(c, "SELECT ? + ?", 2, three, "i:3");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(statement_errors_keep_the_servers_words)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS uk; CREATE TABLE uk (k VARCHAR(8) PRIMARY "
           "KEY); INSERT INTO uk VALUES ('x')",
           "ok | ok | ok");
    mf_mysql_param_t x = TEXT("x");
    result_t r;
    run_bound(c, &r, "INSERT INTO uk VALUES (?)", 1, &x);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1062);
    ASSERT_STR_EQ(r.sqlstate, "23000");
    ASSERT_STR_EQ(r.message, "Duplicate entry 'x' for key 'PRIMARY'");
    run_bound(c, &r, "SELEKT ?", 1, &x); /* refused at prepare */
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1064);
    ASSERT_STR_EQ(r.sqlstate, "42000");
    run_bound(c, &r, "SELECT * FROM no_such_table WHERE a = ?", 1, &x);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1146);
    /* An error in the middle of the rows. */
    mf_mysql_param_t limit = MF_MYSQL_INT(500);
    run_bound(c, &r,
              "SELECT seq, IF(seq < ?, 'ok', (SELECT 1 UNION SELECT 2)) "
              "FROM seq_1_to_1000",
              1, &limit);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1242);
    ASSERT_STR_EQ(r.sqlstate, "21000");
    ASSERT_STR_EQ(r.message, "Subquery returns more than 1 row");
    /* A bound task runs one statement. */
    run_bound(c, &r, "SELECT ?; SELECT 2", 1, &x);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1064);
    expect_bound(c, "SELECT ?", 1, &x, "x");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_procedure_gives_each_of_its_result_sets)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP PROCEDURE IF EXISTS two; CREATE PROCEDURE two(IN n INT) "
           "BEGIN SELECT n AS a; SELECT n + 1 AS b, 'z' AS c; END",
           "ok | ok");
    mf_mysql_param_t n = MF_MYSQL_INT(41);
    expect_bound(c, "CALL two(?)", 1, &n, "i:41 | i:42,z | ok");
    expect_bound(c, "CALL two(?)", 1, &n, "i:41 | i:42,z | ok");
    expect(c, "CALL two(41)", "i:41 | i:42,z | ok");
    teardown();
}

TEST(the_lru_bound_holds_on_the_server_and_evictions_close_statements)
{
    mf_mysql_opts_t o = one_connection();
    o.stmt_cache = 4;
    mf_mysql_client_t *c = setup_with(&o);
    wait_no_prepared();
    unsigned long prepared = global_status("COM_STMT_PREPARE");
    unsigned long closed = global_status("COM_STMT_CLOSE");
    char sql[64];
    for (int i = 0; i < 10; i++) {
        snprintf(sql, sizeof sql, "SELECT ? + %d", i);
        char want[32];
        snprintf(want, sizeof want, "i:%d", 100 + i);
        mf_mysql_param_t p = MF_MYSQL_INT(100);
        expect_bound(c, sql, 1, &p, want);
        unsigned long open = global_status("PREPARED_STMT_COUNT");
        ASSERT_EQ(open, i < 4 ? i + 1 : 4);
    }
    ASSERT_EQ(global_status("COM_STMT_PREPARE") - prepared, 10);
    ASSERT_EQ(global_status("COM_STMT_CLOSE") - closed, 6);
    /* The four most recent are cached: running them prepares nothing. */
    for (int i = 9; i >= 6; i--) {
        snprintf(sql, sizeof sql, "SELECT ? + %d", i);
        mf_mysql_param_t p = MF_MYSQL_INT(1);
        result_t r;
        run_bound(c, &r, sql, 1, &p);
        EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    }
    ASSERT_EQ(global_status("COM_STMT_PREPARE") - prepared, 10);
    /* The least recent of them goes when a new one comes. */
    mf_mysql_param_t p = MF_MYSQL_INT(1);
    expect_bound(c, "SELECT ? * 2", 1, &p, "i:2");
    ASSERT_EQ(global_status("PREPARED_STMT_COUNT"), 4);
    expect_bound(c, "SELECT ? + 6", 1, &p, "i:7");
    ASSERT_EQ(global_status("COM_STMT_PREPARE") - prepared, 11);
    expect_bound(c, "SELECT ? + 9", 1, &p, "i:10");
    ASSERT_EQ(global_status("COM_STMT_PREPARE") - prepared, 12);
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
    wait_no_prepared(); /* closing the connection dropped the rest */
}

TEST(a_reset_drops_the_cache_and_statements_are_prepared_again)
{
    mf_mysql_opts_t o = one_connection();
    mf_mysql_client_t *c = setup_with(&o);
    wait_no_prepared();
    mf_mysql_param_t p = MF_MYSQL_INT(5);
    expect_bound(c, "SELECT ? * 3", 1, &p, "i:15");
    unsigned long prepared = global_status("COM_STMT_PREPARE");
    /* A session changes state: its connection is reset before reuse, and
     * COM_RESET_CONNECTION deallocates the server's statements. */
    mf_mysql_session_t *s = mf_mysql_session_open(c);
    result_t r;
    memset(&r, 0, sizeof r);
    mf_task_t *t = query_task(c, &r, "SET @v = 1");
    mf_task_mysql_set_session(t, s);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    memset(&r, 0, sizeof r);
    t = bound_task(c, &r, "SELECT ? * 3", 1, &p); /* cached: no prepare */
    mf_task_mysql_set_session(t, s);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "i:15");
    ASSERT_EQ(global_status("COM_STMT_PREPARE"), prepared);
    mf_mysql_session_close(s);
    expect(c, "SELECT @v", "NULL"); /* reset happened */
    ASSERT_EQ(global_status("PREPARED_STMT_COUNT"), 0);
    expect_bound(c, "SELECT ? * 3", 1, &p, "i:15");
    ASSERT_EQ(global_status("COM_STMT_PREPARE") -
                  global_status("COM_STMT_REPREPARE"),
              prepared + 1);
    ASSERT_EQ(global_status("PREPARED_STMT_COUNT"), 1);
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_statement_whose_table_changed_is_prepared_again_once)
{
    mf_mysql_opts_t o = one_connection();
    mf_mysql_client_t *c = setup_with(&o);
    expect(c,
           "DROP TABLE IF EXISTS alt; CREATE TABLE alt (a INT); INSERT INTO "
           "alt VALUES (1)",
           "ok | ok | ok");
    mf_mysql_param_t p = MF_MYSQL_INT(1);
    expect_bound(c, "SELECT * FROM alt WHERE a = ?", 1, &p, "i:1");
    /* The server counts its own re-prepare (COM_STMT_REPREPARE) among
     * the prepares too: the ones sent are the difference. */
    unsigned long prepared =
        global_status("COM_STMT_PREPARE") - global_status("COM_STMT_REPREPARE");
    admin("ALTER TABLE test.alt ADD COLUMN b VARCHAR(4) DEFAULT 'new'");
    result_t r;
    run_bound(c, &r, "SELECT * FROM alt WHERE a = ?", 1, &p);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "i:1,new");
    ASSERT_EQ(r.first.nfields, 2);
    ASSERT_EQ(global_status("COM_STMT_PREPARE") -
                  global_status("COM_STMT_REPREPARE"),
              prepared + 1);
    expect_bound(c, "SELECT * FROM alt WHERE a = ?", 1, &p, "i:1,new");
    /* A statement the table's loss invalidates fails with the words. */
    admin("DROP TABLE test.alt");
    run_bound(c, &r, "SELECT * FROM alt WHERE a = ?", 1, &p);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1146);
    expect_bound(c, "SELECT ? + 1", 1, &p, "i:2");
    teardown();
}

TEST(a_prepared_result_over_max_result_fails_with_emsgsize)
{
    mf_mysql_opts_t o = one_connection();
    o.max_result = 64 << 10;
    mf_mysql_client_t *c = setup_with(&o);
    mf_mysql_param_t n = MF_MYSQL_INT(100000);
    result_t r;
    run_bound(c, &r,
              "SELECT seq, 'abcdefgh' FROM seq_1_to_1000000 WHERE seq <= ?", 1,
              &n);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    /* The connection was mid-result: closed, and the pool goes on. */
    expect_bound(c, "SELECT ?", 1, &n, "i:100000");
    ASSERT_EQ(mf_mysql_client_connects(c), 2);
    teardown();
}

TEST(a_bound_task_past_its_timeout_is_killed_and_the_pool_goes_on)
{
    mf_mysql_opts_t o = one_connection();
    o.query_timeout_ms = 300;
    mf_mysql_client_t *c = setup_with(&o);
    mf_mysql_param_t s = DOUBLE(20);
    result_t r;
    run_bound(c, &r, "SELECT SLEEP(?)", 1, &s);
    EXPECT_STATE(r, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
    mf_mysql_param_t one = MF_MYSQL_INT(1);
    expect_bound(c, "SELECT ?", 1, &one, "i:1");
    mf_mysql_param_t zero = MF_MYSQL_INT(0);
    expect_bound(c, "SELECT SLEEP(?)", 1, &zero, "i:0");
    teardown();
}

static void count_cb(mf_task_t *task)
{
    int *ok = task->user;
    const mf_mysql_result_t *r = mf_task_mysql_result(task, 0);
    if (mf_task_state(task) == MF_STATE_SUCCESS && r && r->nrows == 1 &&
        r->rows[0][1].type == MF_MYSQL_TEXT)
        ++*ok;
}

/* Allocations per point select through a cached statement, the loop warm:
 * none through moonflow's allocators; the libc mallocs counted in the plain
 * build are libmariadb's (the COM_STMT_EXECUTE request buffer and the
 * memory-root block of the result's column definitions, each execute). */
TEST(a_cached_point_select_allocates_only_in_the_connector)
{
    mf_mysql_opts_t o = one_connection();
    mf_mysql_client_t *c = setup_with(&o);
    expect(c,
           "DROP TABLE IF EXISTS pt; CREATE TABLE pt (id INT PRIMARY KEY, "
           "name VARCHAR(32)); INSERT INTO pt SELECT seq, CONCAT('name-', "
           "seq) FROM seq_1_to_100",
           "ok | ok | ok");
    int ok = 0;
    const int warm = 50, measured = 1000;
    unsigned long before = 0;
    uint64_t ours = 0;
    for (int i = 0; i < warm + measured; i++) {
        if (i == warm) {
            before = libc_mallocs();
            ours = mf_alloc_count();
        }
        mf_task_t *t = mf_task_mysql_create(c, count_cb, &ok);
        mf_mysql_param_t id = MF_MYSQL_INT(1 + i % 100);
        mf_task_mysql_set_query(t, "SELECT id, name FROM pt WHERE id = ?", 0);
        mf_task_mysql_bind(t, 1, &id);
        mf_task_start(t);
        run_until(&ok, i + 1);
    }
    double per_query = (double)(libc_mallocs() - before) / measured;
    fprintf(stderr,
            "cached point select: %llu moonflow allocations, %.2f libc "
            "mallocs per query\n",
            (unsigned long long)(mf_alloc_count() - ours), per_query);
    ASSERT_EQ(ok, warm + measured);
    ASSERT_EQ(mf_alloc_count() - ours, 0);
#ifndef MF_TEST_SANITIZED
    ASSERT(per_query > 0); /* the wrappers do count */
    ASSERT(per_query <= 2);
#endif
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

/* A cached statement sends its parameter types once: while they stay the
 * same, COM_STMT_EXECUTE carries the values only (new-params-bound 0), as
 * the server's count of received bytes shows; a changed type, a changed
 * length and a failed execute in between still give the right values. */
TEST(a_cached_statement_sends_its_parameter_types_once)
{
    mf_mysql_opts_t o = one_connection();
    mf_mysql_client_t *c = setup_with(&o);
    const char *sql = "SELECT ? + ?";
    mf_mysql_param_t two[] = {MF_MYSQL_INT(1), MF_MYSQL_INT(2)};
    expect_bound(c, sql, 2, two, "i:3");
    /* What one read of the counter costs (its connection, its query). */
    unsigned long b0 = global_status("BYTES_RECEIVED");
    unsigned long b1 = global_status("BYTES_RECEIVED");
    const int n = 1000;
    for (int i = 0; i < n; i++) {
        two[0] = MF_MYSQL_INT(i);
        char want[32];
        snprintf(want, sizeof want, "i:%d", i + 2);
        expect_bound(c, sql, 2, two, want);
    }
    unsigned long b2 = global_status("BYTES_RECEIVED");
    double per = (double)((long)(b2 - b1) - (long)(b1 - b0)) / n;
    /* 4 header + 1 command + 4 id + 1 flags + 4 iterations + 1 null map + 1
     * new-params-bound + 16 values = 32; with the types: 36. */
    fprintf(stderr, "bytes received per execute: %.2f\n", per);
    ASSERT(per >= 31.5 && per < 33);
    /* Types changing under the cached statement. */
    mf_mysql_param_t mixed[] = {DOUBLE(0.5), MF_MYSQL_INT(2)};
    expect_bound(c, sql, 2, mixed, "d:2.5");
    mixed[0] = NUL;
    expect_bound(c, sql, 2, mixed, "NULL");
    mixed[0] = UINT(UINT64_MAX);
    mixed[1] = MF_MYSQL_INT(0);
    expect_bound(c, "SELECT ?, ?", 2, mixed, "u:18446744073709551615,i:0");
    expect_bound(c, sql, 2, two, "i:1001");
    mf_mysql_param_t s[] = {TEXT("ab"), TEXT("cde")};
    expect_bound(c, "SELECT CONCAT(?, ?)", 2, s, "abcde");
    s[0] = TEXT("");
    s[1] = TEXT("longer text");
    expect_bound(c, "SELECT CONCAT(?, ?)", 2, s, "longer text");
    s[0] = BLOB("x\0y", 3);
    expect_bound(c, "SELECT CONCAT(?, ?)", 2, s, "x\\0ylonger text");
    /* A failed execute, then the same statement with the same types. */
    expect(c, "DROP TABLE IF EXISTS ct; CREATE TABLE ct (k INT PRIMARY KEY)",
           "ok | ok");
    mf_mysql_param_t k = MF_MYSQL_INT(1);
    expect_bound(c, "INSERT INTO ct VALUES (?)", 1, &k, "ok");
    result_t r;
    run_bound(c, &r, "INSERT INTO ct VALUES (?)", 1, &k);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1062);
    k = MF_MYSQL_INT(2);
    expect_bound(c, "INSERT INTO ct VALUES (?)", 1, &k, "ok");
    expect(c, "SELECT GROUP_CONCAT(k ORDER BY k) FROM ct", "1,2");
    teardown();
}
