/* Which fields an answer may send as trailers (mf_http_trailer_fault):
 * RFC 9110 §6.5.1's forbidden fields refused in any case, valid others
 * accepted, malformed names and values refused first. */
#include <moonflow/http_server.h>

#include "test.h"

static const char *fault(const char *name, const char *value)
{
    return mf_http_trailer_fault(name, strlen(name), value, strlen(value));
}

TEST(allowed_fields)
{
    const char *ok[] = {"grpc-status", "Grpc-Message", "Server-Timing",
                        "X-Checksum",  "Digest",       "ETag-x",
                        "Content-MD5"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        ASSERT(fault(ok[i], "0") == NULL);
    ASSERT(fault("x", "") == NULL);
    ASSERT(fault("X-Sp", "a b\tc") == NULL);
}

TEST(forbidden_fields_any_case)
{
    const char *no[] = {"Content-Length",
                        "content-length",
                        "TRANSFER-ENCODING",
                        "Host",
                        "Authorization",
                        "Proxy-Authorization",
                        "WWW-Authenticate",
                        "Set-Cookie",
                        "Cache-Control",
                        "Content-Type",
                        "Content-Encoding",
                        "Content-Range",
                        "Trailer",
                        "TE",
                        "Connection",
                        "Keep-Alive",
                        "Upgrade",
                        "Range",
                        "If-None-Match",
                        "Location",
                        "Date",
                        "Vary",
                        "Expect",
                        "Max-Forwards",
                        "Age",
                        "Expires"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        const char *why = fault(no[i], "1");
        ASSERT(why != NULL);
        ASSERT(strstr(why, "6.5.1") != NULL);
    }
}

TEST(whole_tokens_only)
{
    /* a forbidden name inside a longer one is another field */
    ASSERT(fault("Content-Lengths", "1") == NULL);
    ASSERT(fault("X-Host", "1") == NULL);
    ASSERT(fault("Hos", "1") == NULL);
    ASSERT(mf_http_trailer_fault("Host", 3, "1", 1) == NULL); /* "Hos" */
}

TEST(malformed_fields)
{
    ASSERT_STR_EQ(fault("", "1"), "is not a valid field name");
    ASSERT_STR_EQ(fault("bad name", "1"), "is not a valid field name");
    ASSERT_STR_EQ(fault(":status", "1"), "is not a valid field name");
    ASSERT_STR_EQ(fault("Host:", "1"), "is not a valid field name");
    ASSERT_STR_EQ(fault("X-A", "a\r\nX-B: b"),
                  "has a control byte in its value");
    ASSERT_STR_EQ(mf_http_trailer_fault("X-A", 3, "a\0b", 3),
                  "has a control byte in its value");
}
