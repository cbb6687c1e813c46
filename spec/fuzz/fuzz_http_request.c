/*
 * fuzz_http_request.c — libFuzzer target for mf_http_parse_request.
 *
 * Each input is parsed whole under the default limits and under small ones
 * the fuzzer can cross, then cut at a few points and parsed prefix by prefix
 * as a server would: each prefix from an exact-size copy, once statelessly
 * and once with `scanned` carried over. Checked: the return convention; that
 * a parsed head's pointers lie inside it and its fields are well-formed;
 * that a parsed request never carries both Content-Length and
 * Transfer-Encoding, nor two Hosts, nor a Host or target authority that is
 * not host[:port], nor a '#' in its target, nor a transfer coding but
 * chunked; and that a prefix gets INCOMPLETE or the whole input's answer,
 * never INCOMPLETE after a final answer (so a head rejected early is
 * rejected alike whole).
 */
#include <strings.h>

#include "fuzz_check.h"

#define NHEADERS 16

typedef struct outcome {
    int rc, status;
} outcome_t;

static outcome_t parse(const char *buf, size_t len, const mf_http_limits_t *lim,
                       size_t *scanned, mf_http_request_t *req,
                       mf_http_header_t *hs)
{
    memset(req, 0, sizeof *req);
    req->headers = hs;
    req->num_headers = NHEADERS;
    int rc = mf_http_parse_request(buf, len, req, lim, scanned);
    FUZZ_CHECK(rc == MF_HTTP_INCOMPLETE || rc == MF_HTTP_ERROR ||
               (rc > 0 && (size_t)rc <= len));
    if (rc == MF_HTTP_ERROR) {
        int s = req->error_status;
        FUZZ_CHECK(s == 400 || s == 414 || s == 431 || s == 501 || s == 505);
    }
    return (outcome_t){rc, rc == MF_HTTP_ERROR ? req->error_status : 0};
}

static size_t count_named(const mf_http_request_t *r, const char *name)
{
    size_t n = 0;
    const mf_http_header_t *h = r->headers, *end = h + r->num_headers;
    while ((h = mf_http_find_header(h, (size_t)(end - h), name)) != NULL) {
        n++;
        h++;
    }
    return n;
}

static void check_request_line(const char *buf, size_t head,
                               const mf_http_request_t *r)
{
    FUZZ_CHECK(r->method_len > 0 &&
               fuzz_inside(buf, head, r->method, r->method_len));
    for (size_t i = 0; i < r->method_len; i++)
        FUZZ_CHECK(fuzz_is_tchar(r->method[i]));
    FUZZ_CHECK(r->target_len > 0 &&
               fuzz_inside(buf, head, r->target, r->target_len));
    for (size_t i = 0; i < r->target_len; i++) {
        unsigned char c = (unsigned char)r->target[i];
        FUZZ_CHECK(c > 0x20 && c != 0x7f && c != '#');
    }
    /* An absolute-form target without a path has the path "/". */
    FUZZ_CHECK(
        r->path &&
        (fuzz_inside(r->target, r->target_len, r->path, r->path_len) ||
         (r->path_len == 1 && r->path[0] == '/' && r->target[0] != '/')));
    FUZZ_CHECK(!r->query ||
               (fuzz_inside(r->target, r->target_len, r->query, r->query_len) &&
                r->query[-1] == '?'));
    FUZZ_CHECK(r->minor_version == 0 || r->minor_version == 1);
}

/* req->host and a non-empty Host value are host[:port]. */
static void check_authorities(const mf_http_request_t *r)
{
    mf_http_authority_t a;
    const mf_http_header_t *h =
        mf_http_find_header(r->headers, r->num_headers, "host");
    if (h && h->value_len)
        FUZZ_CHECK(mf_http_parse_authority(h->value, h->value_len, &a) == 0);
    if (r->host && r->host_len)
        FUZZ_CHECK(mf_http_parse_authority(r->host, r->host_len, &a) == 0);
}

/* The Transfer-Encoding fields, read as one list, name "chunked" once and
 * nothing else. */
