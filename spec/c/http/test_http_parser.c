/*
 * HTTP/1.1 parser: protocol cases as data, each replayed at every split
 * point of its bytes (llhttp's way), plus the helpers.
 *
 * Every prefix is parsed from its own malloc'd copy of exactly that many
 * bytes, so the sanitizer twin catches any read past the caller's length.
 */
#include <moonflow/http_parser.h>

#include "test.h"

/* Expected numbers are stored plus one: 0, what a designated initializer
 * leaves, means "not checked". */
#define V(x) ((long long)(x) + 1)
/* Expected string for a NULL pointer (query, host). */
#define ABSENT "<absent>"
#define RAW(s) .raw = (s), .raw_len = sizeof(s) - 1

static const char *case_name = "";

#define CHECK(cond)                                              \
    do {                                                         \
        if (!(cond))                                             \
            MF_TEST_FAIL("[%s] assertion %s", case_name, #cond); \
    } while (0)

#define CHECK_EQ(a, b)                                                     \
    do {                                                                   \
        long long mf_a_ = (long long)(a), mf_b_ = (long long)(b);          \
        if (mf_a_ != mf_b_)                                                \
            MF_TEST_FAIL("[%s] %s == %s: %lld != %lld", case_name, #a, #b, \
                         mf_a_, mf_b_);                                    \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *mf_a_ = (a), *mf_b_ = (b);                                 \
        if (strcmp(mf_a_, mf_b_) != 0)                                         \
            MF_TEST_FAIL("[%s] %s == %s: \"%s\" != \"%s\"", case_name, #a, #b, \
                         mf_a_, mf_b_);                                        \
    } while (0)

/* Checks an expected number unless it is 0 ("not checked"). */
#define CHECK_OPT(want, got)           \
    do {                               \
        if ((want) != 0)               \
            CHECK_EQ((got), (want)-1); \
    } while (0)

/* A (pointer, length) field as a C string; NULL becomes ABSENT. */
static const char *str_of(const char *p, size_t n)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    if (!p)
        return ABSENT;
    snprintf(b, sizeof bufs[0], "%.*s", (int)n, p);
    return b;
}

#define CHECK_FIELD(want, p, n)                \
    do {                                       \
        if (want)                              \
            CHECK_STR(str_of((p), (n)), want); \
    } while (0)

/* Headers as "Name: value|Name: value". */
static const char *dump_headers(const mf_http_header_t *h, size_t n)
{
    static char out[2048];
    size_t used = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && used < sizeof out; i++)
        used += (size_t)snprintf(out + used, sizeof out - used, "%s%.*s: %.*s",
                                 i ? "|" : "", (int)h[i].name_len, h[i].name,
                                 (int)h[i].value_len, h[i].value);
    return out;
}

static char *copy_of(const char *raw, size_t n)
{
    char *p = malloc(n ? n : 1);
    ASSERT(p != NULL);
    memcpy(p, raw, n);
    return p;
}

/* ---- requests ------------------------------------------------------------ */

typedef struct req_case {
    const char *name;
    const char *raw;
    size_t raw_len;
    int status;      /* 0: parses; else the expected error_status */
    size_t head_len; /* when it parses: bytes consumed; 0: all of raw */
    size_t at;       /* errors: the first prefix length that gets the error, so
                        no byte after the one that rules the head out is waited
                        for (0: not checked) */
    const mf_http_limits_t *limits;
    size_t capacity; /* header array size; 0: 16 */
    const char *method, *target, *path, *query, *host, *headers;
    long long minor, body, content_length, keep_alive, expect_continue, upgrade;
} req_case_t;

static const mf_http_limits_t small_line = {1024, 32, 10};
static const mf_http_limits_t small_head = {64, 64, 10};
static const mf_http_limits_t two_headers = {1024, 1024, 2};

#define LONG_VALUE                                                         \
    "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuv" \
    "wxyz\tTAB 0123456789"

