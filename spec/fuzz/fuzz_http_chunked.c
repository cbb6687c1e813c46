/*
 * fuzz_http_chunked.c — libFuzzer target for the chunked decoder
 * (mf_http_chunked_decode): chunk sizes, chunk extensions by their grammar,
 * trailers, and max_body.
 *
 * The first byte picks max_body (none, 16 or 1000 bytes); the rest is a
 * chunked body, decoded three ways, each piece from an exact-size copy: in
 * one call, in pieces cut where the input's own bytes say, and a byte at a
 * time. Checked: the three agree on the verdict (done, need more, or the
 * error and its status), the decoded bytes and the bytes after the body;
 * an error is 400 or 413; nothing decoded goes past max_body, and
 * body_bytes counts what was decoded.
 */
#include "fuzz_check.h"

typedef struct result {
    ssize_t rc; /* done (>= 0, normalized to 0), INCOMPLETE or ERROR */
    int status; /* on ERROR */
    char *out;  /* decoded bytes, then (when done) the bytes after */
    size_t decoded, rest;
} result_t;

/* Feeds in[0..n) in pieces ending at the given cuts (ascending, each in
 * (0, n)) and at n. Each piece is decoded in a heap block of its exact
 * size, so ASan sees any read past it; one-byte pieces share one block. */
static void decode(const char *in, size_t n, uint64_t max_body,
                   const size_t *cuts, size_t ncuts, result_t *r)
{
    mf_http_chunked_t dec;
    size_t from = 0;
    char *one = malloc(1);
    FUZZ_CHECK(one != NULL);
    mf_http_chunked_init(&dec, max_body);
    r->out = malloc(n ? n : 1);
    FUZZ_CHECK(r->out != NULL);
    r->decoded = r->rest = 0;
    r->rc = MF_HTTP_INCOMPLETE;
    for (size_t i = 0; i <= ncuts && r->rc == MF_HTTP_INCOMPLETE; i++) {
        size_t to = i < ncuts ? cuts[i] : n, len = to - from;
        char *piece = len == 1 ? one : fuzz_copy(in + from, len);
        if (len == 1)
            one[0] = in[from];
        r->rc = mf_http_chunked_decode(&dec, piece, &len);
        FUZZ_CHECK(len <= to - from);
        memcpy(r->out + r->decoded, piece, len);
        r->decoded += len;
        if (r->rc >= 0) { /* the rest of this piece, then the input's */
            FUZZ_CHECK((size_t)r->rc <= to - from - len);
            memcpy(r->out + r->decoded, piece + len, (size_t)r->rc);
            memcpy(r->out + r->decoded + r->rc, in + to, n - to);
            r->rest = (size_t)r->rc + n - to;
            r->rc = 0;
        }
        if (piece != one)
            free(piece);
        from = to;
    }
    free(one);
    FUZZ_CHECK(dec.body_bytes == r->decoded);
    FUZZ_CHECK(max_body == 0 || r->decoded <= max_body);
    r->status = r->rc == MF_HTTP_ERROR ? dec.error_status : 0;
    if (r->rc == MF_HTTP_ERROR)
        FUZZ_CHECK(r->status == 400 || r->status == 413);
}

static void same(const result_t *a, const result_t *b)
{
    FUZZ_CHECK(a->rc == b->rc && a->status == b->status);
    FUZZ_CHECK(a->decoded == b->decoded && a->rest == b->rest);
    FUZZ_CHECK(memcmp(a->out, b->out, a->decoded + a->rest) == 0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const uint64_t max_bodies[] = {0, 16, 1000};
    if (size == 0)
        return 0;
    uint64_t max_body = max_bodies[data[0] % 3];
    const char *in = (const char *)data + 1;
    size_t n = size - 1, cuts[8];
    size_t ncuts = n ? fuzz_cuts(data + 1, n, 0, cuts) : 0;
    if (ncuts && cuts[ncuts - 1] == n)
        ncuts--; /* the last piece always ends at n */
    size_t *every = malloc((n ? n : 1) * sizeof *every);
    FUZZ_CHECK(every != NULL);
    for (size_t i = 1; i < n; i++)
        every[i - 1] = i;
    result_t whole, split, bytes;
    decode(in, n, max_body, NULL, 0, &whole);
    decode(in, n, max_body, cuts, ncuts, &split);
    decode(in, n, max_body, every, n ? n - 1 : 0, &bytes);
    same(&whole, &split);
    same(&whole, &bytes);
    free(whole.out);
    free(split.out);
    free(bytes.out);
    free(every);
    return 0;
}
