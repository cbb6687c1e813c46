/*
 * moonflow/http_parser.h — HTTP/1.1 message parsing (RFC 9110/9112): pure
 * functions over caller buffers. No I/O, no allocation, no global state.
 *
 * Heads are parsed in place: every pointer in the result points into the
 * caller's buffer (except the "/" of an absolute-form target without a
 * path), which must stay unchanged while the result is used. Bytes may
 * arrive in any split: call again with the longer buffer; the head parsers
 * return MF_HTTP_INCOMPLETE until the blank line has arrived (they re-scan
 * from the start, which keeps them stateless; `*scanned` lets the caller
 * skip bytes already looked at). The request parser also judges the bytes
 * of an incomplete head as they arrive and fails at the first one that no
 * valid head can contain, so a bad request is answered at once, not when
 * its blank line (or the header timeout) comes; the answer is the same for
 * every split of the same bytes.
 *
 * Strict where ambiguity is a security risk (request smuggling, response
 * splitting): a request with both Content-Length and Transfer-Encoding, two
 * differing Content-Length values, a Transfer-Encoding other than a final
 * "chunked", obs-fold (a header line starting with SP/HTAB), a bare CR or a
 * bare LF as a line end, invalid token characters in the method or a header
 * name, CTL characters in a value or the target, a '#' (fragment) in the
 * target, a Host value or target authority that is not host[:port] (see
 * mf_http_parse_authority) — all fail with status 400. A transfer coding
 * other than chunked (gzip, deflate, compress ...) before the final chunked
 * fails with 501: the body is never handed on still coded.
 *
 * Threads: any (no shared state). Ownership: the caller owns every buffer
 * and every output struct, including the header array.
 */
#ifndef MOONFLOW_HTTP_PARSER_H
#define MOONFLOW_HTTP_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <strings.h>
#include <sys/types.h>

#include "common.h"

MF_EXTERN_C_BEGIN

/* Return codes of the head parsers (negative). Errors carry the HTTP status
 * a server should answer with in the result's `error_status`. */
#define MF_HTTP_INCOMPLETE (-1) /* need more bytes */
#define MF_HTTP_ERROR (-2)      /* malformed or over a limit; see status */

typedef struct mf_http_header {
    const char *name;
    size_t name_len;
    const char *value; /* leading/trailing OWS removed */
    size_t value_len;
} mf_http_header_t;

typedef struct mf_http_limits {
    size_t max_head_bytes;   /* whole head incl. request line: 431 */
    size_t max_request_line; /* request line without CRLF: 414 */
    size_t max_headers;      /* header count: 431 (also bounded by the
                                caller's array size) */
} mf_http_limits_t;

/* nginx-like defaults: 8 KiB head, 8 KiB line, 100 headers. */
#define MF_HTTP_LIMITS_DEFAULT \
    {                          \
        8192, 8192, 100        \
    }

enum {
    MF_HTTP_BODY_NONE,       /* no body (no CL/TE, CL 0; 204/304/1xx/HEAD) */
    MF_HTTP_BODY_LENGTH,     /* Content-Length bytes follow */
    MF_HTTP_BODY_CHUNKED,    /* chunked transfer coding */
    MF_HTTP_BODY_UNTIL_CLOSE /* responses only: read until EOF */
};

typedef struct mf_http_request {
    const char *method;
    size_t method_len;
    const char *target; /* request-target as sent: "/p?q", "*", "http://..." */
    size_t target_len;
    const char *path; /* target up to '?'; "/" for an absolute-form target
                         without a path (RFC 9112 §3.2.2); "" for CONNECT */
    size_t path_len;
    const char *query; /* after '?', without it; NULL when absent */
    size_t query_len;
    int minor_version;         /* 0 or 1 (HTTP/1.2 and later 1.x read as 1) */
    mf_http_header_t *headers; /* in: caller's array */
    size_t num_headers;        /* in: capacity; out: count */
    /* Derived from the headers, so servers need not scan them again. */
    int body;                /* MF_HTTP_BODY_NONE / _LENGTH / _CHUNKED */
    uint64_t content_length; /* when body == MF_HTTP_BODY_LENGTH */
    bool keep_alive;         /* version default + Connection header */
    bool expect_continue;    /* Expect: 100-continue */
    bool upgrade;            /* Connection: upgrade + Upgrade header */
    const char *host;        /* absolute-form authority, else the Host value (a
                                valid authority or ""); NULL when absent */
    size_t host_len;
    int error_status; /* on MF_HTTP_ERROR: 400, 414, 431, 501, 505 */
    /* Came over HTTP/2 (then minor_version is 1); the parser sets false. */
    bool http2;
} mf_http_request_t;

