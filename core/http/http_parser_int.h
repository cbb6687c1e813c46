/*
 * http_parser_int.h — what the HTTP parser's files share, and nothing else
 * includes: the inline authority check and the pieces of a head common to
 * requests and responses (finding its end, the version, the field lines and
 * the framing fields noted from them).
 * The byte classes and ASCII helpers are in http_chars.h (a leaf, shared
 * with http_uri.c).
 *
 * Owned here: the inline authority check. The head functions are in
 * http_head_parser.c, the request line in http_request_line.h, the judge of
 * an arriving head in http_request_prefix.c. Callers: the parser's files
 * only (http_head_parser.c, http_request_parser.c, http_request_prefix.c,
 * http_response_parser.c, http_chunked.c); everything else uses
 * moonflow/http_parser.h.
 */
#ifndef MF_HTTP_PARSER_INT_H
#define MF_HTTP_PARSER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "http/http_chars.h"
#include "http/http_uri.h"
#include "moonflow/http_parser.h"

/*
 * Whether s[0..n) is an authority (mf_http_parse_authority, http_uri.c).
 * The shape of nearly every Host, a reg-name of plain bytes and a port
 * below 60000, is judged here, inline; anything else (an IP literal, a
 * %XX, a higher or longer port, every bad value) by the full function. s[n]
 * must be a byte that ends both loops, neither a reg-name byte nor a digit: in
 * a head it is the OWS or CR after a field value, or the '/', '?' or SP after a
 * target's authority, so the loops need no length check.
 */
static inline bool mf__http_is_authority(const char *s, size_t n)
{
    size_t i = 0, digits;
    /* Two bytes a step: s[i + 1] exists once s[i] is not s[n]. */
    while (mf__is(s[i], MF__C_HOST) && mf__is(s[i + 1], MF__C_HOST))
        i += 2;
    i += mf__is(s[i], MF__C_HOST);
    if (i == n)
        return n != 0;
    if (i != 0 && s[i] == ':') {
        for (digits = ++i; mf__is_digit(s[i]); i++)
            ;
        /* Up to 59999 by the digit count and the first digit alone. */
        if (i == n && (i - digits < 5 || (i - digits == 5 && s[digits] < '6')))
            return true;
    }
    return mf__http_authority_valid(s, n);
}

/* For a function that has a second caller out of line but must stay inlined
 * in the one-pass parse of a complete head, the hot path (GCC and Clang
 * stop inlining a static function once it has two callers). */
#define MF__HOT_INLINE inline __attribute__((always_inline))

/* ---- heads: what requests and responses share (http_head_parser.c) --- */

extern const mf_http_limits_t mf__http_default_limits;

enum { MF__HEAD_MORE, MF__HEAD_DONE, MF__HEAD_BARE_LF };

/*
 * Looks for the CRLF CRLF that ends a head starting at buf[start], among the
 * LFs in buf[from..to). The terminator ends in an LF, so LFs before `from`
 * (searched by an earlier call) need no second look; memchr finds each LF at
 * vector speed. Every LF must follow a CR: a bare LF fails here, at once,
 * rather than when a blank line that an LF-only client never sends arrives.
 */
int mf__http_find_head_end(const char *buf, size_t start, size_t from,
                           size_t to, size_t *end);

/* What the framing decisions need from the field lines. */
typedef struct mf__fields {
    uint64_t content_length;
    const char *host; /* the Host field's value */
    size_t host_len;
    unsigned n_host, n_cl, n_te;
    bool host_bad;        /* a Host value that is not an authority */
    bool cl_bad;          /* a Content-Length that is not one number */
    bool te_chunked;      /* the last transfer coding so far is chunked */
    bool te_misplaced;    /* chunked followed by another coding */
    bool te_unknown;      /* a coding other than chunked: not undone */
    bool te_bad;          /* an element that is not a bare token */
    bool close;           /* Connection: close */
    bool keep_alive;      /* Connection: keep-alive */
    bool conn_upgrade;    /* Connection: upgrade */
    bool has_upgrade;     /* an Upgrade field */
    bool expect_continue; /* Expect: 100-continue */
} mf__fields_t;

/* One field line at p, which the caller knows to end in CRLF: the next
 * line, or NULL when this one is malformed (RFC 9112 §5). */
const char *mf__http_parse_field(const char *p, const char *end,
                                 mf_http_header_t *h);

/* Notes what a parsed field line says about framing (Content-Length,
 * Transfer-Encoding, Connection, Host, Expect, Upgrade) in f. */
void mf__http_note_field(mf__fields_t *f, const mf_http_header_t *h);

/*
 * Parses the field lines in [p, end), the head's final CRLF included, into
 * h[0..*count). More than `cap` fields (the smaller of the caller's array and
 * the limit) is `over`, the status a head too large fails with. Returns 0 or
 * an HTTP status.
 */
int mf__http_parse_fields(const char *p, const char *end, mf_http_header_t *h,
                          size_t cap, size_t *count, mf__fields_t *f, int over);

/* HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3), at p with at least
 * 8 bytes before end. 0 for any 1.x (minor set: 0 for 1.0, 1 for 1.1 and
 * higher); 505 for any other major version; 400 when this is not a version
 * at all. */
int mf__http_parse_version(const char *p, int *minor);

/* ---- request heads (http_request_parser.c, http_request_prefix.c) ------ */

/* Whether the framing fields noted so far rule the request out whatever
 * follows: two Hosts or a bad one, a bad Content-Length, Transfer-Encoding
 * beside Content-Length, in HTTP/1.0, with parameters or after chunked.
 * All of these are 400s. */
static inline bool mf__http_fields_refused(const mf__fields_t *f, int minor)
{
    return f->n_host > 1 || f->host_bad || f->cl_bad ||
           (f->n_te && (f->n_cl || minor == 0 || f->te_bad || f->te_misplaced));
}

/*
 * Judges a request head as far as it has arrived: buf[start..to), from byte
 * `from` on (the bytes before it were judged by an earlier call with no
 * fault found). Returns 0 while every byte seen can still begin a valid
 * head (or the head ends in [from, to)), else the status of the first byte
 * that rules it out: 400 (a byte or line end the grammar does not allow, a
 * bad request line or framing field, judged when its line ends), 505, 414
 * (the request line's byte max_request_line + 1), 431 (the head's byte
 * max_head_bytes + 1, when to goes that far). The caller's full parse of a
 * complete head fails whenever this finds a fault, so both agree.
 */
int mf__http_request_prefix(const char *buf, size_t start, size_t from,
                            size_t to, const mf_http_limits_t *lim);

#endif /* MF_HTTP_PARSER_INT_H */
