/*
 * http_compress.h — the codings themselves: gzip and brotli encoders over
 * caller buffers, drawn from a pool, and the Accept-Encoding chooser
 * (moonflow/http_compress.h). Internal. Pure: no I/O, no loop; the
 * exchange's compression step (http_compress_filter.c) drives it, the
 * unit tests and the fuzz target use it alone.
 *
 * Memory: a gzip encoder is zlib's deflate with windowBits 15 + 16 (the
 * gzip wrapper) and memLevel 8, zlib's own defaults: 2^(15+2) + 2^(8+9)
 * = 256 KiB of window and hash per encoder, the least that keeps zlib's
 * ratio on pages over 32 KiB (windowBits 9 would cut it to 8 KiB, but
 * text compresses worse once matches cannot reach 32 KiB back). A brotli
 * encoder takes lgwin 18 (a 256 KiB window, not the library's 4 MiB) and
 * at quality 4 about 1.2 MiB all told (measured by the unit test through
 * the pool's accounting). A pool keeps at most MF_HTTP_ENCODERS_IDLE
 * idle encoders (a gzip one with its 256 KiB: reset, not made again) and
 * MF_HTTP_BLOCKS_IDLE idle library blocks of at most
 * MF_HTTP_BLOCKS_IDLE_BYTES in all (brotli's: two or three encoders'
 * worth), and frees the rest: beyond the answers being compressed, a
 * loop holds at most about 6 MiB for compression.
 *
 * Ownership: the caller creates and destroys a pool (one per loop: no
 * lock); an encoder belongs to its pool and goes back to it with
 * mf__http_encoder_close. Every library allocation goes through the pool
 * (zalloc/zfree, brotli's alloc_func), so a warm pool mallocs nothing per
 * response.
 */
#ifndef MF_HTTP_COMPRESS_INT_H
#define MF_HTTP_COMPRESS_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "moonflow/http_compress.h"
#include "moonflow/http_parser.h"

#define MF_HTTP_ENCODERS_IDLE 8
#define MF_HTTP_BLOCKS_IDLE 48
#define MF_HTTP_BLOCKS_IDLE_BYTES (4u << 20)
#define MF_HTTP_GZIP_WINDOW_BITS (15 + 16) /* 32 KiB window, gzip wrapper */
#define MF_HTTP_GZIP_MEM_LEVEL 8
#define MF_HTTP_BROTLI_LGWIN 18

typedef struct mf_http_compress_pool mf_http_compress_pool_t;
typedef struct mf_http_encoder mf_http_encoder_t;

/* NULL when out of memory. */
mf_http_compress_pool_t *mf__http_compress_pool_create(void);
/* Frees the idle encoders and blocks; every encoder must be closed. */
void mf__http_compress_pool_destroy(mf_http_compress_pool_t *pool);
/* Bytes the libraries hold now through the pool (in use or idle), and
 * of them the idle blocks'. */
size_t mf__http_compress_pool_bytes(const mf_http_compress_pool_t *pool);
size_t mf__http_compress_pool_idle_bytes(const mf_http_compress_pool_t *pool);

/* A fresh stream of coding (gzip or br) at level (gzip 1-9, brotli 0-11,
 * clamped), from the pool; NULL when out of memory. */
mf_http_encoder_t *mf__http_encoder_open(mf_http_compress_pool_t *pool,
                                         mf_http_coding_t coding, int level);
/* Back to its pool, finished or not. */
void mf__http_encoder_close(mf_http_encoder_t *enc);

typedef enum mf_http_encode_op {
    MF_HTTP_ENCODE_FLUSH, /* all input so far decodable by the client */
    MF_HTTP_ENCODE_FINISH /* and the end of the stream */
} mf_http_encode_op_t;

/* The least room a step takes. zlib writes a flush marker of up to 6
 * bytes at each sync flush, and one that does not fit is written again at
 * the next call: with less room than that, a flush would never end. */
#define MF_HTTP_ENCODE_MIN_ROOM 16

/* One step: takes input from in[0..in_len) (*consumed of it) and writes
 * compressed bytes to out[0..cap) (*written of them). Returns 0 when done
 * (all input taken and flushed, or finished), 1 when out is full (call
 * again with the rest of the input and more room), MF_EINVAL when the
 * stream was finished already, cap is below MF_HTTP_ENCODE_MIN_ROOM or the
 * library failed. */
int mf__http_encoder_step(mf_http_encoder_t *enc, const void *in, size_t in_len,
                          size_t *consumed, void *out, size_t cap,
                          size_t *written, mf_http_encode_op_t op);

/* Room that usually takes a flush or finish of len input bytes in one
 * step (a guess, not a bound: the step says when it needs more). */
size_t mf__http_encode_room(size_t len);

/* mf_http_accept_encoding over every Accept-Encoding field line of a
 * request's headers, read as one list (RFC 9110 §5.3); identity when
 * there is none. */
mf_http_coding_t mf__http_accept_encoding_fields(const mf_http_header_t *h,
                                                 size_t n, unsigned offered);

/* Whether a Content-Type value's media type (before any ';', without
 * case or surrounding blanks) is one of config's types. */
bool mf__http_compress_type_listed(const mf_http_compress_config_t *config,
                                   const char *value, size_t len);

#endif /* MF_HTTP_COMPRESS_INT_H */