static int only_chunked(const mf_http_request_t *r)
{
    int chunked = 0;
    for (size_t i = 0; i < r->num_headers; i++) {
        const mf_http_header_t *h = &r->headers[i];
        if (h->name_len != 17 || strncasecmp(h->name, "transfer-encoding", 17))
            continue;
        for (size_t j = 0; j < h->value_len; j++) {
            char c = h->value[j];
            if (c == ' ' || c == '\t' || c == ',')
                continue;
            if (h->value_len - j < 7 || strncasecmp(h->value + j, "chunked", 7))
                return 0;
            chunked++;
            j += 6;
        }
    }
    return chunked == 1;
}

static void check_parsed(const char *buf, size_t head,
                         const mf_http_request_t *r,
                         const mf_http_limits_t *lim)
{
    FUZZ_CHECK(head <= lim->max_head_bytes);
    FUZZ_CHECK(head >= 4 && memcmp(buf + head - 4, "\r\n\r\n", 4) == 0);
    FUZZ_CHECK(r->error_status == 0);
    check_request_line(buf, head, r);
    FUZZ_CHECK(r->num_headers <= NHEADERS &&
               r->num_headers <= lim->max_headers);
    fuzz_check_headers(buf, head, r->headers, r->num_headers);
    FUZZ_CHECK(!r->host || fuzz_inside(buf, head, r->host, r->host_len));
    check_authorities(r);
    FUZZ_CHECK(r->minor_version == 0 || r->host);
    FUZZ_CHECK(count_named(r, "host") <= 1);
    switch (r->body) {
    case MF_HTTP_BODY_NONE:
        FUZZ_CHECK(r->content_length == 0);
        FUZZ_CHECK(count_named(r, "transfer-encoding") == 0);
        break;
    case MF_HTTP_BODY_LENGTH:
        FUZZ_CHECK(r->content_length > 0);
        FUZZ_CHECK(count_named(r, "transfer-encoding") == 0);
        break;
    case MF_HTTP_BODY_CHUNKED:
        FUZZ_CHECK(r->minor_version == 1);
        FUZZ_CHECK(count_named(r, "content-length") == 0);
        FUZZ_CHECK(only_chunked(r));
        break;
    default:
        FUZZ_CHECK(!"request body kind");
    }
    FUZZ_CHECK(!r->expect_continue || r->minor_version == 1);
}

static void check_prefixes(const unsigned char *data, size_t len,
                           const mf_http_limits_t *lim, outcome_t whole)
{
    mf_http_header_t hs[NHEADERS];
    mf_http_request_t req;
    size_t cuts[8], scanned = 0;
    size_t n = fuzz_cuts(data, len, whole.rc > 0 ? (size_t)whole.rc : 0, cuts);
    int settled = 0;
    for (size_t i = 0; i < n; i++) {
        char *p = fuzz_copy(data, cuts[i]);
        outcome_t a = parse(p, cuts[i], lim, NULL, &req, hs);
        outcome_t b = parse(p, cuts[i], lim, &scanned, &req, hs);
        free(p);
        FUZZ_CHECK(a.rc == b.rc && a.status == b.status);
        if (a.rc == MF_HTTP_INCOMPLETE) {
            FUZZ_CHECK(!settled);
            FUZZ_CHECK(whole.rc < 0 || cuts[i] < (size_t)whole.rc);
        } else {
            FUZZ_CHECK(a.rc == whole.rc && a.status == whole.status);
            settled = 1;
        }
    }
}

static void run(const unsigned char *data, size_t size,
                const mf_http_limits_t *lim)
{
    mf_http_header_t hs[NHEADERS];
    mf_http_request_t req;
    char *buf = fuzz_copy(data, size);
    outcome_t whole = parse(buf, size, lim, NULL, &req, hs);
    if (whole.rc > 0)
        check_parsed(buf, (size_t)whole.rc, &req, lim);
    free(buf);
    check_prefixes(data, size, lim, whole);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const mf_http_limits_t defaults = MF_HTTP_LIMITS_DEFAULT;
    static const mf_http_limits_t small = {160, 48, 6};
    run(data, size, &defaults);
    run(data, size, &small);
    return 0;
}
