/*
 * decode_check.h — the decoders that check our encoders: zlib's inflate
 * (gzip wrapper) and libbrotli's decoder, fed the compressed stream in
 * the pieces it was sent in. Shared by test_http_compress.c and the
 * fuzz target fuzz_http_compress.c. Header-only; the caller owns every
 * buffer.
 */
#ifndef MF_SPEC_DECODE_CHECK_H
#define MF_SPEC_DECODE_CHECK_H

#include <brotli/decode.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "moonflow/http_compress.h"

typedef struct mf_decode_check {
    mf_http_coding_t coding;
    z_stream z;
    BrotliDecoderState *br;
    unsigned char *out; /* everything decoded so far */
    size_t len, cap;
    bool ended; /* the stream's end was seen */
    bool failed;
} mf_decode_check_t;

static inline bool mf_decode_check_init(mf_decode_check_t *d,
                                        mf_http_coding_t coding,
                                        unsigned char *out, size_t cap)
{
    memset(d, 0, sizeof(*d));
    d->coding = coding;
    d->out = out;
    d->cap = cap;
    if (coding == MF_HTTP_CODING_GZIP)
        return inflateInit2(&d->z, 15 + 16) == Z_OK;
    d->br = BrotliDecoderCreateInstance(NULL, NULL, NULL);
    return d->br != NULL;
}

/* Feeds one piece of the compressed stream; everything it holds is
 * decoded at once (a flushed piece must not wait for the next). */
static inline void mf_decode_check_feed(mf_decode_check_t *d, const void *data,
                                        size_t len)
{
    if (d->failed)
        return;
    if (d->coding == MF_HTTP_CODING_GZIP) {
        d->z.next_in = (Bytef *)(uintptr_t)data;
        d->z.avail_in = (uInt)len;
        while (d->z.avail_in && !d->ended) {
            d->z.next_out = d->out + d->len;
            d->z.avail_out = (uInt)(d->cap - d->len);
            int rc = inflate(&d->z, Z_SYNC_FLUSH);
            d->len = d->cap - d->z.avail_out;
            if (rc == Z_STREAM_END)
                d->ended = true;
            else if (rc != Z_OK || d->len == d->cap) {
                d->failed = true;
                return;
            }
        }
        if (d->z.avail_in) /* bytes after the end */
            d->failed = true;
        return;
    }
    const uint8_t *in = data;
    size_t avail_in = len;
    for (;;) {
        uint8_t *next_out = d->out + d->len;
        size_t avail_out = d->cap - d->len;
        BrotliDecoderResult rc = BrotliDecoderDecompressStream(
            d->br, &avail_in, &in, &avail_out, &next_out, NULL);
        d->len = d->cap - avail_out;
        if (rc == BROTLI_DECODER_RESULT_SUCCESS) {
            d->ended = true;
            if (avail_in)
                d->failed = true;
            return;
        }
        if (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT)
            return;
        if (rc != BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT || d->len == d->cap) {
            d->failed = true;
            return;
        }
    }
}

static inline void mf_decode_check_close(mf_decode_check_t *d)
{
    if (d->coding == MF_HTTP_CODING_GZIP)
        inflateEnd(&d->z);
    else
        BrotliDecoderDestroyInstance(d->br);
}

#endif /* MF_SPEC_DECODE_CHECK_H */
