/*
 * test_mysql_query.c — text-protocol queries against a real mariadbd: the
 * URL, values typed per moonflow/mysql.h at their limits, several result
 * sets, statement errors, OK-packet counts, results over max_result,
 * quoting, and the unix-socket form.
 */
#include "mysql/mysql_harness.h"

TEST(malformed_urls_are_refused_with_einval)
{
    loop = mf_loop_create();
    const char *bad[] = {"postgres://a@h/db",
                         "mysql://",
                         "mysql://app:x@127.0.0.1:99999/test",
                         "mysql://app:x@127.0.0.1/test?sslmode=required",
                         "mysql://app:x@127.0.0.1/test?ssl=sometimes",
                         "mysql://app:x@127.0.0.1/test?connect_timeout=abc",
                         "mysql://app:x@127.0.0.1/test?charset=nosuchcharset",
                         "mysql://app:x@127.0.0.1/test?ca=/tmp/ca.pem",
                         "mysql://app:%zz@127.0.0.1/test",
                         "mysql://app:x@unix:relative/sock",
                         "mysql://app:x@127.0.0.1/test?charset=utf8mb4&",
                         "mysql://app:x@[::1/x]/test",
                         "mysql://app:x@[db.example]/test",
                         "mysql://app:x@a b/test",
                         "mysql://app:x@ex%41mple/test",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        int err = 0;
        if (mf_mysql_client(loop, bad[i], NULL, &err) != NULL)
            MF_TEST_FAIL("accepted %s", bad[i]);
        ASSERT_EQ(err, MF_EINVAL);
    }
    /* "unix:" with no '/' after it is a host named unix, with a port. */
    int err = -1;
    ASSERT(mf_mysql_client(loop, "mysql://app:x@unix:3306/test", NULL, &err));
    ASSERT_EQ(err, 0);
    err = -1;
    mf_mysql_client_t *a = mf_mysql_client(
        loop, "mysql://u%40x:p%3Aw@[::1]:3307/d%2Fb?charset=latin1", NULL,
        &err);
    ASSERT(a != NULL);
    ASSERT_EQ(err, 0);
    ASSERT(mf_mysql_client(loop,
                           "mysql://u%40x:p%3Aw@[::1]:3307/d%2Fb?charset="
                           "latin1",
                           NULL, &err) == a);
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 3;
    ASSERT(mf_mysql_client(loop,
                           "mysql://u%40x:p%3Aw@[::1]:3307/d%2Fb?charset="
                           "latin1",
                           &o, &err) != a);
    ASSERT(mf_mysql_client(loop, "mysql://u@unix:/run/my.sock:/db", NULL,
                           &err) != NULL);
    ASSERT(mf_mysql_client(loop,
                           "mysql://u:p@h.example/db?ssl=verify_ca&ca=/x.pem"
                           "&connect_timeout=100",
                           NULL, &err) != NULL);
    teardown();
}

TEST(a_select_returns_typed_values_and_fields)
{
    mf_mysql_client_t *c = setup();
    result_t r;
    run(c, &r, "SELECT 1 AS one, 'two' AS two, NULL AS three, 1.5e0 AS f");
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "i:1,two,NULL,d:1.5");
    ASSERT_EQ(r.nsets, 1);
    ASSERT_EQ(r.first.nfields, 4);
    ASSERT_EQ(r.first.nrows, 1);
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    ASSERT_EQ(mf_mysql_client_open(c), 1);
    teardown();
}

TEST(integers_at_their_limits_keep_their_sign_and_width)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS ints; CREATE TABLE ints (a TINYINT, b "
           "TINYINT UNSIGNED, c SMALLINT, d SMALLINT UNSIGNED, e MEDIUMINT, "
           "f MEDIUMINT UNSIGNED, g INT, h INT UNSIGNED, i BIGINT, j BIGINT "
           "UNSIGNED, y YEAR); INSERT INTO ints VALUES (-128, 255, -32768, "
           "65535, -8388608, 16777215, -2147483648, 4294967295, "
           "-9223372036854775808, 18446744073709551615, 2155), (127, 0, "
           "32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, "
           "1901)",
           "ok | ok | ok");
    expect(c, "SELECT * FROM ints",
           "i:-128,u:255,i:-32768,u:65535,i:-8388608,u:16777215,"
           "i:-2147483648,u:4294967295,i:-9223372036854775808,"
           "u:18446744073709551615,u:2155;"
           "i:127,u:0,i:32767,u:0,i:8388607,u:0,i:2147483647,u:0,"
           "i:9223372036854775807,u:0,u:1901");
    teardown();
}

