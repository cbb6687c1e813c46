/*
 * fuzz_http_compress.c — libFuzzer target for the response encoders
 * (core/http/http_compress.c): random bodies in random pieces, each piece
 * flushed as a streamed answer's is, the last one finishing the stream.
 *
 * An input is a header of 4 bytes — the coding (gzip or br), the level,
 * the room each step gets to write into (16 to 271 bytes: the step's
 * "out is full" path runs often), a seed for the piece sizes — and then
 * the body. Checked with zlib's inflate and libbrotli's decoder, fed the
 * compressed bytes as they come out: the stream never fails to decode;
 * after every flushed piece the decoder has given back exactly the body
 * so far; after the last one the stream has ended and is the body. Every
 * encoder comes from one pool, used again by the next input, as a loop's
 * is.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../c/http/decode_check.h"
#include "fuzz_assert.h"
#include "http/http_compress.h"

static mf_http_compress_pool_t *pool;
static unsigned char decoded[1 << 17];
static unsigned char out[MF_HTTP_ENCODE_MIN_ROOM + 256];

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* One piece through the encoder, fed to the decoder as it comes out. */
static void encode_piece(mf_http_encoder_t *enc, mf_decode_check_t *d,
                         const unsigned char *in, size_t len, size_t room,
                         mf_http_encode_op_t op)
{
    int rc;
    do {
        size_t used, written;
        rc =
            mf__http_encoder_step(enc, in, len, &used, out, room, &written, op);
        FUZZ_CHECK(rc >= 0);
        FUZZ_CHECK(used <= len && written <= room);
        in += used;
        len -= used;
        mf_decode_check_feed(d, out, written);
        FUZZ_CHECK(!d->failed);
    } while (rc == 1);
    FUZZ_CHECK(len == 0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 4 || size - 4 > sizeof decoded - 1)
        return 0;
    if (!pool)
        pool = mf__http_compress_pool_create();
    FUZZ_CHECK(pool != NULL);
    mf_http_coding_t coding =
        data[0] & 1 ? MF_HTTP_CODING_BR : MF_HTTP_CODING_GZIP;
    int level = data[1] % 12; /* gzip clamps to 1..9 */
    size_t room = MF_HTTP_ENCODE_MIN_ROOM + data[2];
    unsigned seed = data[3];
    const unsigned char *body = data + 4;
    size_t n = size - 4;
    mf_http_encoder_t *enc = mf__http_encoder_open(pool, coding, level);
    FUZZ_CHECK(enc != NULL);
    mf_decode_check_t d;
    FUZZ_CHECK(mf_decode_check_init(&d, coding, decoded, sizeof decoded));
    size_t at = 0;
    do {
        seed = seed * 1103515245u + 12345u;
        size_t piece = (seed >> 16) % 700;
        size_t len = n - at < piece ? n - at : piece;
        bool last = at + len == n;
        encode_piece(enc, &d, body + at, len, room,
                     last ? MF_HTTP_ENCODE_FINISH : MF_HTTP_ENCODE_FLUSH);
        at += len;
        FUZZ_CHECK(d.len == at && memcmp(decoded, body, at) == 0);
    } while (at < n);
    FUZZ_CHECK(d.ended);
    mf_decode_check_close(&d);
    mf__http_encoder_close(enc);
    return 0;
}