/* Parses a request head from buf[0..len). Returns the head's length in bytes
 * (request line + headers + blank line) when complete, MF_HTTP_INCOMPLETE, or
 * MF_HTTP_ERROR with req->error_status set. limits may be NULL (defaults).
 * A higher minor version of HTTP/1 is read as 1.1 (RFC 9110 §2.5); another
 * major version is 505. An HTTP/1.1 request without Host is a 400 (RFC 9112
 * §3.2). Empty lines before the request line are skipped (RFC 9112 §2.2).
 * `scanned` may be NULL; otherwise it holds how many bytes were already
 * judged (0 on the first call) and is updated.
 *
 * An incomplete head fails as soon as its bytes rule it out, with the status
 * of the first byte that does: 400 for a byte or line end the grammar does
 * not allow (checked byte by byte), and when a line ends, 400/505 for its
 * request line, 400 for a framing field that refuses the request whatever
 * follows (a second Host or a bad one, a differing Content-Length,
 * Transfer-Encoding with Content-Length or in HTTP/1.0); 414 at the request
 * line's byte max_request_line + 1; 431 at the head's byte max_head_bytes +
 * 1. What needs the whole head (a missing Host, the last coding, the number
 * of fields) is judged at its blank line. */
MF_API int mf_http_parse_request(const char *buf, size_t len,
                                 mf_http_request_t *req,
                                 const mf_http_limits_t *limits,
                                 size_t *scanned);

typedef struct mf_http_response {
    int status;
    const char *reason;
    size_t reason_len;
    int minor_version;
    mf_http_header_t *headers; /* in: caller's array */
    size_t num_headers;        /* in: capacity; out: count */
    int body;                  /* MF_HTTP_BODY_* (given the request) */
    uint64_t content_length;
    bool keep_alive;
    int error_status; /* on MF_HTTP_ERROR: 502 (bad upstream answer) */
} mf_http_response_t;

/* Parses a response head. head_request: the request was HEAD (no body).
 * 1xx, 204 and 304 have no body. Without CL/TE the body runs until close
 * and keep_alive is false. Same return convention as the request parser. */
MF_API int mf_http_parse_response(const char *buf, size_t len,
                                  mf_http_response_t *resp, bool head_request,
                                  const mf_http_limits_t *limits,
                                  size_t *scanned);

/* Case-insensitive header lookup in a parsed head; NULL if absent. */
MF_API const mf_http_header_t *
mf_http_find_header(const mf_http_header_t *headers, size_t n,
                    const char *name);
/* The same with the name's length given (name holds no NUL in its first
 * len bytes): inline, with no strlen, for a name looked up on every
 * request. */
static inline const mf_http_header_t *
mf_http_find_header_n(const mf_http_header_t *headers, size_t n,
                      const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (headers[i].name_len == len &&
            strncasecmp(headers[i].name, name, len) == 0)
            return &headers[i];
    return NULL;
}

/* ---- chunked transfer coding (incremental, in place) --------------------- */

typedef struct mf_http_chunked {
    int _state;
    uint64_t _remaining; /* bytes left in the current chunk */
    size_t _digits;
    size_t _trailer_bytes;
    uint64_t max_body;   /* 0: unlimited; over it: MF_HTTP_ERROR, status 413 */
    uint64_t body_bytes; /* decoded so far */
    int error_status;    /* 400 or 413 on MF_HTTP_ERROR */
} mf_http_chunked_t;

MF_API void mf_http_chunked_init(mf_http_chunked_t *dec, uint64_t max_body);

/* Decodes buf[0..*len) in place (picohttpparser's phr_decode_chunked
 * contract), in any split of its input. On return buf[0..*len) holds the
 * data decoded by this call,
 * chunk framing removed. Returns
 *   >= 0               the chunked body (with its trailers) is complete; the
 *                      value is the number of bytes that followed it in the
 *                      input (the next pipelined message), now moved to
 *                      buf[*len .. *len + value);
 *   MF_HTTP_INCOMPLETE all input consumed; call again with more bytes;
 *   MF_HTTP_ERROR      bad chunk size/framing/trailer (400) or over
 *                      max_body (413), in dec->error_status.
 * Trailer fields are validated like header fields and skipped. Chunk
 * extensions must follow RFC 9112 §7.1.1 (";" name ["=" value], a token
 * name, a token or quoted-string value, whitespace only around ";" and
 * "="; at most 4096 bytes per line) and are skipped. Chunk sizes over 16
 * hex digits are an error. */
MF_API ssize_t mf_http_chunked_decode(mf_http_chunked_t *dec, char *buf,
                                      size_t *len);

/* ---- helpers --------------------------------------------------------- */

/* Reason phrase for a status code ("OK", "Not Found"; "" if unknown). */
MF_API const char *mf_http_reason(int status);

/* ---- URI pieces ---------------------------------------------------------- */

