/*
 * fuzz_http_authority.c — libFuzzer target for Host and target
 * authorities: mf_http_parse_authority, and the request parser wherever it
 * judges one (a Host field, an absolute-form target, a CONNECT target; the
 * parser judges the common shapes inline and the rest through the
 * function).
 *
 * Each input is an authority, from an exact-size copy. Its verdict must be
 * the one of a checker written here from the grammar, independently of the
 * parser (RFC 3986 §3.2.2-3: IP-literal with IPv6address or IPvFuture,
 * reg-name with pct-encoded, port = *DIGIT; and our bounds: a non-empty
 * host, a port up to 65535); a valid one splits into the host and port the
 * checker finds, with pointers into the input; and the three request forms
 * that carry it are accepted exactly when it is valid (CONNECT: with a
 * port), with req->host the input itself.
 */
#include "fuzz_check.h"

/* ---- the checker -------------------------------------------------------- */

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

static int is_unreserved_or_sub_delim(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("-._~!$&'()*+,;=", c));
}

/* dec-octet "." dec-octet "." dec-octet "." dec-octet, no leading zeros. */
static int ipv4_ok(const char *s, size_t n)
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        size_t start = i;
        unsigned v = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && i - start < 3)
            v = v * 10 + (unsigned)(s[i++] - '0');
        if (i == start || v > 255 || (i - start > 1 && s[start] == '0'))
            return 0;
        if (part < 3 && (i == n || s[i++] != '.'))
            return 0;
    }
    return i == n;
}

/* h16 *( ":" h16 ), the last element an IPv4 address when v4 allows;
 * adds the 16-bit groups to *groups. An empty list is fine. */
static int h16_list(const char *s, size_t n, int v4, int *groups)
{
    size_t i = 0;
    if (n == 0)
        return 1;
    for (;;) {
        size_t j = i;
        while (j < n && s[j] != ':')
            j++;
        if (j == n && v4 && memchr(s + i, '.', j - i)) {
            *groups += 2;
            return ipv4_ok(s + i, j - i);
        }
        if (j - i < 1 || j - i > 4)
            return 0;
        for (size_t k = i; k < j; k++)
            if (!is_hex(s[k]))
                return 0;
        (*groups)++;
        if (j == n)
            return 1;
        i = j + 1;
        if (i == n)
            return 0; /* a trailing ':' */
    }
}

/* IPv6address: eight groups, or fewer around one "::". */
static int ipv6_ok(const char *s, size_t n)
{
    const char *dbl = memmem(s, n, "::", 2);
    int groups = 0;
    if (!dbl)
        return h16_list(s, n, 1, &groups) && groups == 8;
    size_t left = (size_t)(dbl - s), right = n - left - 2;
    if (memmem(dbl + 1, n - left - 1, "::", 2))
        return 0;
    return h16_list(s, left, 0, &groups) &&
           h16_list(dbl + 2, right, 1, &groups) && groups <= 7;
}

/* "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ) */
static int ipvfuture_ok(const char *s, size_t n)
{
    size_t i = 1;
    while (i < n && is_hex(s[i]))
        i++;
    if (i == 1 || i == n || s[i] != '.' || i + 1 == n)
        return 0;
    for (i++; i < n; i++)
        if (!is_unreserved_or_sub_delim(s[i]) && s[i] != ':')
            return 0;
    return 1;
}

/* The checker: 1 with the host's length and the port (-1: none) set. */
static int authority_ok(const char *s, size_t n, size_t *host_len, int *port)
{
    size_t i = 0;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return 0;
        size_t in = (size_t)(close - s) - 1;
        int ok = in && (s[1] == 'v' || s[1] == 'V') ? ipvfuture_ok(s + 1, in)
                                                    : ipv6_ok(s + 1, in);
        if (!ok)
            return 0;
        i = in + 2;
    } else {
        while (i < n && s[i] != ':') {
            if (s[i] == '%') {
                if (n - i < 3 || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
                    return 0;
                i += 3;
            } else if (is_unreserved_or_sub_delim(s[i])) {
                i++;
            } else {
                return 0;
            }
        }
        if (i == 0)
            return 0;
    }
    *host_len = i;
    *port = -1;
    if (i == n)
        return 1;
    if (s[i] != ':')
        return 0;
    long v = 0;
    for (i++; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
        if (v > 65535)
            return 0;
    }
    if (s[n - 1] != ':')
        *port = (int)v;
    return 1;
}

/* ---- the request forms that carry an authority -------------------------- */

/* Parses pre + s + post; 1 when it parsed, with req->host checked to be
 * the authority (when `host` is set). */
static int parses(const char *pre, const char *s, size_t n, const char *post,
                  int host)
{
    size_t a = strlen(pre), b = strlen(post);
    char *raw = malloc(a + n + b);
    FUZZ_CHECK(raw != NULL);
    memcpy(raw, pre, a);
    memcpy(raw + a, s, n);
    memcpy(raw + a + n, post, b);
    mf_http_header_t hs[4];
    mf_http_request_t req = {.headers = hs, .num_headers = 4};
    int rc = mf_http_parse_request(raw, a + n + b, &req, NULL, NULL);
    FUZZ_CHECK(rc == (int)(a + n + b) ||
               (rc == MF_HTTP_ERROR && req.error_status == 400));
    if (rc > 0 && host)
        FUZZ_CHECK(req.host_len == n && memcmp(req.host, raw + a, n) == 0);
    free(raw);
    return rc > 0;
}

/* Bytes that keep the field line a field line: field-content without
 * leading or trailing whitespace. */
static int fits_a_field(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return n == 0 ||
           (s[0] != ' ' && s[0] != '\t' && s[n - 1] != ' ' && s[n - 1] != '\t');
}

/* Bytes that keep an absolute-form authority one: target bytes that do
 * not end it ('/', '?') or the target ('#'). */
static int fits_a_target(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f || c == '/' || c == '?' || c == '#')
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_copy(data, size);
    mf_http_authority_t a;
    size_t host_len = 0;
    int port = -1;
    int ok = authority_ok(s, size, &host_len, &port);
    int rc = mf_http_parse_authority(s, size, &a);
    FUZZ_CHECK(rc == (ok ? 0 : -1));
    if (ok) {
        FUZZ_CHECK(a.host == s && a.host_len == host_len);
        FUZZ_CHECK(a.port == port);
    }
    if (fits_a_field(s, size))
        FUZZ_CHECK(parses("GET / HTTP/1.1\r\nHost: ", s, size, "\r\n\r\n",
                          size > 0) == (ok || size == 0));
    if (fits_a_target(s, size)) {
        FUZZ_CHECK(parses("GET http://", s, size,
                          "/ HTTP/1.1\r\nHost: h\r\n\r\n", 1) == ok);
        FUZZ_CHECK(parses("CONNECT ", s, size, " HTTP/1.1\r\nHost: h\r\n\r\n",
                          0) == (ok && port >= 0));
    }
    free(s);
    return 0;
}
