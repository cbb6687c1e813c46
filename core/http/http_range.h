/*
 * http_range.h — the request fields a file answer depends on, read as
 * RFC 9110 writes them: Range (§14.2), If-None-Match (§13.1.2),
 * If-Modified-Since (§13.1.3), If-Range (§13.1.5), and the validators a
 * file answer carries (an ETag made of the modification time and the size,
 * as nginx makes it; Last-Modified as an HTTP-date). Internal.
 *
 * Pure functions over caller buffers: no I/O, no allocation, nothing kept.
 * Field values are (pointer, length) and need not end in NUL.
 */
#ifndef MF_HTTP_RANGE_H
#define MF_HTTP_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Ranges one request may ask for; a Range with more is ignored (the whole
 * representation is answered, as RFC 9110 §14.2 allows). */
#define MF_HTTP_RANGES_MAX 16

/* mf__http_range_parse's answers besides a count of ranges. */
#define MF_HTTP_RANGE_IGNORE 0         /* answer the whole representation */
#define MF_HTTP_RANGE_UNSATISFIABLE -1 /* 416, Content-Range: bytes * /size */

/* One satisfiable range: bytes first..last, both included. */
typedef struct mf_http_range {
    uint64_t first, last;
} mf_http_range_t;

/* Reads a Range field value for a representation of size bytes into
 * out[0..MF_HTTP_RANGES_MAX). Returns the number of satisfiable ranges
 * (each clamped to the size, in the order asked), MF_HTTP_RANGE_IGNORE for
 * a value to ignore (another unit, bad syntax, too many ranges), or
 * MF_HTTP_RANGE_UNSATISFIABLE when the syntax is good and no range
 * overlaps the representation. */
int mf__http_range_parse(const char *value, size_t len, uint64_t size,
                         mf_http_range_t *out);

/* The ETag of a file: "\"<mtime hex>-<size hex>\"" (nginx's form). Writes
 * at most cap bytes with a NUL; returns the length. */
size_t mf__http_etag_format(char *out, size_t cap, time_t mtime, uint64_t size);

/* If-None-Match: whether the field's list ("*" or entity-tags) matches
 * etag by the weak comparison (a W/ prefix on either side is ignored). A
 * malformed list matches nothing. */
bool mf__http_etag_list_match(const char *value, size_t len, const char *etag,
                              size_t etag_len);

/* Reads an HTTP-date in any of the three forms (IMF-fixdate, RFC 850,
 * asctime). Returns true with the time in *t, false for anything else
 * (the field is then ignored, RFC 9110 §13.1.3). */
bool mf__http_date_parse(const char *value, size_t len, time_t *t);

/* Formats t as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", 29
 * bytes and a NUL: cap >= 30). Returns the length. */
size_t mf__http_date_format(char *out, size_t cap, time_t t);

/* If-Range: whether a Range may be honoured. The value is a strong ETag
 * (compared strongly with etag; a weak one never matches) or an HTTP-date
 * (matching when it equals the modification time). */
bool mf__http_if_range_match(const char *value, size_t len, const char *etag,
                             size_t etag_len, time_t mtime);

#endif /* MF_HTTP_RANGE_H */
