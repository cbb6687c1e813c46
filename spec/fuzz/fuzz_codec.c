/*
 * fuzz_codec.c — libFuzzer target for the base64 and hex decoders
 * (moonflow/codec.h), whose input is whatever a script or a client sends.
 *
 * Each input, from an exact-size copy, is decoded as base64 in both
 * alphabets and as hex, into exactly the room the header promises (a
 * heap block of that size: ASan sees one byte too many). Checked: a
 * refusal names a byte inside the input (or its end); an accepted input
 * re-encodes to itself (padding aside, in the same alphabet) when its last
 * symbol carries no stray bits; and the input taken as bytes round-trips
 * through both encoders.
 */
#include <moonflow/codec.h>

#include "fuzz_check.h"

static int alphabet_symbol(unsigned char c, int url)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == (url ? '-' : '+') ||
           c == (url ? '_' : '/');
}

static void check_base64(const char *in, size_t n, unsigned flags)
{
    size_t room = mf_base64_decoded_size(n), bad = (size_t)-1;
    unsigned char *out = malloc(room ? room : 1);
    FUZZ_CHECK(out != NULL);
    ssize_t len = mf_base64_decode(out, in, n, flags, &bad);
    if (len < 0) {
        FUZZ_CHECK(bad <= n);
        FUZZ_CHECK(bad == n || in[bad] == '=' ||
                   !alphabet_symbol((unsigned char)in[bad],
                                    flags & MF_BASE64_URL));
    } else {
        FUZZ_CHECK((size_t)len <= room);
        size_t symbols = n;
        while (symbols && in[symbols - 1] == '=')
            symbols--;
        FUZZ_CHECK((size_t)len == symbols * 6 / 8);
        char *again = malloc(mf_base64_encoded_size((size_t)len) + 1);
        FUZZ_CHECK(again != NULL);
        size_t elen = mf_base64_encode(again, out, (size_t)len,
                                       (flags & MF_BASE64_URL) | MF_BASE64_NOPAD);
        FUZZ_CHECK(elen == symbols);
        /* equal but for the stray low bits of the last symbol */
        FUZZ_CHECK(elen == 0 || memcmp(again, in, elen - 1) == 0);
        free(again);
    }
    free(out);
}

static void check_hex(const char *in, size_t n)
{
    unsigned char *out = malloc(n / 2 ? n / 2 : 1);
    FUZZ_CHECK(out != NULL);
    size_t bad = (size_t)-1;
    ssize_t len = mf_hex_decode(out, in, n, &bad);
    if (len < 0) {
        FUZZ_CHECK(bad <= n);
    } else {
        FUZZ_CHECK((size_t)len * 2 == n);
        char *again = malloc(n ? n : 1);
        FUZZ_CHECK(again != NULL);
        mf_hex_encode(again, out, (size_t)len);
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(again[i] == (in[i] >= 'A' && in[i] <= 'F'
                                        ? in[i] - 'A' + 'a'
                                        : in[i]));
        free(again);
    }
    free(out);
}

/* The input as bytes: encode, decode, compare. */
static void check_round_trip(const char *in, size_t n, unsigned flags)
{
    char *enc = malloc(mf_base64_encoded_size(n) + 1);
    unsigned char *dec = malloc(mf_base64_decoded_size(n * 4 / 3 + 4));
    FUZZ_CHECK(enc && dec);
    size_t len = mf_base64_encode(enc, in, n, flags);
    size_t bad = 0;
    FUZZ_CHECK(mf_base64_decode(dec, enc, len, flags, &bad) == (ssize_t)n);
    FUZZ_CHECK(n == 0 || memcmp(dec, in, n) == 0);
    free(enc);
    free(dec);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *in = fuzz_copy(data, size);
    check_base64(in, size, 0);
    check_base64(in, size, MF_BASE64_URL);
    check_hex(in, size);
    check_round_trip(in, size, 0);
    check_round_trip(in, size, MF_BASE64_URL | MF_BASE64_NOPAD);
    free(in);
    return 0;
}