TEST(decimals_dates_blobs_json_and_emoji_come_back_as_the_servers_text)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS misc; CREATE TABLE misc (d DECIMAL(65,30), "
           "f FLOAT, g DOUBLE, dt DATE, ts DATETIME(6), t TIME, b BLOB, "
           "s VARCHAR(20) CHARACTER SET utf8mb4, j JSON, bits BIT(8)); "
           "INSERT INTO misc VALUES "
           "(-12345678901234567890123456789012345.123456789012345678901234567"
           "891, 0.5, -3.75e10, '2024-02-29', '1999-12-31 23:59:59.999999', "
           "'-838:59:59', X'610062', '\xF0\x9F\x98\x80!', '{\"k\": [1, 2]}', "
           "b'101')",
           "ok | ok | ok");
    expect(c, "SELECT d, f, g, dt, ts, t, b, s, j FROM misc",
           "-12345678901234567890123456789012345.123456789012345678901234567"
           "891,d:0.5,d:-37500000000,2024-02-29,1999-12-31 23:59:59.999999,"
           "-838:59:59,a\\0b,\xF0\x9F\x98\x80!,{\"k\": [1, 2]}");
    result_t r;
    run(c, &r, "SELECT bits, LENGTH(s), CHAR_LENGTH(s) FROM misc");
    ASSERT_STR_EQ(r.text, "\x05,i:5,i:2");
    teardown();
}

TEST(three_statements_give_three_results_with_their_counts)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS multi; CREATE TABLE multi (id INT "
           "AUTO_INCREMENT PRIMARY KEY, v INT)",
           "ok | ok");
    result_t r;
    run(c, &r,
        "INSERT INTO multi (v) VALUES (10), (20), (30); SELECT v FROM multi "
        "ORDER BY id; UPDATE multi SET v = v + 1 WHERE v > 10");
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    ASSERT_STR_EQ(r.text, "ok | i:10;i:20;i:30 | ok");
    ASSERT_EQ(r.nsets, 3);
    ASSERT_EQ(r.first.affected_rows, 3);
    ASSERT_EQ(r.first.insert_id, 1);
    teardown();
}

TEST(a_statement_error_mid_batch_keeps_the_results_before_it)
{
    mf_mysql_client_t *c = setup();
    result_t r;
    run(c, &r, "SELECT 1; SELECT * FROM no_such_table; SELECT 3");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1146);
    ASSERT_STR_EQ(r.sqlstate, "42S02");
    ASSERT_STR_EQ(r.message, "Table 'test.no_such_table' doesn't exist");
    ASSERT_EQ(r.nsets, 1);
    ASSERT_STR_EQ(r.text, "i:1");
    /* the connection serves the next task */
    expect(c, "SELECT 2", "i:2");
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}

TEST(a_duplicate_key_keeps_the_servers_words)
{
    mf_mysql_client_t *c = setup();
    expect(c,
           "DROP TABLE IF EXISTS dup; CREATE TABLE dup (k VARCHAR(8) PRIMARY "
           "KEY); INSERT INTO dup VALUES ('x')",
           "ok | ok | ok");
    result_t r;
    run(c, &r, "INSERT INTO dup VALUES ('x')");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ESQL);
    ASSERT_EQ(r.code, 1062);
    ASSERT_STR_EQ(r.sqlstate, "23000");
    ASSERT_STR_EQ(r.message, "Duplicate entry 'x' for key 'PRIMARY'");
    ASSERT_EQ(r.nsets, 0);
    teardown();
}

TEST(results_over_max_result_fail_with_emsgsize)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_result = 64 * 1024;
    mf_mysql_client_t *c = setup_with(&o);
    result_t r;
    run(c, &r, "SELECT REPEAT('x', 100000)");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    expect(c, "SELECT LENGTH(REPEAT('x', 1000))", "i:1000");
    teardown();
}

TEST(a_task_without_a_query_fails_with_einval)
{
    mf_mysql_client_t *c = setup();
    result_t r = {0};
    mf_task_start(mf_task_mysql_create(c, on_done, &r));
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EINVAL);
    teardown();
}

