/*
 * http_chars.h — the byte classes and ASCII helpers of the HTTP parser, and
 * its word-at-a-time skip: a leaf that the parser's files and the URI
 * functions (http_uri.c) share. Internal; includes nothing of core/http.
 *
 * Owned here: the class bits and the inline helpers; the class table is in
 * http_chars.c. The helpers are inline so that the per-byte loops cost what
 * they did in one file.
 */
#ifndef MF_HTTP_CHARS_H
#define MF_HTTP_CHARS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- byte classes ------------------------------------------------------ */

enum {
    MF__C_TOKEN = 0x01,  /* tchar (RFC 9110 §5.6.2): methods, names, codings */
    MF__C_VALUE = 0x02,  /* field-content: VCHAR, obs-text, SP, HTAB */
    MF__C_TARGET = 0x04, /* request-target: VCHAR and obs-text but '#' */
    MF__C_HOST = 0x08,   /* reg-name: unreserved and sub-delims (RFC 3986) */
    MF__C_HEX = 0x10,    /* HEXDIG */
    MF__C_SCHEME = 0x20, /* URI scheme: ALPHA, DIGIT, "+", "-", "." */
};

/* Which classes each byte belongs to (http_chars.c). */
extern const uint8_t mf__http_class[256];

static inline bool mf__is(char c, unsigned cls)
{
    return (mf__http_class[(unsigned char)c] & cls) != 0;
}

static inline bool mf__is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static inline bool mf__is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static inline char mf__lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

/* Value of a byte already known to be a HEXDIG. */
static inline unsigned mf__hex_value(char c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
}

/* ASCII case-insensitive equality of a[0..n) and b[0..n). */
static inline bool mf__iequal(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (mf__lower(a[i]) != mf__lower(b[i]))
            return false;
    return true;
}

/* s[0..n) equals the literal lit, ignoring ASCII case. */
#define MF__IS(s, n, lit) \
    ((n) == sizeof(lit) - 1 && mf__iequal((s), (lit), sizeof(lit) - 1))

/* ---- word-at-a-time skipping ------------------------------------------- */

#define MF__ONES 0x0101010101010101ull

static inline uint64_t mf__load64(const char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w); /* unaligned-safe; one load on x86/arm64 */
    return w;
}

/* Nonzero iff some byte of w is below n (n <= 128): "hasless" of the Bit
 * Twiddling Hacks, exact as a yes/no answer. */
static inline uint64_t mf__has_less(uint64_t w, uint64_t n)
{
    return (w - MF__ONES * n) & ~w & (MF__ONES * 0x80);
}

static inline uint64_t mf__has_del(uint64_t w)
{
    return mf__has_less(w ^ (MF__ONES * 0x7f), 1);
}

/* Nonzero iff some byte of w is b. */
static inline uint64_t mf__has_byte(uint64_t w, unsigned char b)
{
    return mf__has_less(w ^ (MF__ONES * b), 1);
}

/*
 * Returns the first byte in [p, end) outside class cls (or end). Both
 * classes skipped this way hold every byte from `below` up except DEL and
 * `also` (MF__C_VALUE: none but DEL; MF__C_TARGET: '#'), so a word with none
 * of those is skipped whole; a word that has one is walked byte by byte (it
 * may only hold an HTAB, which MF__C_VALUE accepts).
 */
static inline const char *mf__skip_class_but(const char *p, const char *end,
                                             unsigned cls, uint64_t below,
                                             unsigned char also)
{
    for (;;) {
        while (end - p >= 8) {
            uint64_t w = mf__load64(p);
            if (mf__has_less(w, below) | mf__has_del(w) | mf__has_byte(w, also))
                break;
            p += 8;
        }
        const char *stop = end - p >= 8 ? p + 8 : end;
        for (; p < stop; p++)
            if (!mf__is(*p, cls))
                return p;
        if (p == end)
            return p;
    }
}

static inline const char *mf__skip_class(const char *p, const char *end,
                                         unsigned cls, uint64_t below)
{
    return mf__skip_class_but(p, end, cls, below, 0x7f);
}

static inline bool mf__all_of(const char *s, size_t n, unsigned cls)
{
    for (size_t i = 0; i < n; i++)
        if (!mf__is(s[i], cls))
            return false;
    return true;
}

#endif /* MF_HTTP_CHARS_H */
