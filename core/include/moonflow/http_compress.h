/*
 * http_compress.h — response compression for the HTTP server: gzip (zlib)
 * and brotli (libbrotli), chosen by the client's Accept-Encoding and the
 * server's config.
 *
 * The server compresses an answer when its config (or the exchange's own,
 * mf_http_exchange_set_compress) has compression, the answer has a body
 * (not a HEAD request, not 1xx/204/304, not a 206 range), carries no
 * Content-Encoding yet, its Content-Type (without parameters) is one of
 * `types`, its length is at least `min_length` (a streamed answer, whose
 * length is unknown, always qualifies), and the client accepts gzip or br
 * above identity. Then Content-Encoding is added, an ETag is weakened
 * ("W/"), and the length is that of the compressed body; a streamed answer
 * is compressed piece by piece, each piece flushed so the stream stays
 * live. Whenever the client's Accept-Encoding decided (the type and length
 * qualified), `Vary: Accept-Encoding` is added, compressed or not.
 *
 * Ownership: the config and its strings are the caller's and must outlive
 * every server (or exchange) that points to them. Threads: read-only once
 * a server runs, so workers share one.
 */
#ifndef MOONFLOW_HTTP_COMPRESS_H
#define MOONFLOW_HTTP_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "common.h"

MF_EXTERN_C_BEGIN

#define MF_HTTP_COMPRESS_MAX_TYPES 32

typedef struct mf_http_compress_config {
    /* Media types compressed ("text/html"), compared without case and
     * without the value's parameters; at most MF_HTTP_COMPRESS_MAX_TYPES. */
    const char *const *types;
    unsigned ntypes;
    size_t min_length; /* bytes; default 1024 */
    int level;         /* gzip, 1 to 9; default 6 */
    bool brotli;       /* offer br too; default true */
    int brotli_level;  /* 0 to 11; default 4 */
} mf_http_compress_config_t;

/* The defaults above, with types: text/html, text/plain, text/css,
 * text/xml, text/javascript, application/javascript, application/json,
 * application/xml, image/svg+xml (nginx's gzip_types and what sites add to
 * it). */
MF_API void mf_http_compress_config_init(mf_http_compress_config_t *config);

/* The content codings a server can apply. */
typedef enum mf_http_coding {
    MF_HTTP_CODING_IDENTITY = 0,
    MF_HTTP_CODING_GZIP = 1,
    MF_HTTP_CODING_BR = 2
} mf_http_coding_t;

/* The coding to answer with, given the value of a request's
 * Accept-Encoding (RFC 9110 §12.5.3) and the codings offered (a mask of
 * 1 << MF_HTTP_CODING_GZIP, 1 << MF_HTTP_CODING_BR). Names compare
 * without case (x-gzip is gzip); "*" stands for every coding not named;
 * q=0 refuses; the highest q wins, a coding over identity at equal q and
 * br over gzip at equal q. Identity not named counts below every coding
 * the client accepts (unless "*;q=0" or "identity;q=0" refuse it, when
 * the server still answers identity if nothing else is acceptable).
 * Malformed members are skipped; value NULL (no field) answers identity.
 * The server reads every Accept-Encoding field line of a request as one
 * list.
 * Pure: reads value[0..len) only. */
MF_API mf_http_coding_t mf_http_accept_encoding(const char *value, size_t len,
                                                unsigned offered);

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_COMPRESS_H */
