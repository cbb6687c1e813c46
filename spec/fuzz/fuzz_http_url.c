/*
 * fuzz_http_url.c — libFuzzer target for what a handler's req.query goes
 * through: mf_http_query_next (the pairs of a query string) and
 * mf_http_url_decode (%XX and '+').
 *
 * Each input is a query string, from an exact-size copy. Checked: the
 * pairs are the non-empty '&'-separated pieces in order, each split at its
 * first '=' (rebuilt from the pairs and compared with a split done here);
 * every pointer lies inside the query; then each key and value decodes,
 * both ways of '+', exactly as a decoder written here from RFC 3986 §2.1
 * says, in place and never longer than its input.
 */
#include "fuzz_check.h"

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The reference: -1 on a '%' without two hex digits after it. */
static ssize_t reference_decode(const char *in, size_t n, int plus, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c != '%') {
            out[o++] = c == '+' && plus ? ' ' : (char)c;
            continue;
        }
        if (n - i < 3)
            return -1;
        int hi = hex_value((unsigned char)in[i + 1]);
        int lo = hex_value((unsigned char)in[i + 2]);
        if (hi < 0 || lo < 0)
            return -1;
        out[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    return (ssize_t)o;
}

static void check_decode(const char *s, size_t n)
{
    for (int plus = 0; plus < 2; plus++) {
        char *buf = fuzz_copy(s, n), *want = malloc(n ? n : 1);
        FUZZ_CHECK(want != NULL);
        ssize_t got = mf_http_url_decode(buf, n, plus);
        ssize_t ref = reference_decode(s, n, plus, want);
        FUZZ_CHECK(got == ref);
        FUZZ_CHECK(got <= (ssize_t)n);
        if (got > 0)
            FUZZ_CHECK(memcmp(buf, want, (size_t)got) == 0);
        free(buf);
        free(want);
    }
}

/* The next non-empty piece of q[*at..n) between '&'s, split here. */
static int next_piece(const char *q, size_t n, size_t *at, size_t *start,
                      size_t *len)
{
    while (*at < n) {
        const char *amp = memchr(q + *at, '&', n - *at);
        size_t stop = amp ? (size_t)(amp - q) : n;
        *start = *at;
        *len = stop - *at;
        *at = amp ? stop + 1 : n;
        if (*len)
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *q = fuzz_copy(data, size);
    const char *pos = q, *end = q + size;
    size_t at = 0, start, len;
    mf_http_query_pair_t kv;
    while (mf_http_query_next(&pos, end, &kv)) {
        FUZZ_CHECK(next_piece(q, size, &at, &start, &len));
        const char *eq = memchr(q + start, '=', len);
        size_t key_len = eq ? (size_t)(eq - q) - start : len;
        FUZZ_CHECK(kv.key == q + start && kv.key_len == key_len);
        FUZZ_CHECK(fuzz_inside(q, size, kv.key, kv.key_len));
        if (eq) {
            FUZZ_CHECK(kv.value == eq + 1);
            FUZZ_CHECK(kv.value_len == len - key_len - 1);
            FUZZ_CHECK(fuzz_inside(q, size, kv.value, kv.value_len));
            check_decode(kv.value, kv.value_len);
        } else {
            FUZZ_CHECK(kv.value == NULL && kv.value_len == 0);
        }
        check_decode(kv.key, kv.key_len);
        FUZZ_CHECK(pos == q + at);
    }
    FUZZ_CHECK(!next_piece(q, size, &at, &start, &len));
    FUZZ_CHECK(pos == end);
    check_decode(q, size);
    free(q);
    return 0;
}
