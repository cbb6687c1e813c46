/*
 * fuzz_http_response.c — libFuzzer target for mf_http_parse_response and
 * the chunked decoder.
 *
 * The first input byte picks the mode: bit 0 the request was HEAD, bit 1
 * small limits, bit 2 max_body 64 for the decoder, bit 3 the rest is a bare
 * chunked body (skip the head parser). The rest is parsed as a response head
 * (checked as fuzz_http_request checks requests); when its body is
 * chunked, the bytes after the head go to the decoder. The decoder runs once
 * over the whole body and once over pieces cut by a generator seeded from
 * the input; both runs must agree on the answer, the decoded bytes, the
 * bytes left after the body and the error status.
 */
#include "fuzz_check.h"

#define NHEADERS 16

typedef struct outcome {
    int rc, status;
} outcome_t;

static outcome_t parse(const char *buf, size_t len, bool head_request,
                       const mf_http_limits_t *lim, size_t *scanned,
                       mf_http_response_t *resp, mf_http_header_t *hs)
{
    memset(resp, 0, sizeof *resp);
    resp->headers = hs;
    resp->num_headers = NHEADERS;
    int rc = mf_http_parse_response(buf, len, resp, head_request, lim, scanned);
    FUZZ_CHECK(rc == MF_HTTP_INCOMPLETE || rc == MF_HTTP_ERROR ||
               (rc > 0 && (size_t)rc <= len));
    FUZZ_CHECK(rc != MF_HTTP_ERROR || resp->error_status == 502);
    return (outcome_t){rc, rc == MF_HTTP_ERROR ? resp->error_status : 0};
}

static void check_parsed(const char *buf, size_t head,
                         const mf_http_response_t *r, bool head_request,
                         const mf_http_limits_t *lim)
{
    int s = r->status;
    FUZZ_CHECK(head <= lim->max_head_bytes);
    FUZZ_CHECK(head >= 4 && memcmp(buf + head - 4, "\r\n\r\n", 4) == 0);
    FUZZ_CHECK(s >= 100 && s <= 999);
    FUZZ_CHECK(r->minor_version == 0 || r->minor_version == 1);
    FUZZ_CHECK(fuzz_inside(buf, head, r->reason, r->reason_len));
    FUZZ_CHECK(r->num_headers <= NHEADERS &&
               r->num_headers <= lim->max_headers);
    fuzz_check_headers(buf, head, r->headers, r->num_headers);
    FUZZ_CHECK(r->body >= MF_HTTP_BODY_NONE &&
               r->body <= MF_HTTP_BODY_UNTIL_CLOSE);
    if (head_request || s / 100 == 1 || s == 204 || s == 304)
        FUZZ_CHECK(r->body == MF_HTTP_BODY_NONE);
    if (r->body == MF_HTTP_BODY_UNTIL_CLOSE)
        FUZZ_CHECK(!r->keep_alive);
    if (r->body == MF_HTTP_BODY_LENGTH)
        FUZZ_CHECK(r->content_length > 0);
    if (r->body == MF_HTTP_BODY_CHUNKED || r->body == MF_HTTP_BODY_LENGTH)
        FUZZ_CHECK(mf_http_find_header(r->headers, r->num_headers,
                                       r->body == MF_HTTP_BODY_CHUNKED
                                           ? "transfer-encoding"
                                           : "content-length"));
}

static void check_prefixes(const unsigned char *data, size_t len,
                           bool head_request, const mf_http_limits_t *lim,
                           outcome_t whole)
{
    mf_http_header_t hs[NHEADERS];
    mf_http_response_t resp;
    size_t cuts[8], scanned = 0;
    size_t n = fuzz_cuts(data, len, whole.rc > 0 ? (size_t)whole.rc : 0, cuts);
    int settled = 0;
    for (size_t i = 0; i < n; i++) {
        char *p = fuzz_copy(data, cuts[i]);
        outcome_t a = parse(p, cuts[i], head_request, lim, NULL, &resp, hs);
        outcome_t b = parse(p, cuts[i], head_request, lim, &scanned, &resp, hs);
        free(p);
        FUZZ_CHECK(a.rc == b.rc && a.status == b.status);
        if (a.rc == MF_HTTP_INCOMPLETE) {
            FUZZ_CHECK(!settled);
        } else {
            FUZZ_CHECK(a.rc == whole.rc && a.status == whole.status);
            settled = 1;
        }
    }
}

/* ---- chunked ------------------------------------------------------------ */

typedef struct decoded {
    ssize_t rc;
    int status;
    char *data, *rest; /* both of the body's size */
    size_t data_len, rest_len;
} decoded_t;

