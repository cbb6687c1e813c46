/*
 * core/engine/codec.c — base64 and hex (moonflow/codec.h): table-driven,
 * into the caller's memory, no state.
 *
 * Owns nothing. May call: libc only.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <moonflow/codec.h>

static const char mf__b64_std[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char mf__b64_url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t mf_base64_encode(char *out, const void *in, size_t n, unsigned flags)
{
    const unsigned char *s = in;
    const char *abc = (flags & MF_BASE64_URL) ? mf__b64_url : mf__b64_std;
    char *d = out;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        d[0] = abc[v >> 18];
        d[1] = abc[(v >> 12) & 63];
        d[2] = abc[(v >> 6) & 63];
        d[3] = abc[v & 63];
        d += 4;
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        *d++ = abc[v >> 18];
        *d++ = abc[(v >> 12) & 63];
        if (i + 1 < n)
            *d++ = abc[(v >> 6) & 63];
        if (!(flags & MF_BASE64_NOPAD)) {
            if (i + 1 >= n)
                *d++ = '=';
            *d++ = '=';
        }
    }
    return (size_t)(d - out);
}

/* The value of symbol c, 64 for a byte outside the alphabet. */
static unsigned mf__b64_value(unsigned char c, bool url)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (url ? '-' : '+'))
        return 62;
    if (c == (url ? '_' : '/'))
        return 63;
    return 64;
}

/* The length without its padding, or (size_t)-1 with *bad set when the
 * padding is wrong. */
static size_t mf__b64_unpadded(const char *in, size_t n, size_t *bad)
{
    size_t pad = 0;
    while (pad < n && in[n - 1 - pad] == '=')
        pad++;
    if (pad > 2 || (pad && n % 4 != 0)) {
        *bad = n - pad; /* padding that does not end a quantum */
        return (size_t)-1;
    }
    return n - pad;
}

ssize_t mf_base64_decode(void *out, const char *in, size_t n, unsigned flags,
                         size_t *bad)
{
    bool url = flags & MF_BASE64_URL;
    size_t len = mf__b64_unpadded(in, n, bad);
    if (len == (size_t)-1)
        return -1;
    unsigned char *d = out;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned v = mf__b64_value((unsigned char)in[i], url);
        if (v == 64) {
            *bad = i;
            return -1;
        }
        acc = acc << 6 | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *d++ = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (len % 4 == 1) {
        *bad = len; /* 6 bits cannot make a byte */
        return -1;
    }
    return (ssize_t)(d - (unsigned char *)out);
}

void mf_hex_encode(char *out, const void *in, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *s = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[s[i] >> 4];
        out[2 * i + 1] = digits[s[i] & 15];
    }
}

static int mf__hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ssize_t mf_hex_decode(void *out, const char *in, size_t n, size_t *bad)
{
    unsigned char *d = out;
    for (size_t i = 0; i + 1 < n; i += 2) {
        int hi = mf__hex_digit(in[i]), lo = mf__hex_digit(in[i + 1]);
        if (hi < 0 || lo < 0) {
            *bad = hi < 0 ? i : i + 1;
            return -1;
        }
        d[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    if (n % 2) {
        *bad = mf__hex_digit(in[n - 1]) < 0 ? n - 1 : n;
        return -1;
    }
    return (ssize_t)(n / 2);
}