/* Each quoted string, sent back by the server, is what was quoted. */
static void quote_round_trip(mf_mysql_client_t *c)
{
    static const char *const inputs[] = {"it's", "back\\slash", "\"dq\"",
                                         "\xF0\x9F\x98\x80 '\\", "nul\0byte"};
    static const size_t lens[] = {4, 10, 4, 7, 8};
    for (size_t i = 0; i < 5; i++) {
        char quoted[64], sql[128];
        size_t n = mf_mysql_quote(c, quoted, inputs[i], lens[i]);
        ASSERT(n <= 2 * lens[i] + 2);
        ASSERT_EQ(quoted[n], '\0');
        /* raw NUL bytes stay in the literal without backslash escapes */
        memcpy(sql, "SELECT HEX(", 11);
        memcpy(sql + 11, quoted, n);
        memcpy(sql + 11 + n, ")", 2);
        result_t r = {0};
        mf_task_t *t = mf_task_mysql_create(c, on_done, &r);
        ASSERT_EQ(mf_task_mysql_set_query(t, sql, 12 + n), 0);
        mf_task_start(t);
        run_until(&r.done, 1);
        EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
        char hex[64] = "";
        for (size_t k = 0; k < lens[i]; k++)
            snprintf(hex + 2 * k, 3, "%02X", (unsigned char)inputs[i][k]);
        ASSERT_STR_EQ(r.text, hex);
    }
}

TEST(quoted_strings_round_trip_with_backslash_escapes)
{
    mf_mysql_client_t *c = setup();
    char out[16];
    ASSERT_EQ(mf_mysql_quote(c, out, "a'b", 3), 6);
    ASSERT_STR_EQ(out, "'a\\'b'");
    quote_round_trip(c);
    teardown();
}

TEST(quoted_strings_round_trip_under_no_backslash_escapes)
{
    admin("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, "
          "',NO_BACKSLASH_ESCAPES')");
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.stmt_cache = 7; /* a client of its own: learns the mode afresh */
    mf_mysql_client_t *c = setup_with(&o);
    expect(c, "SELECT 1", "i:1");
    char out[16];
    ASSERT_EQ(mf_mysql_quote(c, out, "a'b\\", 4), 7);
    ASSERT_STR_EQ(out, "'a''b\\'");
    quote_round_trip(c);
    admin("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, "
          "'NO_BACKSLASH_ESCAPES', '')");
    teardown();
}

TEST(a_unix_socket_url_reaches_the_server)
{
    setup();
    char url[256];
    snprintf(url, sizeof url, "mysql://app:secret@unix:%s:/test",
             main_server.sock);
    mf_mysql_client_t *c = client_at(url);
    expect(c, "SELECT DATABASE(), @@socket = '' ", "test,i:0");
    teardown();
}

TEST(ssl_required_against_a_server_without_tls_fails_with_etls)
{
    setup();
    mf_mysql_client_t *c = client_at(
        url_with(&main_server, "app:secret", "test", "?ssl=required"));
    result_t r;
    run(c, &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_TLS_ERROR, MF_ETLS);
    ASSERT_EQ(r.code, 2026);
    ASSERT_STR_EQ(r.sqlstate, "HY000");
    ASSERT_STR_EQ(r.message,
                  "TLS/SSL error: ssl=required and the server offers no TLS");
    ASSERT_EQ(mf_mysql_client_open(c), 0);
    teardown();
}

TEST(a_query_that_cannot_be_copied_fails_with_enomem)
{
    mf_mysql_client_t *c = setup();
    static char sql[40000];
    memset(sql, ' ', sizeof sql - 1);
    memcpy(sql, "SELECT 7", 8);
    result_t r = {0};
    mf_task_t *t = mf_task_mysql_create(c, on_done, &r);
    mf_alloc_fail_next(1);
    ASSERT_EQ(mf_task_mysql_set_query(t, sql, 0), MF_ENOMEM);
    mf_alloc_fail_next(0);
    mf_task_start(t);
    run_until(&r.done, 1);
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_ENOMEM);
    expect(c, sql, "i:7"); /* the same big query, copied this time */
    teardown();
}

TEST(ssl_preferred_against_a_server_without_tls_stays_in_plain_text)
{
    setup();
    mf_mysql_client_t *c = client_at(
        url_with(&main_server, "app:secret", "test", "?ssl=preferred"));
    expect(c,
           "SELECT VARIABLE_VALUE = '' FROM information_schema.SESSION_STATUS "
           "WHERE VARIABLE_NAME = 'Ssl_cipher'",
           "i:1");
    teardown();
}