static void decoded_init(decoded_t *d, size_t len)
{
    memset(d, 0, sizeof *d);
    d->data = malloc(len ? len : 1);
    d->rest = malloc(len ? len : 1);
    FUZZ_CHECK(d->data && d->rest);
    d->rc = MF_HTTP_INCOMPLETE;
}

static uint32_t next_random(uint32_t *state)
{
    *state ^= *state << 13; /* xorshift32 */
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

/*
 * Decodes body[0..len) in pieces: all of it at once when seed is 0, else
 * pieces of random sizes, each from an exact-size copy. Checks the decode
 * call's contract on every piece.
 */
static void decode(const char *body, size_t len, uint64_t max_body,
                   uint32_t seed, decoded_t *d)
{
    mf_http_chunked_t dec;
    size_t from = 0;
    mf_http_chunked_init(&dec, max_body);
    decoded_init(d, len);
    do {
        size_t piece = len - from;
        if (seed && piece > 1) {
            uint32_t r = next_random(&seed);
            piece = 1 + r % ((r & 0x100) ? piece : (piece < 8 ? piece : 8));
        }
        char *p = fuzz_copy(body + from, piece);
        size_t n = piece;
        d->rc = mf_http_chunked_decode(&dec, p, &n);
        FUZZ_CHECK(n <= piece);
        memcpy(d->data + d->data_len, p, n);
        d->data_len += n;
        if (d->rc >= 0) {
            size_t after = len - from - piece;
            FUZZ_CHECK((size_t)d->rc <= piece - n);
            memcpy(d->rest, p + n, (size_t)d->rc);
            memcpy(d->rest + d->rc, body + from + piece, after);
            d->rest_len = (size_t)d->rc + after;
        }
        free(p);
        from += piece;
    } while (d->rc == MF_HTTP_INCOMPLETE && from < len);
    FUZZ_CHECK(dec.body_bytes == d->data_len);
    FUZZ_CHECK(max_body == 0 || dec.body_bytes <= max_body);
    d->status = d->rc == MF_HTTP_ERROR ? dec.error_status : 0;
    FUZZ_CHECK(d->rc != MF_HTTP_ERROR || d->status == 400 || d->status == 413);
}

static void check_chunked(const char *body, size_t len, uint64_t max_body,
                          uint32_t seed)
{
    decoded_t whole, split;
    decode(body, len, max_body, 0, &whole);
    decode(body, len, max_body, seed | 1, &split);
    FUZZ_CHECK((whole.rc >= 0) == (split.rc >= 0));
    FUZZ_CHECK(whole.rc >= 0 || whole.rc == split.rc);
    FUZZ_CHECK(whole.status == split.status);
    FUZZ_CHECK(whole.data_len == split.data_len &&
               memcmp(whole.data, split.data, whole.data_len) == 0);
    FUZZ_CHECK(whole.rest_len == split.rest_len &&
               memcmp(whole.rest, split.rest, whole.rest_len) == 0);
    if (whole.rc >= 0) /* the bytes after the body are the input's tail */
        FUZZ_CHECK(memcmp(whole.rest, body + len - whole.rest_len,
                          whole.rest_len) == 0);
    free(whole.data);
    free(whole.rest);
    free(split.data);
    free(split.rest);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const mf_http_limits_t defaults = MF_HTTP_LIMITS_DEFAULT;
    static const mf_http_limits_t small = {160, 160, 6};
    mf_http_header_t hs[NHEADERS];
    mf_http_response_t resp;
    if (size == 0)
        return 0;
    unsigned mode = data[0];
    bool head_request = mode & 1;
    const mf_http_limits_t *lim = (mode & 2) ? &small : &defaults;
    uint64_t max_body = (mode & 4) ? 64 : 0;
    uint32_t seed = (uint32_t)size * 2654435761u ^ mode;
    data++;
    size--;
    if (mode & 8) {
        check_chunked((const char *)data, size, max_body, seed);
        return 0;
    }
    char *buf = fuzz_copy(data, size);
    outcome_t whole = parse(buf, size, head_request, lim, NULL, &resp, hs);
    if (whole.rc > 0) {
        check_parsed(buf, (size_t)whole.rc, &resp, head_request, lim);
        if (resp.body == MF_HTTP_BODY_CHUNKED)
            check_chunked(buf + whole.rc, size - (size_t)whole.rc, max_body,
                          seed);
    }
    free(buf);
    check_prefixes(data, size, head_request, lim, whole);
    return 0;
}
