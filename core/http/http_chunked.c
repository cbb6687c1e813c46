/*
 * http_chunked.c — the chunked transfer coding (RFC 9112 §7.1), decoded
 * incrementally and in place for request and response bodies alike; the
 * contract is mf_http_chunked_decode in moonflow/http_parser.h.
 *
 * A byte-at-a-time state machine reads the framing and a memmove moves the
 * data, so the decoder accepts any split of its input. Trailer fields are
 * checked like header fields (byte classes of http_parser_int.h) and
 * dropped.
 */
#include "http/http_parser_int.h"

/*
 * chunked-body = *chunk last-chunk trailer-section CRLF (RFC 9112 §7.1). The
 * states follow the grammar; MF__CH_DATA is the only one that is not read a
 * byte at a time. The chunk-ext states (RFC 9112 §7.1.1):
 *   chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 *   chunk-ext-name = token; chunk-ext-val = token / quoted-string
 */
enum {
    MF__CH_SIZE,           /* chunk-size: 1 to 16 HEXDIG */
    MF__CH_EXT_BWS,        /* BWS before a ';' */
    MF__CH_EXT_NAME_BWS,   /* BWS after the ';', before the name */
    MF__CH_EXT_NAME,       /* the name */
    MF__CH_EXT_NAME_END,   /* BWS after the name: '=' or ';' next */
    MF__CH_EXT_VALUE_BWS,  /* BWS after the '=' */
    MF__CH_EXT_TOKEN,      /* a token value */
    MF__CH_EXT_QUOTED,     /* a quoted-string value, after its '"' */
    MF__CH_EXT_QUOTED_BSL, /* the byte after a '\\' in it */
    MF__CH_EXT_QUOTED_END, /* after its closing '"' */
    MF__CH_SIZE_LF,        /* LF ending the size line */
    MF__CH_DATA,           /* chunk-data, _remaining bytes left */
    MF__CH_DATA_CR,        /* CRLF after the data */
    MF__CH_DATA_LF,        /* */
    MF__CH_TRAILER,        /* start of a trailer field, or the final CRLF */
    MF__CH_TRAILER_NAME,   /* field-name up to ':' */
    MF__CH_TRAILER_VALUE,  /* field-value up to CR */
    MF__CH_TRAILER_LF,     /* LF ending a trailer field */
    MF__CH_END_LF,         /* LF of the final CRLF */
    MF__CH_DONE,
    MF__CH_ERROR
};

/* Bounds on what is skipped rather than returned, so a peer cannot keep the
 * decoder busy without sending body bytes: the bytes after a chunk-size on
 * one size line (its extensions), and the whole trailer section.
 * _trailer_bytes counts either. */
#define MF__CHUNK_EXT_MAX 4096
#define MF__TRAILER_MAX 8192

void mf_http_chunked_init(mf_http_chunked_t *dec, uint64_t max_body)
{
    memset(dec, 0, sizeof *dec);
    dec->_state = MF__CH_SIZE;
    dec->max_body = max_body;
}

/* The size line is complete: start the data, or the trailer section after
 * the last chunk. max_body is checked before any of the data arrives. */
static int mf__chunk_begin(mf_http_chunked_t *dec)
{
    if (dec->_remaining == 0) {
        dec->_state = MF__CH_TRAILER;
        dec->_trailer_bytes = 0;
        return 0;
    }
    if (dec->max_body && dec->_remaining > dec->max_body - dec->body_bytes)
        return 413;
    dec->_state = MF__CH_DATA;
    return 0;
}

/* Enters state `to` (0: the byte is fine) or fails (400). */
static int mf__chunk_to(mf_http_chunked_t *dec, bool ok, int to)
{
    if (!ok)
        return 400;
    dec->_state = to;
    return 0;
}

/* Where a byte that may end an element of chunk-ext leads: ';' to the next
 * element, CR to the end of the line, BWS to a ';' (never to the CR: the
 * grammar has no whitespace before it). */
static int mf__chunk_ext_next(mf_http_chunked_t *dec, char c)
{
    if (c == ';')
        return mf__chunk_to(dec, true, MF__CH_EXT_NAME_BWS);
    if (c == '\r')
        return mf__chunk_to(dec, true, MF__CH_SIZE_LF);
    return mf__chunk_to(dec, mf__is_ows(c), MF__CH_EXT_BWS);
}

/* One byte of chunk-ext, in a state from MF__CH_EXT_BWS to
 * MF__CH_EXT_QUOTED_END. Returns 0 or 400. */
