/*
 * test_mysql_tls.c — TLS against a real mariadbd that has a self-signed
 * certificate: verified with ca=, required without verification, refused
 * when the CA does not match, off when disabled.
 */
#include "mysql/mysql_harness.h"

static const char *cipher_sql =
    "SELECT VARIABLE_VALUE <> '' FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'Ssl_cipher'";

static mf_mysql_client_t *tls_client(const char *query)
{
    int err = -1;
    mf_mysql_client_t *c = mf_mysql_client(
        loop, url_with(&main_server, "app:secret", "test", query), NULL, &err);
    ASSERT(c != NULL);
    return c;
}

TEST(verify_ca_with_the_servers_ca_encrypts_the_connection)
{
    setup_server(true, NULL);
    char q[256];
    snprintf(q, sizeof q, "?ssl=verify_ca&ca=%s", main_server.cert.cert);
    expect(tls_client(q), cipher_sql, "i:1");
    snprintf(q, sizeof q, "?ssl=verify_identity&ca=%s", main_server.cert.cert);
    expect(tls_client(q), cipher_sql, "i:1");
    teardown();
}

TEST(required_encrypts_without_verifying)
{
    setup_server(true, NULL);
    expect(tls_client("?ssl=required"), cipher_sql, "i:1");
    expect(tls_client("?ssl=preferred"), cipher_sql, "i:1");
    teardown();
}

TEST(disabled_stays_in_plain_text)
{
    setup_server(true, NULL);
    expect(tls_client("?ssl=disabled"), cipher_sql, "i:0");
    expect(tls_client(NULL), cipher_sql, "i:0");
    teardown();
}

TEST(a_ca_that_did_not_sign_the_certificate_fails_with_etls)
{
    setup_server(true, NULL);
    mf_test_cert_t other;
    mf_test_cert_make(&other);
    char q[256];
    snprintf(q, sizeof q, "?ssl=verify_ca&ca=%s", other.cert);
    result_t r;
    run(tls_client(q), &r, "SELECT 1");
    ASSERT(mf_test_cert_remove(&other));
    EXPECT_STATE(r, MF_STATE_TLS_ERROR, MF_ETLS);
    ASSERT(r.code != 0);
    ASSERT(strstr(r.message, "TLS") || strstr(r.message, "SSL"));
    teardown();
}
