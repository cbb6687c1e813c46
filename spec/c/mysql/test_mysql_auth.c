/*
 * test_mysql_auth.c — authentication against a real mariadbd: a wrong
 * password and an unknown database fail with EACCES and the server's
 * words, an ed25519 account (the connector's client plugin) connects.
 */
#include "mysql/mysql_harness.h"

static mf_mysql_client_t *client_for(const char *userinfo, const char *db)
{
    int err = -1;
    mf_mysql_client_t *c = mf_mysql_client(
        loop, url_with(&main_server, userinfo, db, NULL), NULL, &err);
    ASSERT(c != NULL);
    return c;
}

TEST(a_wrong_password_fails_with_eacces_and_the_servers_message)
{
    setup();
    result_t r;
    run(client_for("app:wrong", "test"), &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_EQ(r.code, 1045);
    ASSERT_STR_EQ(r.sqlstate, "28000");
    ASSERT_STR_EQ(r.message, "Access denied for user 'app'@'127.0.0.1' "
                             "(using password: YES)");
    teardown();
}

TEST(an_unknown_database_fails_with_eacces_and_the_servers_message)
{
    setup();
    admin("CREATE USER IF NOT EXISTS wide@'%' IDENTIFIED BY 'w1de';"
          " GRANT ALL ON *.* TO wide@'%'");
    result_t r;
    run(client_for("wide:w1de", "nope"), &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_EQ(r.code, 1049);
    ASSERT_STR_EQ(r.sqlstate, "42000");
    ASSERT_STR_EQ(r.message, "Unknown database 'nope'");
    /* a database the user may not use */
    run(client_for("app:secret", "mysql"), &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_EQ(r.code, 1044);
    teardown();
}

TEST(an_ed25519_account_connects_through_the_client_plugin)
{
    setup();
    admin("INSTALL SONAME 'auth_ed25519';"
          " CREATE USER ed@'%' IDENTIFIED VIA ed25519 USING "
          "PASSWORD('ed pass');"
          " GRANT ALL ON test.* TO ed@'%'");
    ASSERT_STR_EQ(admin("SELECT plugin FROM mysql.user WHERE User = 'ed'"),
                  "ed25519");
    expect(client_for("ed:ed%20pass", "test"), "SELECT CURRENT_USER()", "ed@%");
    result_t r;
    run(client_for("ed:wrong", "test"), &r, "SELECT 1");
    EXPECT_STATE(r, MF_STATE_TASK_ERROR, MF_EACCES);
    ASSERT_EQ(r.code, 1045);
    teardown();
}

TEST(a_url_without_a_password_or_database_reaches_the_server)
{
    setup();
    admin("CREATE USER IF NOT EXISTS nopw@'%';"
          " GRANT SELECT ON test.* TO nopw@'%'");
    char url[128];
    snprintf(url, sizeof url, "mysql://nopw@127.0.0.1:%u", main_server.port);
    int err = -1;
    mf_mysql_client_t *c = mf_mysql_client(loop, url, NULL, &err);
    ASSERT(c != NULL);
    expect(c, "SELECT CURRENT_USER(), DATABASE()", "nopw@%,NULL");
    teardown();
}