static int mf__chunk_ext_byte(mf_http_chunked_t *dec, char c)
{
    bool token = mf__is(c, MF__C_TOKEN), ows = mf__is_ows(c);
    int s = dec->_state;
    if (c != '\r' && ++dec->_trailer_bytes > MF__CHUNK_EXT_MAX)
        return 400;
    if (ows && (s == MF__CH_EXT_BWS || s == MF__CH_EXT_NAME_BWS ||
                s == MF__CH_EXT_NAME_END || s == MF__CH_EXT_VALUE_BWS))
        return 0;
    switch (s) {
    case MF__CH_EXT_BWS:
        return mf__chunk_to(dec, c == ';', MF__CH_EXT_NAME_BWS);
    case MF__CH_EXT_NAME_BWS:
        return mf__chunk_to(dec, token, MF__CH_EXT_NAME);
    case MF__CH_EXT_NAME:
        if (token)
            return 0;
        if (c == '=')
            return mf__chunk_to(dec, true, MF__CH_EXT_VALUE_BWS);
        return ows ? mf__chunk_to(dec, true, MF__CH_EXT_NAME_END)
                   : mf__chunk_ext_next(dec, c);
    case MF__CH_EXT_NAME_END:
        if (c == '=')
            return mf__chunk_to(dec, true, MF__CH_EXT_VALUE_BWS);
        return mf__chunk_to(dec, c == ';', MF__CH_EXT_NAME_BWS);
    case MF__CH_EXT_VALUE_BWS:
        if (c == '"')
            return mf__chunk_to(dec, true, MF__CH_EXT_QUOTED);
        return mf__chunk_to(dec, token, MF__CH_EXT_TOKEN);
    case MF__CH_EXT_TOKEN:
        return token ? 0 : mf__chunk_ext_next(dec, c);
    case MF__CH_EXT_QUOTED: /* qdtext: field-content but '"' and '\\' */
        if (c == '"')
            return mf__chunk_to(dec, true, MF__CH_EXT_QUOTED_END);
        if (c == '\\')
            return mf__chunk_to(dec, true, MF__CH_EXT_QUOTED_BSL);
        return mf__is(c, MF__C_VALUE) ? 0 : 400;
    case MF__CH_EXT_QUOTED_BSL: /* quoted-pair: HTAB, SP, VCHAR, obs-text */
        return mf__chunk_to(dec, mf__is(c, MF__C_VALUE), MF__CH_EXT_QUOTED);
    default: /* MF__CH_EXT_QUOTED_END */
        return mf__chunk_ext_next(dec, c);
    }
}

/* One byte of a size line, or of the CRLF that ends a chunk's data. Returns
 * 0 or an HTTP status; on a status the caller enters MF__CH_ERROR, so a
 * state may advance before its byte is judged. */
static int mf__chunk_size_byte(mf_http_chunked_t *dec, char c)
{
    switch (dec->_state) {
    case MF__CH_DATA_CR:
        dec->_state = MF__CH_DATA_LF;
        return c == '\r' ? 0 : 400;
    case MF__CH_DATA_LF:
        dec->_state = MF__CH_SIZE;
        dec->_digits = 0;
        dec->_trailer_bytes = 0;
        return c == '\n' ? 0 : 400;
    case MF__CH_SIZE:
        if (mf__is(c, MF__C_HEX)) {
            if (dec->_digits == 16)
                return 400;
            dec->_remaining = (dec->_remaining << 4) | mf__hex_value(c);
            dec->_digits++;
            return 0;
        }
        return dec->_digits > 0 ? mf__chunk_ext_next(dec, c) : 400;
    case MF__CH_SIZE_LF:
        return c == '\n' ? mf__chunk_begin(dec) : 400;
    default:
        return mf__chunk_ext_byte(dec, c);
    }
}

/* One byte of the trailer section; fields are checked like header fields
 * (no obs-fold, token names, no CTL in values) and dropped. Same return
 * convention as mf__chunk_size_byte. */
static int mf__chunk_trailer_byte(mf_http_chunked_t *dec, char c)
{
    if (++dec->_trailer_bytes > MF__TRAILER_MAX)
        return 400;
    switch (dec->_state) {
    case MF__CH_TRAILER:
        dec->_state = c == '\r' ? MF__CH_END_LF : MF__CH_TRAILER_NAME;
        return c == '\r' || mf__is(c, MF__C_TOKEN) ? 0 : 400;
    case MF__CH_TRAILER_NAME:
        if (c == ':')
            dec->_state = MF__CH_TRAILER_VALUE;
        return c == ':' || mf__is(c, MF__C_TOKEN) ? 0 : 400;
    case MF__CH_TRAILER_VALUE:
        if (c == '\r')
            dec->_state = MF__CH_TRAILER_LF;
        return c == '\r' || mf__is(c, MF__C_VALUE) ? 0 : 400;
    case MF__CH_TRAILER_LF:
        dec->_state = MF__CH_TRAILER;
        return c == '\n' ? 0 : 400;
    default: /* MF__CH_END_LF */
        dec->_state = MF__CH_DONE;
        return c == '\n' ? 0 : 400;
    }
}

/* Moves as much of the current chunk's data as the input holds. */
static void mf__chunk_data(mf_http_chunked_t *dec, char *buf, size_t *in,
                           size_t *out, size_t len)
{
    size_t n = len - *in;
    if (n > dec->_remaining)
        n = (size_t)dec->_remaining;
    memmove(buf + *out, buf + *in, n);
    *in += n;
    *out += n;
    dec->_remaining -= n;
    dec->body_bytes += n;
    if (dec->_remaining == 0)
        dec->_state = MF__CH_DATA_CR;
}

ssize_t mf_http_chunked_decode(mf_http_chunked_t *dec, char *buf, size_t *len)
{
    size_t in = 0, out = 0, n = *len;
    while (in < n && dec->_state < MF__CH_DONE) {
        if (dec->_state == MF__CH_DATA) {
            mf__chunk_data(dec, buf, &in, &out, n);
            continue;
        }
        char c = buf[in++];
        int status = dec->_state < MF__CH_TRAILER
                         ? mf__chunk_size_byte(dec, c)
                         : mf__chunk_trailer_byte(dec, c);
        if (status != 0) {
            dec->_state = MF__CH_ERROR;
            dec->error_status = status;
        }
    }
    *len = out;
    if (dec->_state == MF__CH_ERROR)
        return MF_HTTP_ERROR;
    if (dec->_state != MF__CH_DONE)
        return MF_HTTP_INCOMPLETE;
    if (in < n && out < in) /* the next message moves up to the data */
        memmove(buf + out, buf + in, n - in);
    return (ssize_t)(n - in);
}
