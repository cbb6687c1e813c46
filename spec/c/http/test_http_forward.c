/* What a forward leaves out and adds: hop-by-hop fields (RFC 9110
 * §7.6.1, mf_http_hop_by_hop), the fixed ones and those a Connection
 * field names, and the Forwarded element (RFC 7239,
 * mf_http_forwarded_element), its IPv6 node and host quoted. */
#include <arpa/inet.h>

#include <moonflow/http_forward.h>

#include "test.h"

#define H(n, v)                          \
    {                                    \
        n, sizeof n - 1, v, sizeof v - 1 \
    }

static bool hop(const mf_http_header_t *hs, size_t n, const char *name)
{
    return mf_http_hop_by_hop(hs, n, name, strlen(name));
}

TEST(fixed_hop_by_hop_names_any_case)
{
    static const char *const names[] = {"Connection",
                                        "keep-alive",
                                        "Proxy-Connection",
                                        "TE",
                                        "Trailer",
                                        "Transfer-Encoding",
                                        "UPGRADE",
                                        "Proxy-Authenticate",
                                        "proxy-authorization"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++)
        ASSERT(hop(NULL, 0, names[i]));
    ASSERT(!hop(NULL, 0, "Host"));
    ASSERT(!hop(NULL, 0, "Authorization"));
    ASSERT(!hop(NULL, 0, "Trailers")); /* whole names only */
    ASSERT(!hop(NULL, 0, "T"));
}

TEST(names_listed_by_connection_are_hop_by_hop)
{
    mf_http_header_t hs[] = {
        H("Connection", "keep-alive, X-Private"), H("X-Private", "p"),
        H("connection", " x-other ,\tX-Third "), H("X-Kept", "k")};
    size_t n = MF_ARRAY_SIZE(hs);
    ASSERT(hop(hs, n, "X-Private"));
    ASSERT(hop(hs, n, "x-private"));
    ASSERT(hop(hs, n, "X-Other")); /* a second Connection field */
    ASSERT(hop(hs, n, "X-Third")); /* spaces and tabs around tokens */
    ASSERT(!hop(hs, n, "X-Kept"));
    ASSERT(!hop(hs, n, "X-Priv")); /* a prefix is another name */
    ASSERT(!hop(hs, n, "X-Private-2"));
}

static mf_sockaddr_t addr(const char *ip)
{
    mf_sockaddr_t a;
    memset(&a, 0, sizeof a);
    if (strchr(ip, ':')) {
        a.in6.sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &a.in6.sin6_addr);
    } else {
        a.in4.sin_family = AF_INET;
        inet_pton(AF_INET, ip, &a.in4.sin_addr);
    }
    return a;
}

TEST(forwarded_element_v4_token_host)
{
    char out[256];
    mf_sockaddr_t a = addr("192.0.2.60");
    size_t n = mf_http_forwarded_element(out, sizeof out, &a, "http",
                                         "example.com", 11);
    ASSERT_STR_EQ(out, "for=192.0.2.60;proto=http;host=example.com");
    ASSERT_EQ(n, strlen(out));
}

TEST(forwarded_element_quotes_v6_and_host_with_port)
{
    char out[256];
    mf_sockaddr_t a = addr("2001:db8:cafe::17");
    mf_http_forwarded_element(out, sizeof out, &a, "https", "h.test:8443", 11);
    ASSERT_STR_EQ(
        out, "for=\"[2001:db8:cafe::17]\";proto=https;host=\"h.test:8443\"");
    a = addr("::1");
    mf_http_forwarded_element(out, sizeof out, &a, NULL, NULL, 0);
    ASSERT_STR_EQ(out, "for=\"[::1]\";proto=http"); /* no host: none */
}

TEST(forwarded_element_escapes_quotes_in_host)
{
    char out[256];
    mf_sockaddr_t a = addr("10.0.0.1");
    const char host[] = "a\"b\\c";
    mf_http_forwarded_element(out, sizeof out, &a, "http", host,
                              sizeof host - 1);
    ASSERT_STR_EQ(out, "for=10.0.0.1;proto=http;host=\"a\\\"b\\\\c\"");
}

TEST(forwarded_element_that_does_not_fit_is_0)
{
    char out[26]; /* "for=192.0.2.60;proto=http" and its NUL */
    mf_sockaddr_t a = addr("192.0.2.60");
    ASSERT_EQ(mf_http_forwarded_element(out, sizeof out, &a, "http",
                                        "example.com", 11),
              0);
    ASSERT_EQ(mf_http_forwarded_element(out, 4, &a, "http", NULL, 0), 0);
    ASSERT(mf_http_forwarded_element(out, sizeof out, &a, "http", NULL, 0) > 0);
}
