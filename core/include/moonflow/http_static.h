/*
 * moonflow/http_static.h — files answered from a folder: a static mount
 * (a URL prefix served from a root directory) and a handler's file answer.
 *
 * A root (mf_http_static_t) is a directory opened once; the caller owns
 * it (mf_http_static_open / _close) and may share it between threads: it
 * is read-only after the open. A request path is resolved beneath the root
 * and never above it: ".." segments (also as %2e%2e), a NUL (%00) and bad
 * %-escapes are a 400; a symbolic link leading out of the root is a 403
 * (openat2 with RESOLVE_BENEATH; on a kernel without it, the path is
 * checked against the root's real path); a directory is a 403 unless its
 * URL ends in "/" and it holds an index.html, which is answered (a
 * directory URL without the "/" is a 301 to it); missing files are a 404.
 * No directory is ever listed.
 *
 * The answer of a regular file (mf_http_static_answer): Content-Type from
 * /etc/mime.types (read once, at the first open), ETag
 * ("mtime-size" in hex, as nginx) and Last-Modified, Accept-Ranges;
 * If-None-Match / If-Modified-Since answer 304; Range answers 206 (one
 * range: Content-Range; several: multipart/byteranges) unless If-Range
 * does not match; a Range no byte of which exists answers 416 with
 * Content-Range: bytes * /size (no space). HEAD has the same head without
 * the body. The body goes from the file to the socket
 * (mf_http_exchange_send_file: sendfile(2) on plain HTTP/1), never whole
 * in memory; several ranges are read into the answer when together they
 * are at most MF_HTTP_STATIC_MULTI_MAX bytes, else the whole file is
 * answered (RFC 9110 §14.2 lets a server ignore a Range).
 *
 * Each serve call ends the exchange (it sends, like mf_http_exchange_send)
 * and returns the status it answered with. Right before the send it calls
 * log (when given) with the status and the body bytes announced: the last
 * moment the exchange and its request can be read (an access log line).
 */
#ifndef MF_HTTP_STATIC_H
#define MF_HTTP_STATIC_H

#include <stdint.h>
#include <sys/stat.h>

#include "common.h"
#include "http_server.h"

typedef struct mf_http_static mf_http_static_t;
typedef void (*mf_http_static_log_cb)(mf_http_exchange_t *ex, int status,
                                      uint64_t bytes, void *arg);

/* Several ranges are copied into one answer up to this many bytes. */
#define MF_HTTP_STATIC_MULTI_MAX (256 * 1024)

/* Opens dir as a root. NULL with a negative MF_E* code in *err when it is
 * not a directory that can be opened. */
MF_API mf_http_static_t *mf_http_static_open(const char *dir, int *err);
MF_API void mf_http_static_close(mf_http_static_t *root);
/* Keeps up to entries of the root's files open with their stat (a hit
 * costs a dup instead of a path lookup, an open and a stat), the least
 * recently used going first, each dropped as soon as a file watcher on the
 * root (moonflow/fswatch.h) sees it written, replaced or removed. From
 * then on the root is used on loop's thread only. Files reached through a
 * symbolic link are not kept. 0, or a negative MF_E* code (the watcher
 * could not start: inotify's limits) with the root uncached. */
MF_API int mf_http_static_cache(mf_http_static_t *root, mf_loop_t *loop,
                                size_t entries);
/* nginx's gzip_static and brotli_static: with on, a file answered for a
 * GET or HEAD whose "NAME.br" or "NAME.gz" sits beside it (a regular
 * file) is answered with that sibling as it is when the request's
 * Accept-Encoding takes its coding (q-values, br over gzip at equal q):
 * Content-Encoding names it, Content-Type is the file's, ETag,
 * Last-Modified and ranges are the sibling's; every answer of a file with
 * a sibling says Vary: Accept-Encoding. Off by default (it costs two
 * opens per file answered). */
MF_API void mf_http_static_precompressed(mf_http_static_t *root, bool on);
/* The root's directory as opened. */
MF_API const char *mf_http_static_dir(const mf_http_static_t *root);

/* Answers ex with the file at path[0..len) beneath root: a URL path
 * ("/css/a.css", %-encoded as it came, no query) taken relative to the
 * root. GET and HEAD only: another method is a 405 with Allow. */
MF_API int mf_http_static_serve(const mf_http_static_t *root,
                                mf_http_exchange_t *ex, const char *path,
                                size_t len, mf_http_static_log_cb log,
                                void *arg);

/* Answers ex with the file at file (a path of the file system, NUL
 * terminated, not decoded) as resolved beneath root when root is given
 * (a path leading out of it is a 403), or as is (absolute, or relative to
 * the working directory) when root is NULL: the handler's own choice, not
 * checked against any folder. For any method (304s for GET and HEAD,
 * ranges for GET). type: the Content-Type; NULL: by the extension; "":
 * none added (the caller added its own; several ranges are then answered
 * with the whole file, since the parts' type is unknown). */
MF_API int mf_http_static_serve_file(const mf_http_static_t *root,
                                     mf_http_exchange_t *ex, const char *file,
                                     const char *type,
                                     mf_http_static_log_cb log, void *arg);

/* The Content-Type of a file name by its extension (/etc/mime.types);
 * "application/octet-stream" when none is known. */
MF_API const char *mf_http_static_mime_type(const char *name, size_t len);

#endif /* MF_HTTP_STATIC_H */