static const req_case_t req_cases[] = {
    /* ---- accepted ---- */
    {"simple GET", RAW("GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n"),
     .method = "GET", .target = "/index.html", .path = "/index.html",
     .query = ABSENT, .host = "example.com", .headers = "Host: example.com",
     .minor = V(1), .body = V(MF_HTTP_BODY_NONE), .keep_alive = V(true),
     .expect_continue = V(false), .upgrade = V(false)},
    {"HTTP/1.2 is read as 1.1 (RFC 9110 section 2.5)",
     RAW("GET / HTTP/1.2\r\nHost: a\r\n\r\n"), .minor = V(1),
     .keep_alive = V(true)},
    {"pipelined requests: the first head's length",
     RAW("GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
         "GET /b HTTP/1.1\r\nHost: h\r\n\r\n"),
     .head_len = 28, .path = "/a"},
    {"query split at the first '?'",
     RAW("GET /search?q=moon&x=a?b HTTP/1.1\r\nHost: a\r\n\r\n"),
     .path = "/search", .query = "q=moon&x=a?b"},
    {"empty query is present, not absent",
     RAW("GET /p? HTTP/1.1\r\nHost: a\r\n\r\n"), .path = "/p", .query = ""},
    {"header OWS trimmed on both sides, inner whitespace kept",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX-A:   two  words \t \r\nX-B:\r\n"
         "X-C:\tt\r\nX-D:  \r\n\r\n"),
     .headers = "Host: a|X-A: two  words|X-B: |X-C: t|X-D: "},
    {"long value with HTAB skipped word by word",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX-Long: " LONG_VALUE "\r\n\r\n"),
     .headers = "Host: a|X-Long: " LONG_VALUE},
    {"obs-text in a value",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n"),
     .headers = "Host: a|X: caf\xc3\xa9"},
    {"every tchar in a header name",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX-!#$%&'*+.^_`|~09: v\r\n\r\n"),
     .headers = "Host: a|X-!#$%&'*+.^_`|~09: v"},
    {"empty lines before the request line are skipped",
     RAW("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), .method = "GET",
     .path = "/"},
    {"extension method", RAW("PURGE /x HTTP/1.1\r\nHost: a\r\n\r\n"),
     .method = "PURGE"},
    {"Content-Length body",
     RAW("POST /f HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"),
     .head_len = 48, .body = V(MF_HTTP_BODY_LENGTH), .content_length = V(5)},
    {"Content-Length 0 is no body",
     RAW("POST /f HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
     .body = V(MF_HTTP_BODY_NONE), .content_length = V(0)},
    {"identical Content-Length fields are one",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n"
         "content-length: 7\r\n\r\n"),
     .body = V(MF_HTTP_BODY_LENGTH), .content_length = V(7)},
    {"Content-Length list of identical values",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 42 , 42,42\r\n\r\n"),
     .body = V(MF_HTTP_BODY_LENGTH), .content_length = V(42)},
    {"largest Content-Length",
     RAW("POST / HTTP/1.1\r\nHost: a\r\n"
         "Content-Length: 18446744073709551615\r\n\r\n"),
     .content_length = V(UINT64_MAX)},
    {"chunked request",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
     .body = V(MF_HTTP_BODY_CHUNKED)},
    {"chunked in any case",
     RAW("POST / HTTP/1.1\r\nHost: a\r\n"
         "Transfer-Encoding: CHUNKED\r\n\r\n"),
     .body = V(MF_HTTP_BODY_CHUNKED)},
    {"HTTP/1.0 closes by default and needs no Host",
     RAW("GET / HTTP/1.0\r\n\r\n"), .minor = V(0), .keep_alive = V(false),
     .host = ABSENT, .headers = ""},
    {"HTTP/1.0 keep-alive token",
     RAW("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
     .keep_alive = V(true)},
    {"close wins over keep-alive",
     RAW("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"),
     .keep_alive = V(false)},
    {"Connection close among other tokens",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo,, CLOSE \r\n\r\n"),
     .keep_alive = V(false)},
    {"Expect 100-continue, any case",
     RAW("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
         "Expect: 100-Continue\r\n\r\n"),
     .expect_continue = V(true)},
    {"Expect from HTTP/1.0 is ignored",
     RAW("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n"),
     .expect_continue = V(false)},
    {"Connection upgrade with an Upgrade field",
     RAW("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n"
         "Upgrade: websocket\r\n\r\n"),
     .upgrade = V(true), .keep_alive = V(true)},
    {"absolute-form: path, query and host from the target",
     RAW("GET http://example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"),
     .target = "http://example.com:8080/a/b?x=1", .path = "/a/b",
     .query = "x=1", .host = "example.com:8080"},
    {"absolute-form without a path routes as /",
     RAW("GET https://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"),
     .path = "/", .query = ABSENT, .host = "example.com"},
    {"absolute-form without a path, with a query",
     RAW("GET http://localhost?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n"),
     .path = "/", .query = "x=1", .host = "localhost"},
    {"absolute-form with an IPv6 literal and a port",
     RAW("GET http://[::1]:8080/p HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"),
     .path = "/p", .host = "[::1]:8080"},
    {"absolute-form names the host even beside an empty Host",
     RAW("GET http://a.test/ HTTP/1.1\r\nHost:\r\n\r\n"), .host = "a.test"},
    {"Host: IPv6 literal with a port",
     RAW("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"), .host = "[::1]:8080"},
    {"Host: IPv6 literal with an IPv4 tail",
     RAW("GET / HTTP/1.1\r\nHost: [::ffff:192.0.2.1]\r\n\r\n"),
     .host = "[::ffff:192.0.2.1]"},
    {"Host: IPvFuture literal", RAW("GET / HTTP/1.1\r\nHost: [v7.a:b]\r\n\r\n"),
     .host = "[v7.a:b]"},
    {"Host: a name", RAW("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
     .host = "example.com"},
    {"Host: a name and a port",
     RAW("GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"),
     .host = "example.com:8080"},
    {"Host: an IPv4 address and the highest port",
     RAW("GET / HTTP/1.1\r\nHost: 127.0.0.1:65535\r\n\r\n"),
     .host = "127.0.0.1:65535"},
    {"Host: port 0 with leading zeros",
     RAW("GET / HTTP/1.1\r\nHost: h:00000\r\n\r\n"), .host = "h:00000"},
    {"Host: an empty port (RFC 3986 §3.2.3)",
     RAW("GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n"),
     .host = "example.com:"},
    {"Host: every reg-name byte and an escape",
     RAW("GET / HTTP/1.1\r\nHost: aZ09-._~!$&'()*+,;=%4a\r\n\r\n"),
     .host = "aZ09-._~!$&'()*+,;=%4a"},
    {"asterisk-form for OPTIONS", RAW("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"),
     .path = "*", .query = ABSENT},
    {"authority-form for CONNECT",
     RAW("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
     .target = "example.com:443", .path = "", .host = "example.com:443"},
    {"authority-form with an IPv6 literal",
     RAW("CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n"),
     .target = "[::1]:443"},
    {"empty Host is allowed", RAW("GET / HTTP/1.1\r\nHost:\r\n\r\n"),
     .host = ""},
    {"request line one byte under the limit",
     RAW("GET /0123456789abcdefg HTTP/1.1\r\nHost: a\r\n\r\n"),
     .limits = &small_line, .path = "/0123456789abcdefg"},
    {"request line exactly at the limit",
     RAW("GET /0123456789abcdefgh HTTP/1.1\r\nHost: a\r\n\r\n"),
     .limits = &small_line, .path = "/0123456789abcdefgh"},
    {"head exactly at the limit",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 01234567890123456789012345678901"
         "\r\n\r\n"),
     .limits = &small_head},
    {"headers exactly at the limit",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\n"), .limits = &two_headers},

    /* ---- 400 ---- */
    {"Content-Length with Transfer-Encoding",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     400},
    {"Transfer-Encoding with Content-Length",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
         "Content-Length: 5\r\n\r\n"),
     400},
    {"malformed Content-Length with Transfer-Encoding",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: $\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     400},
    {"differing Content-Length fields",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
         "Content-Length: 6\r\nX: y\r\n\r\n"),
     400,
     .at = sizeof("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                  "Content-Length: 6\r\n") -
           1},
    {"Content-Length with a letter, before the blank line",
     RAW("POST / HTTP/1.1\r\nContent-Length: 5a\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("POST / HTTP/1.1\r\nContent-Length: 5a\r\n") - 1},
    {"Transfer-Encoding after Content-Length, before the blank line",
     RAW("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked"
         "\r\nHost: a\r\n\r\n"),
     400,
     .at = sizeof("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                  "Transfer-Encoding: chunked\r\n") -
           1},
    {"Transfer-Encoding in HTTP/1.0, before the blank line",
     RAW("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n"), 400,
     .at = sizeof("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n") - 1},
    {"second Host, before the blank line",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\nX: y\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n") - 1},
    {"bad Host later on: a Content-Length before it does not matter",
     RAW("POST / HTTP/1.1\r\nContent-Length: 1\r\nHost: a b\r\n\r\n"), 400,
     .at = sizeof("POST / HTTP/1.1\r\nContent-Length: 1\r\nHost: a b\r\n") - 1},
    {"differing Content-Length list",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n"), 400},
    {"Content-Length with a letter",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5a\r\n\r\n"), 400},
    {"Content-Length with a sign",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"), 400},
    {"empty Content-Length",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n"), 400},
    {"Content-Length list with an empty element",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,\r\n\r\n"), 400},
    {"Content-Length overflow",
     RAW("POST / HTTP/1.1\r\nHost: a\r\n"
         "Content-Length: 18446744073709551616\r\n\r\n"),
     400},
    {"Transfer-Encoding without a final chunked",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"), 400},
    {"chunked before another coding",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n"
         "\r\n"),
     400},
    {"chunked twice",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     400},
    {"chunked with a parameter",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n"
         "\r\n"),
     400},
    {"empty Transfer-Encoding",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n"), 400},
    {"Transfer-Encoding in HTTP/1.0",
     RAW("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
    {"obs-fold", RAW("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"), 400},
    {"first field line folded", RAW("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\n ") - 1},
    {"bare CR in a value", RAW("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\nHost: a\rb") - 1},
    {"bare CR in the request line", RAW("GET / HTTP/1.1\rHost: a\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\rH") - 1},
    {"bare CR after the method", RAW("GET\r / HTTP/1.1\r\nHost: a\r\n\r\n"),
     400, .at = sizeof("GET\r") - 1},
    {"bare CR before the request line",
     RAW("\r\n\rGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("\r\n\rG") - 1},
    {"bare CR ending a line", RAW("GET / HTTP/1.1\r\nHost: a\r\r\n\r\n"), 400},
    {"bare LF ending a field line",
     RAW("GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n"), 400},
    {"bare LF ending the request line", RAW("GET / HTTP/1.1\nHost: a\r\n\r\n"),
     400},
    {"bare LF ending the head", RAW("GET / HTTP/1.1\r\nHost: a\r\n\n"), 400},
    {"LF-only request", RAW("GET / HTTP/1.1\nHost: a\n\n"), 400},
    {"bare LF before the request line", RAW("\nGET / HTTP/1.1\r\n\r\n"), 400},
    {"invalid character in the method",
     RAW("G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400, .at = 2},
    {"an invalid method byte wins over a request line too long",
     RAW("G(T /0123456789abcdefghijklmnopqrstuvwxyz HTTP/1.1\r\nHost: a\r\n"
         "\r\n"),
     400, .limits = &small_line, .at = 2},
    {"empty method", RAW(" / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"invalid character in a header name",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX@Y: v\r\n\r\n"), 400},
    {"space inside a header name",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX Y: v\r\n\r\n"), 400},
    {"space before the colon", RAW("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400},
    {"empty header name", RAW("GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n"), 400},
    {"header line without a colon",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n"), 400},
    {"NUL in a value", RAW("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"),
     400},
    {"DEL in a value", RAW("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n"),
     400},
    {"CTL in the target", RAW("GET /a\x01z HTTP/1.1\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("GET /a\x01") - 1},
    {"DEL in the target", RAW("GET /a\x7fz HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"space in the target", RAW("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("GET /a b") - 1},
    {"lowercase version, at its first byte",
     RAW("GET / http/1.1\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("GET / h") - 1},
    {"header name with a space, at the space",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX Y: 1\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\nHost: a\r\nX ") - 1},
    {"DEL in a value, at the DEL",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789\x7f\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789\x7f") - 1},
    {"two spaces after the method", RAW("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
     400},
    {"HTAB as a separator", RAW("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"no version", RAW("GET /\r\n\r\n"), 400},
    {"space after the version", RAW("GET / HTTP/1.1 \r\nHost: a\r\n\r\n"), 400},
    {"garbage version", RAW("GET / HTTP/1.x\r\nHost: a\r\n\r\n"), 400},
    {"two-digit minor version", RAW("GET / HTTP/1.10\r\nHost: a\r\n\r\n"), 400},
    {"lowercase protocol name", RAW("GET / http/1.1\r\nHost: a\r\n\r\n"), 400},
    {"HTTP/1.1 without Host", RAW("GET / HTTP/1.1\r\nX: y\r\n\r\n"), 400},
    {"two Host fields", RAW("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
     400},
    {"Host with a path", RAW("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), 400},
    {"Host with userinfo", RAW("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"), 400},
    {"asterisk for GET", RAW("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"CONNECT with a path", RAW("CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"CONNECT without a port",
     RAW("CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"CONNECT without a host", RAW("CONNECT :443 HTTP/1.1\r\nHost: a\r\n\r\n"),
     400},
    {"absolute-form with userinfo",
     RAW("GET http://u:p@a/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"absolute-form without a host",
     RAW("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"relative target", RAW("GET index.html HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"fragment in the target", RAW("GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n"),
     400, .at = sizeof("GET /a#") - 1},
    {"fragment in a long target, skipped a word at a time",
     RAW("GET /0123456789abcdef0123#x HTTP/1.1\r\nHost: a\r\n\r\n"), 400,
     .at = sizeof("GET /0123456789abcdef0123#") - 1},
    {"fragment in an absolute-form target",
     RAW("GET http://a/b#c HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"Host: port with a letter",
     RAW("GET / HTTP/1.1\r\nHost: localhost:80x\r\nX: y\r\n\r\n"), 400,
     .at = sizeof("GET / HTTP/1.1\r\nHost: localhost:80x\r\n") - 1},
    {"Host: two colons", RAW("GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n"), 400},
    {"Host: an unclosed IPv6 literal",
     RAW("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"), 400},
    {"Host: bytes after an IPv6 literal",
     RAW("GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n"), 400},
    {"Host: an IPv6 literal that is not one",
     RAW("GET / HTTP/1.1\r\nHost: [1:2:3:4:5:6:7:8:9]\r\n\r\n"), 400},
    {"Host: an IPv4 address in brackets",
     RAW("GET / HTTP/1.1\r\nHost: [127.0.0.1]\r\n\r\n"), 400},
    {"Host: an IPv6 zone identifier",
     RAW("GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n"), 400},
    {"Host: an IPv6 literal without brackets",
     RAW("GET / HTTP/1.1\r\nHost: ::1\r\n\r\n"), 400},
    {"Host: an empty host before a port",
     RAW("GET / HTTP/1.1\r\nHost: :80\r\n\r\n"), 400},
    {"Host: a port over 65535", RAW("GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n"),
     400},
    {"Host: a signed port", RAW("GET / HTTP/1.1\r\nHost: a:-1\r\n\r\n"), 400},
    {"Host: a bad escape", RAW("GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n"), 400},
    {"Host: a cut escape", RAW("GET / HTTP/1.1\r\nHost: a%4\r\n\r\n"), 400},
    {"Host: a space inside", RAW("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400},
    {"Host: a backslash", RAW("GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n"), 400},
    {"absolute-form with two colons",
     RAW("GET http://localhost::80/ HTTP/1.1\r\nHost: localhost\r\n\r\n"), 400,
     .at = sizeof("GET http://localhost::80/ HTTP/1.1\r\n") - 1},
    {"absolute-form with a bad port",
     RAW("GET http://a:b:c/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"absolute-form with an unclosed IPv6 literal",
     RAW("GET http://[::1/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"absolute-form with an empty host and a port",
     RAW("GET http://:80/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"absolute-form still needs a valid Host",
     RAW("GET http://a/ HTTP/1.1\r\nHost: a:b:c\r\n\r\n"), 400},
    {"absolute-form still needs a Host in HTTP/1.1",
     RAW("GET http://a/ HTTP/1.1\r\nX: y\r\n\r\n"), 400},
    {"CONNECT with two colons",
     RAW("CONNECT a:b:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {"CONNECT with an empty port",
     RAW("CONNECT example.com: HTTP/1.1\r\nHost: a\r\n\r\n"), 400},

    /* ---- other statuses ---- */
    {"unknown transfer coding",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: foo, chunked\r\n"
         "\r\n"),
     501},
    {"gzip then chunked: a coding we do not undo",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, CHUNKED\r\n"
         "\r\n"),
     501},
    {"deflate then chunked",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: deflate,chunked\r\n"
         "\r\n"),
     501},
    {"compress then chunked",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: compress, chunked"
         "\r\n\r\n"),
     501},
    {"x-gzip then chunked",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x-gzip, chunked"
         "\r\n\r\n"),
     501},
    {"codings from two Transfer-Encoding fields form one list",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     501,
     .at = sizeof("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip"
                  "\r\nTransfer-Encoding: chunked\r\n\r\n") -
           1},
    {"gzip then chunked beside Content-Length is still a 400",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n"
         "Content-Length: 3\r\n\r\n"),
     400},
    {"gzip then chunked in HTTP/1.0 is still a 400",
     RAW("POST / HTTP/1.0\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 400},
    {"gzip after chunked is still a 400",
     RAW("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     400},
    {"HTTP/2.0", RAW("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505,
     .at = sizeof("GET / HTTP/2.0\r\n") - 1},
    {"HTTP/0.9 with a version", RAW("GET / HTTP/0.9\r\n\r\n"), 505},
    {"HTTP/1.9 without Host is a 400, as 1.1 is",
     RAW("GET / HTTP/1.9\r\nX: y\r\n\r\n"), 400},
    {"HTTP/3.0", RAW("GET / HTTP/3.0\r\nHost: a\r\n\r\n"), 505,
     .at = sizeof("GET / HTTP/3.0\r\n") - 1},
    {"request line over the limit",
     RAW("GET /0123456789abcdefghi HTTP/1.1\r\nHost: a\r\n\r\n"), 414,
     .limits = &small_line, .at = 33},
    {"head over the limit",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 012345678901234567890123456789012"
         "\r\n\r\n"),
     431, .limits = &small_head},
    {"more headers than the limit",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nY: 2\r\n\r\n"), 431,
     .limits = &two_headers},
    {"more headers than the array",
     RAW("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nY: 2\r\n\r\n"), 431,
     .capacity = 2},
};

typedef struct parse_result {
    int rc, status;
} parse_result_t;

/* Parses buf[0..n) the way case c asks, with `scanned` or without. */
typedef parse_result_t (*prefix_parse_fn)(const void *c, const char *buf,
                                          size_t n, size_t *scanned);

/*
 * Every prefix, from its own exact-size copy, parsed both statelessly and
 * with `scanned` carried from the previous prefix (as a server does): the
 * answer is INCOMPLETE until it is final, then stays the final answer. A
 * head that parses is INCOMPLETE up to its last byte; an error given `at`
 * comes with exactly that many bytes.
 */
static void replay(const void *c, const char *raw, size_t raw_len,
                   prefix_parse_fn parse, parse_result_t want, size_t at)
{
    size_t scanned = 0;
    bool settled = false;
    for (size_t k = 1; k <= raw_len; k++) {
        char *p = copy_of(raw, k);
        parse_result_t a = parse(c, p, k, NULL);
        parse_result_t b = parse(c, p, k, &scanned);
        free(p);
        CHECK_EQ(a.rc, b.rc);
        CHECK_EQ(a.status, b.status);
        if (a.rc == MF_HTTP_INCOMPLETE) {
            CHECK(!settled);
            continue;
        }
        CHECK_EQ(a.rc, want.rc);
        CHECK_EQ(a.status, want.status);
        if (!settled && want.rc > 0)
            CHECK_EQ(k, want.rc);
        if (!settled && at)
            CHECK_EQ(k, at);
        settled = true;
    }
    CHECK(settled);
}

static parse_result_t parse_req(const char *buf, size_t n, const req_case_t *c,
                                mf_http_request_t *req, mf_http_header_t *hs,
                                size_t *scanned)
{
    memset(req, 0, sizeof *req);
    req->headers = hs;
    req->num_headers = c->capacity ? c->capacity : 16;
    int rc = mf_http_parse_request(buf, n, req, c->limits, scanned);
    return (parse_result_t){rc, rc == MF_HTTP_ERROR ? req->error_status : 0};
}

static void check_req_fields(const req_case_t *c, const mf_http_request_t *r)
{
    CHECK_FIELD(c->method, r->method, r->method_len);
    CHECK_FIELD(c->target, r->target, r->target_len);
    CHECK_FIELD(c->path, r->path, r->path_len);
    CHECK_FIELD(c->query, r->query, r->query_len);
    CHECK_FIELD(c->host, r->host, r->host_len);
    if (c->headers)
        CHECK_STR(dump_headers(r->headers, r->num_headers), c->headers);
    CHECK_OPT(c->minor, r->minor_version);
    CHECK_OPT(c->body, r->body);
    CHECK_OPT(c->content_length, r->content_length);
    CHECK_OPT(c->keep_alive, r->keep_alive);
    CHECK_OPT(c->expect_continue, r->expect_continue);
    CHECK_OPT(c->upgrade, r->upgrade);
}

static parse_result_t req_prefix(const void *c, const char *buf, size_t n,
                                 size_t *scanned)
{
    mf_http_header_t hs[16];
    mf_http_request_t req;
    return parse_req(buf, n, c, &req, hs, scanned);
}

static void run_request_case(const req_case_t *c)
{
    mf_http_header_t hs[16];
    mf_http_request_t req;
    case_name = c->name;
    char *buf = copy_of(c->raw, c->raw_len);
    parse_result_t got = parse_req(buf, c->raw_len, c, &req, hs, NULL);
    if (c->status) {
        CHECK_EQ(got.rc, MF_HTTP_ERROR);
        CHECK_EQ(got.status, c->status);
    } else {
        CHECK_EQ(got.rc, c->head_len ? c->head_len : c->raw_len);
        CHECK_EQ(req.error_status, 0);
        check_req_fields(c, &req);
    }
    free(buf);
    replay(c, c->raw, c->raw_len, req_prefix, got, c->at);
}

TEST(request_cases_give_one_answer_at_every_split_point)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(req_cases); i++)
        run_request_case(&req_cases[i]);
    printf("%zu request cases\n", MF_ARRAY_SIZE(req_cases));
}

/* ---- responses ------------------------------------------------------------
 */

typedef struct resp_case {
    const char *name;
    const char *raw;
    size_t raw_len;
    bool fails;      /* expect MF_HTTP_ERROR with 502 */
    size_t head_len; /* 0: all of raw */
    bool head_request;
    const mf_http_limits_t *limits;
    const char *reason, *headers;
    long long status, minor, body, content_length, keep_alive;
} resp_case_t;

static const resp_case_t resp_cases[] = {
    {"200 with Content-Length",
     RAW("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), .head_len = 38,
     .status = V(200), .reason = "OK", .minor = V(1),
     .body = V(MF_HTTP_BODY_LENGTH), .content_length = V(5),
     .keep_alive = V(true), .headers = "Content-Length: 5"},
    {"204 has no body", RAW("HTTP/1.1 204 No Content\r\n\r\n"),
     .status = V(204), .body = V(MF_HTTP_BODY_NONE), .keep_alive = V(true)},
    {"304 has no body despite Content-Length",
     RAW("HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n"),
     .body = V(MF_HTTP_BODY_NONE), .keep_alive = V(true)},
    {"response to HEAD has no body",
     RAW("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
     .head_request = true, .body = V(MF_HTTP_BODY_NONE),
     .content_length = V(1000)},
    {"1xx has no body", RAW("HTTP/1.1 100 Continue\r\n\r\n"), .status = V(100),
     .body = V(MF_HTTP_BODY_NONE)},
    {"101 has no body",
     RAW("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
         "Connection: Upgrade\r\n\r\n"),
     .body = V(MF_HTTP_BODY_NONE)},
    {"chunked response",
     RAW("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
     .body = V(MF_HTTP_BODY_CHUNKED), .keep_alive = V(true)},
    {"Transfer-Encoding wins over Content-Length and closes",
     RAW("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     .body = V(MF_HTTP_BODY_CHUNKED), .keep_alive = V(false)},
    {"coding other than a final chunked runs until close",
     RAW("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
     .body = V(MF_HTTP_BODY_UNTIL_CLOSE), .keep_alive = V(false)},
    {"no length runs until close",
     RAW("HTTP/1.1 200 OK\r\nServer: x\r\n\r\nbody"), .head_len = 30,
     .body = V(MF_HTTP_BODY_UNTIL_CLOSE), .keep_alive = V(false)},
    {"HTTP/1.0 keep-alive",
     RAW("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
         "Content-Length: 2\r\n\r\n"),
     .minor = V(0), .keep_alive = V(true), .body = V(MF_HTTP_BODY_LENGTH)},
    {"HTTP/1.0 closes by default",
     RAW("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n"),
     .keep_alive = V(false)},
    {"Connection close",
     RAW("HTTP/1.1 200 OK\r\nConnection: close\r\n"
         "Content-Length: 0\r\n\r\n"),
     .keep_alive = V(false), .body = V(MF_HTTP_BODY_NONE)},
    {"reason with spaces",
     RAW("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
     .status = V(500), .reason = "Internal Server Error"},
    {"empty reason", RAW("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n"),
     .reason = ""},
    {"missing SP before an empty reason",
     RAW("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n"), .status = V(404),
     .reason = ""},
    {"two-digit status", RAW("HTTP/1.1 20 OK\r\n\r\n"), true},
    {"four-digit status", RAW("HTTP/1.1 2000 OK\r\n\r\n"), true},
    {"status below 100", RAW("HTTP/1.1 099 Odd\r\n\r\n"), true},
    {"HTTP/2 status line", RAW("HTTP/2 200 OK\r\n\r\n"), true},
    {"HTTP/1.2 status line is read as 1.1",
     RAW("HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n"), .status = V(200),
     .minor = V(1), .keep_alive = V(true)},
    {"not HTTP", RAW("ICY 200 OK\r\n\r\n"), true},
    {"CTL in the reason", RAW("HTTP/1.1 200 O\x01K\r\n\r\n"), true},
    {"differing Content-Length",
     RAW("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
     true},
    {"bad Content-Length beside Transfer-Encoding",
     RAW("HTTP/1.1 200 OK\r\nContent-Length: x\r\n"
         "Transfer-Encoding: chunked\r\n\r\n"),
     true},
    {"empty lines before the status line are skipped",
     RAW("\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
     .head_len = 42, .status = V(200), .reason = "OK",
     .body = V(MF_HTTP_BODY_LENGTH), .content_length = V(2)},
    {"a bare LF before the status line", RAW("\r\n\nHTTP/1.1 200 OK\r\n\r\n"),
     true},
    {"bare LF in a response", RAW("HTTP/1.1 200 OK\nServer: x\r\n\r\n"), true},
    {"obs-fold in a response",
     RAW("HTTP/1.1 200 OK\r\nServer: x\r\n y\r\n\r\n"), true},
    {"response head over the limit",
     RAW("HTTP/1.1 200 OK\r\nServer: 0123456789012345678901234567890123456789"
         "0123456789\r\n\r\n"),
     true, .limits = &small_head},
    {"more response headers than the limit",
     RAW("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), true,
     .limits = &two_headers},
};

static parse_result_t parse_resp(const char *buf, size_t n,
                                 const resp_case_t *c, mf_http_response_t *resp,
                                 mf_http_header_t *hs, size_t *scanned)
{
    memset(resp, 0, sizeof *resp);
    resp->headers = hs;
    resp->num_headers = 16;
    int rc = mf_http_parse_response(buf, n, resp, c->head_request, c->limits,
                                    scanned);
    return (parse_result_t){rc, rc == MF_HTTP_ERROR ? resp->error_status : 0};
}

static parse_result_t resp_prefix(const void *c, const char *buf, size_t n,
                                  size_t *scanned)
{
    mf_http_header_t hs[16];
    mf_http_response_t resp;
    return parse_resp(buf, n, c, &resp, hs, scanned);
}

static void run_response_case(const resp_case_t *c)
{
    mf_http_header_t hs[16];
    mf_http_response_t resp;
    case_name = c->name;
    char *buf = copy_of(c->raw, c->raw_len);
    parse_result_t got = parse_resp(buf, c->raw_len, c, &resp, hs, NULL);
    if (c->fails) {
        CHECK_EQ(got.rc, MF_HTTP_ERROR);
        CHECK_EQ(got.status, 502);
    } else {
        CHECK_EQ(got.rc, c->head_len ? c->head_len : c->raw_len);
        CHECK_FIELD(c->reason, resp.reason, resp.reason_len);
        if (c->headers)
            CHECK_STR(dump_headers(resp.headers, resp.num_headers), c->headers);
        CHECK_OPT(c->status, resp.status);
        CHECK_OPT(c->minor, resp.minor_version);
        CHECK_OPT(c->body, resp.body);
        CHECK_OPT(c->content_length, resp.content_length);
        CHECK_OPT(c->keep_alive, resp.keep_alive);
    }
    free(buf);
    replay(c, c->raw, c->raw_len, resp_prefix, got, 0);
}

TEST(response_cases_give_one_answer_at_every_split_point)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(resp_cases); i++)
        run_response_case(&resp_cases[i]);
    printf("%zu response cases\n", MF_ARRAY_SIZE(resp_cases));
}

/* ---- chunked ------------------------------------------------------------ */

typedef struct chunk_case {
    const char *name;
    const char *raw;
    size_t raw_len;
    int status;          /* 0: complete; -1: incomplete; else error */
    const char *decoded; /* when status <= 0 */
    const char *rest;    /* when status == 0; NULL: "" */
    uint64_t max_body;
} chunk_case_t;

static const chunk_case_t chunk_cases[] = {
    {"one chunk", RAW("5\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"several chunks", RAW("5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"),
     0, "hello world"},
    {"hex sizes in either case",
     RAW("A\r\n0123456789\r\nb\r\nabcdefghijk\r\n0\r\n\r\n"), 0,
     "0123456789abcdefghijk"},
    {"sixteen digits with leading zeros",
     RAW("0000000000000003\r\nabc\r\n0\r\n\r\n"), 0, "abc"},
    {"extensions skipped",
     RAW("5;name=value;flag\r\nhello\r\n0;last=\"a b\"\r\n\r\n"), 0, "hello"},
    {"whitespace before an extension", RAW("5 \t;ext\r\nhello\r\n0\r\n\r\n"), 0,
     "hello"},
    {"trailers validated and skipped",
     RAW("3\r\nabc\r\n0\r\nX-Sum: 1\r\nExpires:\tnever \r\n\r\n"), 0, "abc"},
    {"bytes after the body are the next message",
     RAW("3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n"), 0, "abc",
     "GET / HTTP/1.1\r\n"},
    {"empty body", RAW("0\r\n\r\n"), 0, ""},
    {"body exactly at max_body", RAW("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), 0,
     "abcde", .max_body = 5},
    {"incomplete body keeps what it decoded", RAW("5\r\nhello\r\n3\r\nab"), -1,
     "helloab"},
    {"incomplete trailer", RAW("1\r\nx\r\n0\r\nX: y\r\n"), -1, "x"},
    {"seventeen digits", RAW("00000000000000003\r\nabc\r\n0\r\n\r\n"), 400},
    {"size over max_body", RAW("ffffffffffffffff\r\n"), 413, .max_body = 1000},
    {"second chunk over max_body", RAW("3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"),
     413, .max_body = 5},
    {"non-hex size", RAW("g\r\nx\r\n0\r\n\r\n"), 400},
    {"empty size", RAW("\r\nx\r\n0\r\n\r\n"), 400},
    {"signed size", RAW("-5\r\nhello\r\n0\r\n\r\n"), 400},
    {"space before the size", RAW(" 5\r\nhello\r\n0\r\n\r\n"), 400},
    {"space after the size without extension", RAW("5 \r\nhello\r\n0\r\n\r\n"),
     400},
    {"CTL in an extension", RAW("5;a\x01\r\nhello\r\n0\r\n\r\n"), 400},
    {"extension with a token value", RAW("2;name=value\r\nab\r\n0\r\n\r\n"), 0,
     "ab"},
    {"extension with a quoted value", RAW("2;a=\"q\"\r\nab\r\n0\r\n\r\n"), 0,
     "ab"},
    {"quoted-pair with a CTL",
     RAW("2;a=\"\\\"x\\\\ \t!#[]~\x80\\\x01\"\r\nab\r\n0\r\n\r\n"), 400},
    {"quoted value with escapes",
     RAW("2;a=\"\\\"x\\\\ \t!#[]~\x80\"\r\nab\r\n0\r\n\r\n"), 0, "ab"},
    {"whitespace around ';' and '='",
     RAW("2 ; a = b ;\tc ; d=\"e\" ;f\r\nab\r\n0\r\n\r\n"), 0, "ab"},
    {"extensions on the last chunk", RAW("0;done\r\n\r\n"), 0, ""},
    {"extension without a name", RAW("2;\r\nab\r\n0\r\n\r\n"), 400},
    {"extension with an empty name", RAW("2;=b\r\nab\r\n0\r\n\r\n"), 400},
    {"two ';' in a row", RAW("2;;a\r\nab\r\n0\r\n\r\n"), 400},
    {"extension with an empty value", RAW("2;a=\r\nab\r\n0\r\n\r\n"), 400},
    {"extension name with a non-token byte", RAW("2;a@b\r\nab\r\n0\r\n\r\n"),
     400},
    {"space inside an extension name", RAW("2;a b\r\nab\r\n0\r\n\r\n"), 400},
    {"space inside a token value", RAW("2;a=b c\r\nab\r\n0\r\n\r\n"), 400},
    {"whitespace before the CR", RAW("2;a=b \r\nab\r\n0\r\n\r\n"), 400},
    {"whitespace after a name before the CR", RAW("2;a \r\nab\r\n0\r\n\r\n"),
     400},
    {"byte after a quoted value", RAW("2;a=\"q\"x\r\nab\r\n0\r\n\r\n"), 400},
    {"quoted value cut by the CR", RAW("2;a=\"q\r\nab\r\n0\r\n\r\n"), 400},
    {"CTL in a quoted value", RAW("2;a=\"\x01\"\r\nab\r\n0\r\n\r\n"), 400},
    {"value with a non-token byte", RAW("2;a=b@\r\nab\r\n0\r\n\r\n"), 400},
    {"bare LF after the size", RAW("5\nhello\r\n0\r\n\r\n"), 400},
    {"bare CR after the size", RAW("5\rhello\r\n0\r\n\r\n"), 400},
    {"data longer than its size", RAW("5\r\nhelloX\r\n0\r\n\r\n"), 400},
    {"stray byte then LF after the data", RAW("5\r\nhelloX\n0\r\n\r\n"), 400},
    {"bare LF after the data", RAW("5\r\nhello\n0\r\n\r\n"), 400},
    {"folded trailer", RAW("0\r\nX: a\r\n b\r\n\r\n"), 400},
    {"space in a trailer name", RAW("0\r\nX Y: a\r\n\r\n"), 400},
    {"trailer without a colon", RAW("0\r\nX\r\n\r\n"), 400},
    {"CTL in a trailer value", RAW("0\r\nX: a\x7f\r\n\r\n"), 400},
    {"bare LF ending the body", RAW("0\r\n\n"), 400},
    {"bad final CRLF", RAW("0\r\n\rX"), 400},
};

typedef struct chunk_out {
    ssize_t rc;
    int status;
    char decoded[256], rest[256];
    size_t decoded_len, rest_len;
} chunk_out_t;

/*
 * Feeds raw to a fresh decoder in pieces ending at cuts[0..ncuts) and then
 * at raw_len, each piece from its own exact-size copy; collects the decoded
 * bytes and, when the body ends, the bytes after it.
 */
static void feed_chunked(const chunk_case_t *c, const size_t *cuts,
                         size_t ncuts, chunk_out_t *o)
{
    mf_http_chunked_t dec;
    size_t from = 0;
    mf_http_chunked_init(&dec, c->max_body);
    memset(o, 0, sizeof *o);
    o->rc = MF_HTTP_INCOMPLETE;
    for (size_t i = 0; i <= ncuts && o->rc == MF_HTTP_INCOMPLETE; i++) {
        size_t to = i < ncuts ? cuts[i] : c->raw_len, n = to - from;
        char *p = copy_of(c->raw + from, n);
        o->rc = mf_http_chunked_decode(&dec, p, &n);
        CHECK(n <= to - from);
        CHECK(o->decoded_len + n <= sizeof o->decoded);
        memcpy(o->decoded + o->decoded_len, p, n);
        o->decoded_len += n;
        if (o->rc >= 0) {
            size_t after = c->raw_len - to;
            CHECK((size_t)o->rc <= to - from - n);
            memcpy(o->rest, p + n, (size_t)o->rc);
            memcpy(o->rest + o->rc, c->raw + to, after);
            o->rest_len = (size_t)o->rc + after;
        }
        free(p);
        from = to;
    }
    o->status = o->rc == MF_HTTP_ERROR ? dec.error_status : 0;
}

static void check_chunk_out(const chunk_case_t *c, const chunk_out_t *o)
{
    if (c->status > 0) {
        CHECK_EQ(o->rc, MF_HTTP_ERROR);
        CHECK_EQ(o->status, c->status);
        return;
    }
    CHECK_EQ(o->rc >= 0 ? 0 : o->rc, c->status == 0 ? 0 : MF_HTTP_INCOMPLETE);
    CHECK_STR(str_of(o->decoded, o->decoded_len), c->decoded);
    if (c->status == 0)
        CHECK_STR(str_of(o->rest, o->rest_len), c->rest ? c->rest : "");
}

TEST(chunked_cases_decode_alike_whole_split_in_two_and_byte_by_byte)
{
    size_t cuts[256];
    chunk_out_t out;
    for (size_t i = 0; i < MF_ARRAY_SIZE(chunk_cases); i++) {
        const chunk_case_t *c = &chunk_cases[i];
        case_name = c->name;
        ASSERT(c->raw_len < MF_ARRAY_SIZE(cuts));
        feed_chunked(c, NULL, 0, &out);
        check_chunk_out(c, &out);
        for (size_t k = 1; k < c->raw_len; k++) {
            feed_chunked(c, &k, 1, &out);
            check_chunk_out(c, &out);
        }
        for (size_t k = 1; k < c->raw_len; k++)
            cuts[k - 1] = k;
        feed_chunked(c, cuts, c->raw_len ? c->raw_len - 1 : 0, &out);
        check_chunk_out(c, &out);
    }
    printf("%zu chunked cases\n", MF_ARRAY_SIZE(chunk_cases));
}

TEST(chunked_decoder_keeps_its_error_and_its_end)
{
    mf_http_chunked_t dec;
    char bad[] = "x\r\n", more[] = "5\r\nhello\r\n", done[] = "0\r\n\r\nNEXT";
    size_t n = sizeof bad - 1;
    mf_http_chunked_init(&dec, 0);
    ASSERT_EQ(mf_http_chunked_decode(&dec, bad, &n), MF_HTTP_ERROR);
    n = sizeof more - 1;
    ASSERT_EQ(mf_http_chunked_decode(&dec, more, &n), MF_HTTP_ERROR);
    ASSERT_EQ(n, 0);
    ASSERT_EQ(dec.error_status, 400);

    mf_http_chunked_init(&dec, 0);
    n = sizeof done - 1;
    ASSERT_EQ(mf_http_chunked_decode(&dec, done, &n), 4);
    ASSERT_EQ(n, 0);
    ASSERT(memcmp(done, "NEXT", 4) == 0);
    n = sizeof more - 1; /* after the end, every byte is the next message */
    ASSERT_EQ(mf_http_chunked_decode(&dec, more, &n), (ssize_t)sizeof more - 1);
    ASSERT_EQ(n, 0);
    ASSERT_STR_EQ(more, "5\r\nhello\r\n");
}

TEST(chunked_decoder_counts_body_bytes)
{
    mf_http_chunked_t dec;
    char body[] = "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n";
    size_t n = sizeof body - 1;
    mf_http_chunked_init(&dec, 0);
    ASSERT_EQ(mf_http_chunked_decode(&dec, body, &n), 0);
    ASSERT_EQ(n, 7);
    ASSERT_EQ(dec.body_bytes, 7);
    ASSERT(memcmp(body, "abcdefg", 7) == 0);
}

/* A chunked body whose trailer section or size line carries `fill` bytes of
 * skipped text; returns its length. */
static size_t padded_body(char *buf, size_t cap, bool in_trailer, size_t fill)
{
    const char *head = in_trailer ? "1\r\nx\r\n0\r\nX: " : "1;e=";
    const char *tail = in_trailer ? "\r\n\r\n" : "\r\nx\r\n0\r\n\r\n";
    size_t h = strlen(head), t = strlen(tail);
    ASSERT(h + fill + t <= cap);
    memcpy(buf, head, h);
    memset(buf + h, 'v', fill);
    memcpy(buf + h + fill, tail, t);
    return h + fill + t;
}

static ssize_t decode_once(char *buf, size_t n, int *status)
{
    mf_http_chunked_t dec;
    mf_http_chunked_init(&dec, 0);
    ssize_t rc = mf_http_chunked_decode(&dec, buf, &n);
    *status = dec.error_status;
    return rc;
}

TEST(chunked_decoder_bounds_extensions_and_trailers)
{
    static char buf[9000];
    int status;
    /* Up to 4096 extension bytes per size line ("e=" counts too). */
    size_t n = padded_body(buf, sizeof buf, false, 4094);
    ASSERT_EQ(decode_once(buf, n, &status), 0);
    n = padded_body(buf, sizeof buf, false, 4095);
    ASSERT_EQ(decode_once(buf, n, &status), MF_HTTP_ERROR);
    ASSERT_EQ(status, 400);
    /* Whitespace before the ';' counts too. */
    static const char tail[] = ";e\r\nx\r\n0\r\n\r\n";
    buf[0] = '1';
    memset(buf + 1, ' ', 4096);
    memcpy(buf + 1 + 4096, tail, sizeof tail - 1);
    ASSERT_EQ(decode_once(buf, 1 + 4096 + sizeof tail - 1, &status),
              MF_HTTP_ERROR);
    ASSERT_EQ(status, 400);
    memcpy(buf + 1 + 4093, tail, sizeof tail - 1);
    ASSERT_EQ(decode_once(buf, 1 + 4093 + sizeof tail - 1, &status), 0);
    /* Up to 8192 bytes of trailer section, final CRLF included. */
    n = padded_body(buf, sizeof buf, true, 8192 - 7);
    ASSERT_EQ(decode_once(buf, n, &status), 0);
    n = padded_body(buf, sizeof buf, true, 8192 - 6);
    ASSERT_EQ(decode_once(buf, n, &status), MF_HTTP_ERROR);
    ASSERT_EQ(status, 400);
}

/* ---- properties of the head parsers ------------------------------------ */

TEST(pipelined_request_parses_from_where_the_first_ended)
{
    const char raw[] = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
                       "POST /b?c HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
                       "\r\nx";
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    int first = mf_http_parse_request(raw, sizeof raw - 1, &req, NULL, NULL);
    ASSERT_EQ(first, 28);
    req.num_headers = 4;
    int second = mf_http_parse_request(raw + first, sizeof raw - 1 - first,
                                       &req, NULL, NULL);
    ASSERT_EQ(second, sizeof raw - 1 - first - 1);
    ASSERT_EQ(req.method_len, 4);
    ASSERT(memcmp(req.method, "POST", 4) == 0);
    ASSERT_EQ(req.query_len, 1);
    ASSERT_EQ(req.query[0], 'c');
    ASSERT_EQ(req.content_length, 1);
}

TEST(scanned_advances_while_incomplete_and_resets_when_done)
{
    const char raw[] = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    size_t scanned = 0;
    ASSERT_EQ(mf_http_parse_request(raw, 10, &req, NULL, &scanned),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(scanned, 10);
    ASSERT_EQ(req.num_headers, 4); /* the capacity survives INCOMPLETE */
    ASSERT_EQ(mf_http_parse_request(raw, 20, &req, NULL, &scanned),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(scanned, 20);
    ASSERT_EQ(mf_http_parse_request(raw, sizeof raw - 1, &req, NULL, &scanned),
              sizeof raw - 1);
    ASSERT_EQ(scanned, 0);
    ASSERT_EQ(req.num_headers, 1);
}

TEST(head_over_the_limit_fails_at_its_first_extra_byte)
{
    char raw[200];
    memset(raw, 'a', sizeof raw);
    memcpy(raw, "GET / HTTP/1.1\r\nX: ", 19);
    mf_http_limits_t lim = {64, 64, 10};
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    ASSERT_EQ(mf_http_parse_request(raw, 64, &req, &lim, NULL),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(mf_http_parse_request(raw, 65, &req, &lim, NULL), MF_HTTP_ERROR);
    ASSERT_EQ(req.error_status, 431);
}

TEST(request_line_over_the_limit_fails_before_the_head_ends)
{
    char raw[200];
    memset(raw, 'a', sizeof raw);
    memcpy(raw, "GET /", 5);
    mf_http_limits_t lim = {1024, 32, 10};
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    ASSERT_EQ(mf_http_parse_request(raw, 32, &req, &lim, NULL),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(mf_http_parse_request(raw, 33, &req, &lim, NULL), MF_HTTP_ERROR);
    ASSERT_EQ(req.error_status, 414);
}

TEST(default_limits_apply_when_limits_is_null)
{
    static char raw[9000];
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    memset(raw, 'a', sizeof raw);
    memcpy(raw, "GET /", 5);
    ASSERT_EQ(mf_http_parse_request(raw, 8192, &req, NULL, NULL),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(mf_http_parse_request(raw, sizeof raw, &req, NULL, NULL),
              MF_HTTP_ERROR);
    ASSERT_EQ(req.error_status, 414);
    memcpy(raw, "GET / HTTP/1.1\r\nX: ", 19); /* a long field instead */
    ASSERT_EQ(mf_http_parse_request(raw, 8192, &req, NULL, NULL),
              MF_HTTP_INCOMPLETE);
    ASSERT_EQ(mf_http_parse_request(raw, 8193, &req, NULL, NULL),
              MF_HTTP_ERROR);
    ASSERT_EQ(req.error_status, 431);
}

TEST(find_header_ignores_case_and_returns_the_first)
{
    const char raw[] =
        "GET / HTTP/1.1\r\nHost: h\r\nX-Id: 1\r\nx-id: 2\r\n\r\n";
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    ASSERT(mf_http_parse_request(raw, sizeof raw - 1, &req, NULL, NULL) > 0);
    const mf_http_header_t *h =
        mf_http_find_header(hs, req.num_headers, "X-ID");
    ASSERT(h == &hs[1]);
    ASSERT(mf_http_find_header(hs, req.num_headers, "host") == &hs[0]);
    ASSERT(mf_http_find_header(hs, req.num_headers, "X-I") == NULL);
    ASSERT(mf_http_find_header(hs, 0, "Host") == NULL);
    /* by length: only the first len bytes of the name count */
    ASSERT(mf_http_find_header_n(hs, req.num_headers, "x-idx", 4) == &hs[1]);
    ASSERT(mf_http_find_header_n(hs, req.num_headers, "X-ID", 3) == NULL);
}

/* ---- helpers ------------------------------------------------------------ */

TEST(reason_phrases_for_known_and_unknown_statuses)
{
    ASSERT_STR_EQ(mf_http_reason(200), "OK");
    ASSERT_STR_EQ(mf_http_reason(404), "Not Found");
    ASSERT_STR_EQ(mf_http_reason(431), "Request Header Fields Too Large");
    ASSERT_STR_EQ(mf_http_reason(505), "HTTP Version Not Supported");
    ASSERT_STR_EQ(mf_http_reason(299), "");
    ASSERT_STR_EQ(mf_http_reason(-1), "");
}

typedef struct url_case {
    const char *in;
    bool plus;
    ssize_t len; /* -1: bad escape */
    const char *out;
} url_case_t;

TEST(url_decode_handles_escapes_and_plus_in_place)
{
    static const url_case_t cases[] = {
        {"a%20b", false, 3, "a b"}, {"%41%6a%7E", false, 3, "Aj~"},
        {"a+b", true, 3, "a b"},    {"a+b", false, 3, "a+b"},
        {"%2B+", true, 2, "+ "},    {"", false, 0, ""},
        {"%00x", false, 2, "\0x"},  {"%zz", false, -1, NULL},
        {"ab%4", false, -1, NULL},  {"%", false, -1, NULL},
        {"%%41", false, -1, NULL},  {"plain", false, 5, "plain"},
    };
    for (size_t i = 0; i < MF_ARRAY_SIZE(cases); i++) {
        const url_case_t *c = &cases[i];
        char buf[32];
        size_t n = strlen(c->in);
        memcpy(buf, c->in, n);
        case_name = c->in;
        ssize_t got = mf_http_url_decode(buf, n, c->plus);
        CHECK_EQ(got, c->len);
        if (got >= 0)
            CHECK(memcmp(buf, c->out, (size_t)got) == 0);
    }
}

typedef struct authority_case {
    const char *in;
    const char *host; /* NULL: invalid */
    int port;
} authority_case_t;

TEST(authority_splits_host_and_port_and_refuses_what_is_not_one)
{
    static const authority_case_t cases[] = {
        {"example.com", "example.com", -1},
        {"example.com:8080", "example.com", 8080},
        {"example.com:", "example.com", -1},
        {"127.0.0.1:0", "127.0.0.1", 0},
        {"h:65535", "h", 65535},
        {"h:0000080", "h", 80},
        {"[::1]", "[::1]", -1},
        {"[::1]:8080", "[::1]", 8080},
        {"[2001:db8::7]:1", "[2001:db8::7]", 1},
        {"[::ffff:192.0.2.128]", "[::ffff:192.0.2.128]", -1},
        {"[v1.x:y]:2", "[v1.x:y]", 2},
        {"a%2Fb", "a%2Fb", -1},
        {"!$&'()*+,;=-._~", "!$&'()*+,;=-._~", -1},
        {"", NULL, 0},
        {":80", NULL, 0},
        {"localhost:80x", NULL, 0},
        {"a:b:c", NULL, 0},
        {"localhost::80", NULL, 0},
        {"h:65536", NULL, 0},
        {"h:99999999999999999999", NULL, 0},
        {"h:+1", NULL, 0},
        {"[::1", NULL, 0},
        {"[::1]x", NULL, 0},
        {"[::1]:x", NULL, 0},
        {"[]", NULL, 0},
        {"[1.2.3.4]", NULL, 0},
        {"[::1%25eth0]", NULL, 0},
        {"[1::2::3]", NULL, 0},
        {"[v1.]", NULL, 0},
        {"[v.x]", NULL, 0},
        {"::1", NULL, 0},
        {"a b", NULL, 0},
        {"a/b", NULL, 0},
        {"u@h", NULL, 0},
        {"a%4", NULL, 0},
        {"a%g0", NULL, 0},
        {"h\x80", NULL, 0},
    };
    for (size_t i = 0; i < MF_ARRAY_SIZE(cases); i++) {
        const authority_case_t *c = &cases[i];
        mf_http_authority_t a;
        case_name = c->in;
        char *copy = copy_of(c->in, strlen(c->in));
        int rc = mf_http_parse_authority(copy, strlen(c->in), &a);
        CHECK_EQ(rc, c->host ? 0 : -1);
        if (rc == 0) {
            CHECK_STR(str_of(a.host, a.host_len), c->host);
            CHECK_EQ(a.port, c->port);
        }
        free(copy);
    }
}

/* The pairs of a query as "key=value|flag|..." ("flag" has no value). */
static const char *dump_query(const char *q)
{
    static char out[256];
    size_t used = 0;
    mf_http_query_pair_t kv;
    const char *pos = q, *end = q ? q + strlen(q) : NULL;
    out[0] = 0;
    while (mf_http_query_next(&pos, end, &kv) && used < sizeof out)
        used += (size_t)snprintf(out + used, sizeof out - used, "%s%.*s%s%.*s",
                                 used ? "|" : "", (int)kv.key_len, kv.key,
                                 kv.value ? "=" : "", (int)kv.value_len,
                                 kv.value ? kv.value : "");
    CHECK(pos == end);
    return out;
}

TEST(query_pairs_split_at_ampersands_and_the_first_equals_sign)
{
    case_name = "query";
    CHECK_STR(dump_query("a=1&b=2"), "a=1|b=2");
    CHECK_STR(dump_query("flag&x="), "flag|x=");
    CHECK_STR(dump_query("&&a=b=c&&"), "a=b=c");
    CHECK_STR(dump_query("=v&%41=%42"), "=v|%41=%42");
    CHECK_STR(dump_query(""), "");
    CHECK_STR(dump_query(NULL), "");
}
