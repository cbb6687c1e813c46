/*
 * http_compress_filter.h — the exchange's compression step: whether an
 * answer is compressed and with what (moonflow/http_compress.h says when),
 * the head's lines that follow from it, and the body compressed whole or
 * piece by piece. Internal; only http_exchange.c calls it, between the
 * handler's answer and its protocol's ops, so every protocol sends
 * compressed answers alike.
 *
 * The encoders and their memory come from one pool per loop (a loop key,
 * made at the first compressed answer, freed with the loop), and the
 * pieces of a stream are compressed into one scratch buffer per loop: a
 * warm loop mallocs nothing per compressed answer but the whole body's
 * output, and nothing at all for an answer that is not compressed.
 *
 * Ownership: the answer's fields are the exchange's, read during the call
 * (lines may be grown in place: the loop's buffer memory). An encoder is
 * the exchange's from open to close. Loop thread only.
 */
#ifndef MF_HTTP_COMPRESS_FILTER_H
#define MF_HTTP_COMPRESS_FILTER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/buf.h"
#include "http_compress.h"
#include "moonflow/http_parser.h"

/* An answer as the step sees it. */
typedef struct mf_http_compress_answer {
    const mf_http_compress_config_t *config;
    const mf_http_request_t *req;
    int status;
    const mf_buf_t *lines; /* "Name: value\r\n" each */
    const char *const *static_lines;
    const uint16_t *static_lens;
    unsigned nstatic;
} mf_http_compress_answer_t;

/* The coding for the answer (identity: not compressed) and, in *vary,
 * whether its head needs Vary: Accept-Encoding (the client's
 * Accept-Encoding decided, and no Vary line names it or "*"). The head's
 * lines are read in one pass. known_length: length is the body's (else
 * it streams). Reads only. */
mf_http_coding_t mf__http_compress_choose(const mf_http_compress_answer_t *a,
                                          bool known_length, uint64_t length,
                                          bool *vary);

/* The head's lines for a choice: Vary: Accept-Encoding (vary),
 * Content-Encoding and the ETag weakened (coding). 0 or MF_ENOMEM (lines
 * may have grown). */
int mf__http_compress_head(mf_loop_t *loop, mf_buf_t *lines,
                           mf_http_coding_t coding, bool vary);

/* body[0..len) compressed whole into out (empty, the loop's buffer
 * memory; released by the caller or taken by a protocol). 0 or MF_ENOMEM
 * (out released). */
int mf__http_compress_whole(mf_loop_t *loop,
                            const mf_http_compress_config_t *config,
                            mf_http_coding_t coding, const void *body,
                            size_t len, mf_buf_t *out);

/* A stream's encoder; NULL when out of memory. */
mf_http_encoder_t *mf__http_compress_open(mf_loop_t *loop,
                                          const mf_http_compress_config_t *c,
                                          mf_http_coding_t coding);
/* One piece, flushed (or with finish, the end of the stream): *out points
 * to its compressed bytes, valid until the next call on this loop. 0 or
 * MF_ENOMEM. */
int mf__http_compress_piece(mf_loop_t *loop, mf_http_encoder_t *enc,
                            const void *data, size_t len, bool finish,
                            const char **out, size_t *out_len);
void mf__http_compress_close(mf_http_encoder_t *enc);

#endif /* MF_HTTP_COMPRESS_FILTER_H */
