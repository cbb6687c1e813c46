/*
 * fuzz_check.h — what the HTTP fuzz targets share: the invariant check
 * (fuzz_assert.h), exact-size copies (so ASan sees a
 * read past the caller's length), and the checks on a parsed header array.
 */
#ifndef MF_FUZZ_CHECK_H
#define MF_FUZZ_CHECK_H

#include <moonflow/http_parser.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_assert.h"

static inline char *fuzz_copy(const void *data, size_t n)
{
    char *p = malloc(n ? n : 1);
    FUZZ_CHECK(p != NULL);
    memcpy(p, data, n);
    return p;
}

/* p[0..n) lies inside buf[0..len). */
static inline int fuzz_inside(const char *buf, size_t len, const char *p,
                              size_t n)
{
    return p >= buf && (size_t)(p - buf) <= len && n <= len - (size_t)(p - buf);
}

static inline int fuzz_is_tchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Field names are non-empty tokens; values have no CTL but HTAB and no
 * whitespace at either end; everything lies inside the head. */
static inline void fuzz_check_headers(const char *buf, size_t head,
                                      const mf_http_header_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(h[i].name_len > 0);
        FUZZ_CHECK(fuzz_inside(buf, head, h[i].name, h[i].name_len));
        FUZZ_CHECK(fuzz_inside(buf, head, h[i].value, h[i].value_len));
        for (size_t j = 0; j < h[i].name_len; j++)
            FUZZ_CHECK(fuzz_is_tchar(h[i].name[j]));
        for (size_t j = 0; j < h[i].value_len; j++) {
            unsigned char c = (unsigned char)h[i].value[j];
            FUZZ_CHECK((c >= 0x20 && c != 0x7f) || c == '\t');
        }
        if (h[i].value_len > 0) {
            char first = h[i].value[0], last = h[i].value[h[i].value_len - 1];
            FUZZ_CHECK(first != ' ' && first != '\t');
            FUZZ_CHECK(last != ' ' && last != '\t');
        }
    }
}

static int fuzz_size_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Up to 8 distinct cut points in [1, len], ascending: fixed fractions of the
 * input, two picked by its own bytes, and both sides of `mark` (the head's
 * length when the whole input parsed; 0 otherwise). */
static inline size_t fuzz_cuts(const unsigned char *data, size_t len,
                               size_t mark, size_t cuts[8])
{
    size_t cand[8] = {1, len / 4, len / 2, len - 1, mark - 1, mark, 0, 0};
    size_t n = 0, out = 0;
    if (len >= 2) {
        cand[6] = 1 + data[0] * (len - 1) / 255;
        cand[7] = 1 + data[len - 1] * (len - 1) / 255;
    }
    for (size_t i = 0; i < 8; i++)
        if (cand[i] >= 1 && cand[i] <= len)
            cuts[n++] = cand[i];
    qsort(cuts, n, sizeof *cuts, fuzz_size_cmp);
    for (size_t i = 0; i < n; i++)
        if (out == 0 || cuts[out - 1] != cuts[i])
            cuts[out++] = cuts[i];
    return out;
}

#endif /* MF_FUZZ_CHECK_H */
