/*
 * moonflow/codec.h — base64 (RFC 4648 §4 and §5) and hex, both ways, into
 * the caller's memory. Pure functions: no allocation, no state, any
 * thread.
 *
 * Decoders are strict about the alphabet and lenient about padding:
 * padding may be present (then it must be right: at the end, making the
 * length a multiple of 4) or absent; whitespace, line breaks and the other
 * alphabet's letters are errors (the index of the first bad byte is
 * given), as is a length that leaves 6 bits over. Bits left over in the
 * last symbol are ignored.
 */
#ifndef MOONFLOW_CODEC_H
#define MOONFLOW_CODEC_H

#include <stddef.h>
#include <sys/types.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

/* Flags of the base64 calls. */
#define MF_BASE64_URL 1u   /* '-' and '_' for '+' and '/' (RFC 4648 §5) */
#define MF_BASE64_NOPAD 2u /* encode: no '=' at the end */

/* Bytes the encoding of n bytes takes at most (with padding). */
static inline size_t mf_base64_encoded_size(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Bytes the decoding of n base64 bytes takes at most. */
static inline size_t mf_base64_decoded_size(size_t n)
{
    return n / 4 * 3 + 2;
}

/* Writes the encoding of in[0..n) to out (mf_base64_encoded_size(n) bytes
 * of room; no NUL). Returns the bytes written. */
MF_API size_t mf_base64_encode(char *out, const void *in, size_t n,
                               unsigned flags);

/* Decodes in[0..n) into out (mf_base64_decoded_size(n) bytes of room).
 * Returns the bytes written, or -1 with *bad set to the index of the first
 * byte that cannot be there (n when the input ends too early). Only
 * MF_BASE64_URL matters among the flags. */
MF_API ssize_t mf_base64_decode(void *out, const char *in, size_t n,
                                unsigned flags, size_t *bad);

/* Lowercase hex of in[0..n): 2n bytes to out (no NUL). */
MF_API void mf_hex_encode(char *out, const void *in, size_t n);

/* Decodes hex (either case) into out (n / 2 bytes of room). Returns the
 * bytes written, or -1 with *bad at the first byte that is not a hex digit
 * (n for an odd length). */
MF_API ssize_t mf_hex_decode(void *out, const char *in, size_t n, size_t *bad);

MF_EXTERN_C_END

#endif