typedef struct mf_http_authority {
    const char *host; /* reg-name or IPv4 as sent; an IP literal with its
                         brackets ("[::1]") */
    size_t host_len;
    int port; /* 0..65535; -1 when absent or empty ("host:") */
} mf_http_authority_t;

/* Parses authority = host [":" port] as a Host field or a request target
 * carries it (RFC 3986 §3.2.2-3 without userinfo; RFC 9110 §4.2): host is
 * "[" IPv6 address or IPvFuture "]", or a non-empty reg-name of letters,
 * digits, "-._~", "!$&'()*+,;=" and %XX escapes (an IPv4 address is one);
 * port is digits only, at most 65535, and may be empty. Returns 0 with out
 * pointing into s, or -1 (out unspecified). */
MF_API int mf_http_parse_authority(const char *s, size_t len,
                                   mf_http_authority_t *out);

/* One pair of a query string, still %-encoded: pointers into the query. */
typedef struct mf_http_query_pair {
    const char *key;
    size_t key_len;
    const char *value; /* NULL when the pair has no '=' ("flag") */
    size_t value_len;
} mf_http_query_pair_t;

/* Splits the next pair off a query string ("a=1&flag&b=") at *pos, which
 * goes up to end (both may be NULL: no query), and moves *pos past it.
 * Pairs end at '&', keys at the first '='; empty pairs ("a&&b") are
 * skipped. Returns false when no pair is left. */
MF_API bool mf_http_query_next(const char **pos, const char *end,
                               mf_http_query_pair_t *pair);

/* One cookie of a Cookie header: pointers into the header's value. */
typedef struct mf_http_cookie {
    const char *name;
    size_t name_len;
    const char *value; /* without the DQUOTEs of a quoted value */
    size_t value_len;
} mf_http_cookie_t;

/* Splits the next cookie off a Cookie header's value ("a=1; b=\"2\"") at
 * *pos, up to end, and moves *pos past it. Pairs end at ';'; spaces around
 * names and values are skipped; a piece without '=' or whose name is not
 * a token is passed over (RFC 6265 §5.2). Values are taken as sent (no
 * decoding). Returns false when no cookie is left. */
MF_API bool mf_http_cookie_next(const char **pos, const char *end,
                                mf_http_cookie_t *cookie);

/* Whether v[0..n) can be a Set-Cookie value (RFC 6265 §4.1.1: visible ASCII
 * but '"', ',', ';' and '\\', optionally between DQUOTEs). Names are
 * tokens: mf_http_field_name_valid. */
MF_API bool mf_http_cookie_value_valid(const char *v, size_t n);

/* ---- multipart/form-data (RFC 7578) ---------------------------------- */

/* The boundary of a "multipart/form-data; boundary=..." Content-Type (token
 * or quoted; 1 to 70 bytes): 0 with *b pointing into type, or -1 for
 * another type or no usable boundary. */
MF_API int mf_http_multipart_boundary(const char *type, size_t n,
                                      const char **b, size_t *len);

/* One part: pointers into the body. filename NULL for a plain field; type
 * NULL when the part names none. */
typedef struct mf_http_part {
    const char *name, *filename, *type, *data;
    size_t name_len, filename_len, type_len, data_len;
} mf_http_part_t;

/* A walk over a whole body held in memory. */
typedef struct mf_http_multipart {
    const char *pos, *end, *boundary;
    size_t blen;
    unsigned parts;
    bool started, done;
} mf_http_multipart_t;

MF_API void mf_http_multipart_init(mf_http_multipart_t *mp, const char *body,
                                   size_t n, const char *boundary, size_t blen);
/* The next part: 1 (part filled), 0 after the closing delimiter, -1 for a
 * malformed body (no opening delimiter, a part without Content-Disposition
 * form-data and a name, headers or data that never end). */
MF_API int mf_http_multipart_next(mf_http_multipart_t *mp,
                                  mf_http_part_t *part);

/* Decodes %XX and (if plus_is_space) '+' in place; returns the new length or
 * -1 on a bad escape. */
MF_API ssize_t mf_http_url_decode(char *s, size_t len, bool plus_is_space);

/* Whether name[0..len) can be a field name: a non-empty token (RFC 9110
 * §5.6.2: letters, digits and !#$%&'*+-.^_`|~; no space, colon or control
 * byte). */
MF_API bool mf_http_field_name_valid(const char *name, size_t len);

/* Whether value[0..len) can be a field value: VCHAR, obs-text, SP and HTAB
 * only (RFC 9110 §5.5), so no CR, LF, NUL or other control byte. Leading
 * and trailing whitespace is not checked here: it is not part of a value,
 * and a writer trims it. */
MF_API bool mf_http_field_value_valid(const char *value, size_t len);

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_PARSER_H */
