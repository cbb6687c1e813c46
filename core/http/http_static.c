/*
 * http_static.c — files answered from a root directory (the contract is
 * moonflow/http_static.h): a request path resolved beneath the root, then
 * the file's answer (validators, conditionals, ranges) sent through the
 * exchange's public API only. Owns mf_http_static_t (the root's directory
 * descriptor and paths). May call: the exchange's public API, the range
 * and validator readers (http_range.c), the type table (http_mime.c), the
 * parser's helpers. Knows no protocol and no transport: the exchange's
 * send_file reaches the socket.
 *
 * Nothing is allocated per request: paths are decoded into a stack buffer;
 * the one file descriptor opened per request goes to the exchange, which
 * closes it once its bytes are written. Several ranges are read into the
 * exchange's body (bounded by MF_HTTP_STATIC_MULTI_MAX).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "http/http_compress.h"
#include "http/http_file_cache.h"
#include "http/http_mime.h"
#include "http/http_range.h"
#include "moonflow/error.h"
#include "moonflow/http_parser.h"
#include "moonflow/http_static.h"

struct mf_http_static {
    int dir_fd; /* O_PATH: what openat2 resolves beneath */
    char *dir;  /* as given */
    char *real; /* its real path: the fallback's prefix check */
    size_t real_len;
    mf_file_cache_t *cache; /* open files kept (mf_http_static_cache) */
    bool precompressed;     /* mf_http_static_precompressed */
};

/* Flags of every file opened: O_NONBLOCK so that a FIFO planted under the
 * root cannot block the loop (it is refused as not a regular file). */
#define MF_STATIC_OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

/* One request being answered: how, and whom to tell before the send. */
typedef struct mf_static_req {
    mf_http_exchange_t *ex;
    bool url;         /* a mount's URL path (else a handler's file name) */
    const char *type; /* Content-Type; NULL: by the name's extension */
    bool conditional; /* GET or HEAD: validators and Range apply */
    bool get;         /* GET: Range applies */
    mf_http_static_log_cb log;
    void *arg;
} mf_static_req_t;

/* The caller hears the answer's status and body bytes right before the
 * exchange ends (its memory, the request included, goes with it). */
static void mf__static_told(const mf_static_req_t *r, int status,
                            uint64_t bytes)
{
    if (r->log)
        r->log(r->ex, status, bytes, r->arg);
}

/* ---- the root -------------------------------------------------------------
 */

mf_http_static_t *mf_http_static_open(const char *dir, int *err)
{
    mf__http_mime_load();
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    char *real = fd >= 0 ? realpath(dir, NULL) : NULL;
    mf_http_static_t *root = real ? malloc(sizeof(*root)) : NULL;
    char *copy = root ? strdup(dir) : NULL;
    if (!copy) {
        *err = fd < 0 || !real ? mf_err_from_errno(errno) : MF_ENOMEM;
        if (fd >= 0)
            close(fd);
        free(real);
        free(root);
        return NULL;
    }
    root->dir_fd = fd;
    root->dir = copy;
    root->real = real;
    root->real_len = strlen(real);
    root->cache = NULL;
    return root;
}

int mf_http_static_cache(mf_http_static_t *root, mf_loop_t *loop,
                         size_t entries)
{
    int err = 0;
    if (root->cache || !entries)
        return 0;
    root->cache = mf__file_cache_create(loop, root->real, entries, &err);
    return root->cache ? 0 : err;
}

void mf_http_static_close(mf_http_static_t *root)
{
    if (!root)
        return;
    mf__file_cache_destroy(root->cache);
    close(root->dir_fd);
    free(root->dir);
    free(root->real);
    free(root);
}

void mf_http_static_precompressed(mf_http_static_t *root, bool on)
{
    root->precompressed = on;
}

const char *mf_http_static_dir(const mf_http_static_t *root)
{
    return root->dir;
}

/* ---- resolving beneath the root -------------------------------------------
 */

/* Without openat2 (kernels before 5.6): the real path of the file must lie
 * in the root's (a symbolic link out of the root resolves outside it). */
static int mf__static_open_checked(const mf_http_static_t *root,
                                   const char *rel)
{
    char full[PATH_MAX], resolved[PATH_MAX];
    int n = snprintf(full, sizeof full, "%s/%s", root->real, rel);
    if (n < 0 || (size_t)n >= sizeof full)
        return -ENAMETOOLONG;
    if (!realpath(full, resolved))
        return -errno;
    if (strncmp(resolved, root->real, root->real_len) != 0 ||
        (resolved[root->real_len] != '/' && resolved[root->real_len] != '\0'))
        return -EXDEV;
    int fd = open(resolved, MF_STATIC_OPEN_FLAGS);
    return fd >= 0 ? fd : -errno;
}

/* Opens rel beneath the root: a descriptor, or -errno (EXDEV: the path
 * leads out of the root). With RESOLVE_NO_SYMLINKS in more, a symbolic
 * link on the way is -ELOOP, and a kernel without openat2 -ENOSYS. */
static int mf__static_openat2(const mf_http_static_t *root, const char *rel,
                              uint64_t more)
{
    struct open_how how = {
        .flags = MF_STATIC_OPEN_FLAGS,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | more,
    };
    long fd = syscall(SYS_openat2, root->dir_fd, rel, &how, sizeof how);
    return fd >= 0 ? (int)fd : -errno;
}

static int mf__static_open_beneath(const mf_http_static_t *root,
                                   const char *rel)
{
    int fd = mf__static_openat2(root, rel, 0);
    return fd == -ENOSYS ? mf__static_open_checked(root, rel) : fd;
}

/* Opens name beneath the root with its stat: a descriptor the caller
 * owns, or -errno. With a cache, a hit costs a dup; a regular file
 * reached without a symbolic link is kept for the next request (through
 * a link, the watcher could not tell when its target changes). */
static int mf__static_open_stat(const mf_http_static_t *root, const char *name,
                                bool cacheable, struct stat *st)
{
    mf_file_cache_t *cache = cacheable ? root->cache : NULL;
    int fd = cache ? mf__file_cache_get(cache, name, st) : -1;
    if (fd >= 0)
        return fd;
    if (cache) {
        fd = mf__static_openat2(root, name, RESOLVE_NO_SYMLINKS);
        if (fd == -ELOOP || fd == -ENOSYS) {
            cache = NULL;
            fd = mf__static_open_beneath(root, name);
        }
    } else {
        fd = mf__static_open_beneath(root, name);
    }
    if (fd < 0)
        return fd;
    if (fstat(fd, st) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (cache && S_ISREG(st->st_mode))
        mf__file_cache_put(cache, name, fd, st);
    return fd;
}

/* Rewrites a path beneath the root in its one spelling, the watcher's: no
 * leading "/", no empty or "." segment, a trailing "/" kept. Returns
 * whether it may be cached (no ".." segment: the kernel resolves those). */
static bool mf__static_canon(char *rel)
{
    bool dir = false, plain = true;
    char *out = rel;
    for (const char *seg = rel; *seg;) {
        size_t n = strcspn(seg, "/");
        dir = seg[n] == '/';
        if (n && !(n == 1 && seg[0] == '.')) {
            if (n == 2 && seg[0] == '.' && seg[1] == '.')
                plain = false;
            if (out != rel)
                *out++ = '/';
            memmove(out, seg, n);
            out += n;
        }
        seg += n + (seg[n] == '/');
    }
    if (dir && out != rel)
        *out++ = '/';
    *out = '\0';
    return plain;
}

/* The status a failed open answers with: like nginx, a missing file is a
 * 404 and a refused one (a link out of the root, permissions) a 403. */
static int mf__static_open_status(int err)
{
    switch (err) {
    case -ENOENT:
    case -ENOTDIR:
    case -ENAMETOOLONG:
        return 404;
    case -EXDEV:
    case -ELOOP:
    case -EACCES:
    case -EPERM:
        return 403;
    default:
        return 500;
    }
}

/* Decodes a URL path into buf (NUL terminated). 0, or 400 for a bad
 * escape, a NUL, or a ".." segment (also when it came as %2e%2e). */
static int mf__static_decode(const char *path, size_t len, char *buf,
                             size_t cap)
{
    if (len >= cap)
        return 404; /* no file has a name that long */
    memcpy(buf, path, len);
    ssize_t n = mf_http_url_decode(buf, len, false);
    if (n < 0 || memchr(buf, '\0', (size_t)n))
        return 400;
    buf[n] = '\0';
    for (const char *seg = buf; *seg;) {
        size_t seg_len = strcspn(seg, "/");
        if (seg_len == 2 && seg[0] == '.' && seg[1] == '.')
            return 400;
        seg += seg_len;
        if (*seg == '/')
            seg++;
    }
    return 0;
}

/* ---- answers ---------------------------------------------------------------
 */

/* A short text answer of the server's own (errors, 416). */
static int mf__static_plain(const mf_static_req_t *r, int status,
                            const char *text)
{
    static const char type[] = "Content-Type: text/plain\r\n";
    mf_http_exchange_set_status(r->ex, status);
    mf_http_exchange_add_header_static(r->ex, type, sizeof type - 1);
    size_t len = strlen(text);
    mf__static_told(r, status, len);
    mf_http_exchange_send_body(r->ex, text, len);
    return status;
}

static int mf__static_error(const mf_static_req_t *r, int status)
{
    switch (status) {
    case 400:
        return mf__static_plain(r, 400, "400 Bad Request\n");
    case 403:
        return mf__static_plain(r, 403, "403 Forbidden\n");
    case 404:
        return mf__static_plain(r, 404, "404 Not Found\n");
    default:
        return mf__static_plain(r, 500, "500 Internal Server Error\n");
    }
}

/* The file's bytes [first, first+len) as the body, with status. */
static int mf__static_send_file(const mf_static_req_t *r, int status, int fd,
                                uint64_t first, uint64_t len)
{
    mf_http_exchange_set_status(r->ex, status);
    mf__static_told(r, status, len);
    mf_http_exchange_send_file(r->ex, fd, first, len);
    return status;
}

static void mf__static_header(mf_http_exchange_t *ex, const char *name,
                              const char *value, size_t value_len)
{
    mf_http_exchange_add_header(ex, name, strlen(name), value, value_len);
}

static const char *mf__field(const mf_http_request_t *req, const char *name,
                             size_t *len)
{
    const mf_http_header_t *h =
        mf_http_find_header(req->headers, req->num_headers, name);
    if (!h)
        return NULL;
    *len = h->value_len;
    return h->value;
}

/* RFC 9110 §13.2.2: If-None-Match, or without it If-Modified-Since. */
static bool mf__static_not_modified(const mf_http_request_t *req,
                                    const char *etag, size_t etag_len,
                                    time_t mtime)
{
    size_t len;
    const char *v = mf__field(req, "If-None-Match", &len);
    if (v)
        return mf__http_etag_list_match(v, len, etag, etag_len);
    v = mf__field(req, "If-Modified-Since", &len);
    time_t since;
    return v && mf__http_date_parse(v, len, &since) && mtime <= since;
}

/* The ranges to answer: a count (>= 1), MF_HTTP_RANGE_IGNORE or
 * MF_HTTP_RANGE_UNSATISFIABLE. */
static int mf__static_ranges(const mf_http_request_t *req, const char *etag,
                             size_t etag_len, const struct stat *st,
                             mf_http_range_t *ranges)
{
    size_t len, if_len;
    const char *v = mf__field(req, "Range", &len);
    if (!v)
        return MF_HTTP_RANGE_IGNORE;
    const char *if_range = mf__field(req, "If-Range", &if_len);
    if (if_range && !mf__http_if_range_match(if_range, if_len, etag, etag_len,
                                             st->st_mtime))
        return MF_HTTP_RANGE_IGNORE; /* changed since: the whole file */
    return mf__http_range_parse(v, len, (uint64_t)st->st_size, ranges);
}

static void mf__static_content_range(mf_http_exchange_t *ex,
                                     const mf_http_range_t *r, uint64_t size)
{
    char cr[80];
    int n = snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu",
                     (unsigned long long)r->first, (unsigned long long)r->last,
                     (unsigned long long)size);
    mf__static_header(ex, "Content-Range", cr, (size_t)n);
}

/* A part's head of a multipart/byteranges body (RFC 9110 §14.6). */
static int mf__static_part_head(char *out, size_t cap, const char *boundary,
                                const char *type, const mf_http_range_t *r,
                                uint64_t size)
{
    return snprintf(out, cap,
                    "\r\n--%s\r\nContent-Type: %s\r\nContent-Range: bytes "
                    "%llu-%llu/%llu\r\n\r\n",
                    boundary, type, (unsigned long long)r->first,
                    (unsigned long long)r->last, (unsigned long long)size);
}

/* The body's size, or 0 when over MF_HTTP_STATIC_MULTI_MAX. */
static uint64_t mf__static_multi_size(const char *boundary, const char *type,
                                      const mf_http_range_t *ranges, int n,
                                      uint64_t size)
{
    char head[512];
    uint64_t total = strlen(boundary) + 8; /* "\r\n--" B "--\r\n" */
    for (int i = 0; i < n; i++) {
        int h = mf__static_part_head(head, sizeof head, boundary, type,
                                     &ranges[i], size);
        total += (uint64_t)h + ranges[i].last - ranges[i].first + 1;
        if (total > MF_HTTP_STATIC_MULTI_MAX)
            return 0;
    }
    return total;
}

/* Several ranges as multipart/byteranges, read into the answer's body (at
 * most MF_HTTP_STATIC_MULTI_MAX bytes: page-cache reads). The boundary
 * comes from the validators and a counter: no file byte sequence is
 * likely to hold it. 0 when the body is too big (the caller answers the
 * whole file), else the status. */
static int mf__static_multipart(const mf_static_req_t *r, int fd,
                                const struct stat *st, const char *type,
                                const mf_http_range_t *ranges, int n)
{
    mf_http_exchange_t *ex = r->ex;
    static _Atomic unsigned long long counter;
    char boundary[48], head[512], ctype[96];
    snprintf(boundary, sizeof boundary, "%016llx%016llx",
             (unsigned long long)st->st_mtime ^ (unsigned long long)st->st_ino,
             ++counter);
    uint64_t size = (uint64_t)st->st_size;
    uint64_t total = mf__static_multi_size(boundary, type, ranges, n, size);
    if (!total)
        return 0;
    char chunk[8192];
    for (int i = 0; i < n; i++) {
        int h = mf__static_part_head(head, sizeof head, boundary, type,
                                     &ranges[i], size);
        mf_http_exchange_append(ex, head, (size_t)h);
        for (uint64_t at = ranges[i].first; at <= ranges[i].last;) {
            uint64_t want = ranges[i].last - at + 1;
            size_t step = want < sizeof chunk ? (size_t)want : sizeof chunk;
            ssize_t got = pread(fd, chunk, step, (off_t)at);
            if (got <= 0) { /* cut under us: not a short answer */
                close(fd);
                mf__static_told(r, 500, 0);
                mf_http_exchange_abort(ex);
                return 500;
            }
            mf_http_exchange_append(ex, chunk, (size_t)got);
            at += (uint64_t)got;
        }
    }
    int tail = snprintf(head, sizeof head, "\r\n--%s--\r\n", boundary);
    mf_http_exchange_append(ex, head, (size_t)tail);
    close(fd);
    int clen = snprintf(ctype, sizeof ctype,
                        "multipart/byteranges; boundary=%s", boundary);
    mf__static_header(ex, "Content-Type", ctype, (size_t)clen);
    mf_http_exchange_set_status(ex, 206);
    mf__static_told(r, 206, total);
    mf_http_exchange_send(ex);
    return 206;
}

/* A Range asked for: 206 with one range or several, 416, or 0 to answer
 * the whole file. */
static int mf__static_partial(const mf_static_req_t *r, int fd,
                              const struct stat *st, const char *type,
                              bool typed, const mf_http_range_t *ranges, int n)
{
    mf_http_exchange_t *ex = r->ex;
    uint64_t size = (uint64_t)st->st_size;
    if (n == MF_HTTP_RANGE_UNSATISFIABLE) {
        char cr[48];
        int len =
            snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
        mf__static_header(ex, "Content-Range", cr, (size_t)len);
        close(fd);
        return mf__static_plain(r, 416, "416 Range Not Satisfiable\n");
    }
    if (n == 1) {
        if (typed)
            mf__static_header(ex, "Content-Type", type, strlen(type));
        mf__static_content_range(ex, &ranges[0], size);
        return mf__static_send_file(r, 206, fd, ranges[0].first,
                                    ranges[0].last - ranges[0].first + 1);
    }
    if (!typed) /* the handler chose the type: it cannot frame parts */
        return 0;
    return mf__static_multipart(r, fd, st, type, ranges, n);
}

/* The answer of an open regular file: validators, then 304, a range
 * answer, or the whole file. Ends the exchange; fd goes to it. */
static int mf__static_answer(const mf_static_req_t *r, int fd,
                             const struct stat *st, const char *name)
{
    mf_http_exchange_t *ex = r->ex;
    static const char accept[] = "Accept-Ranges: bytes\r\n";
    char etag[48], date[32];
    size_t etag_len = mf__http_etag_format(etag, sizeof etag, st->st_mtime,
                                           (uint64_t)st->st_size);
    size_t date_len = mf__http_date_format(date, sizeof date, st->st_mtime);
    mf__static_header(ex, "Last-Modified", date, date_len);
    mf__static_header(ex, "ETag", etag, etag_len);
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    if (r->conditional &&
        mf__static_not_modified(req, etag, etag_len, st->st_mtime)) {
        close(fd);
        mf_http_exchange_set_status(ex, 304);
        mf__static_told(r, 304, 0);
        mf_http_exchange_send(ex);
        return 304;
    }
    mf_http_exchange_add_header_static(ex, accept, sizeof accept - 1);
    bool typed = !r->type || r->type[0];
    const char *type = r->type && r->type[0]
                           ? r->type
                           : mf_http_static_mime_type(name, strlen(name));
    if (r->get) {
        mf_http_range_t ranges[MF_HTTP_RANGES_MAX];
        int n = mf__static_ranges(req, etag, etag_len, st, ranges);
        if (n != MF_HTTP_RANGE_IGNORE) {
            int status = mf__static_partial(r, fd, st, type, typed, ranges, n);
            if (status)
                return status;
        }
    }
    if (typed)
        mf__static_header(ex, "Content-Type", type, strlen(type));
    return mf__static_send_file(r, 200, fd, 0, (uint64_t)st->st_size);
}

/* A directory asked for: its index.html when the URL ends in "/", else a
 * 301 to the URL with the "/"; without an index, a 403 (never a list). */
static int mf__static_directory(const mf_http_static_t *root,
                                const mf_static_req_t *r, char *rel, size_t cap,
                                bool cacheable)
{
    const mf_http_request_t *req = mf_http_exchange_request(r->ex);
    size_t len = strlen(rel);
    bool slash = r->url ? req->path_len && req->path[req->path_len - 1] == '/'
                        : len && rel[len - 1] == '/';
    if (!slash && !r->url)
        return mf__static_error(r, 403);
    if (!slash) {
        char location[PATH_MAX + 2];
        int n = snprintf(location, sizeof location, "%.*s/", (int)req->path_len,
                         req->path);
        if (n < 0 || (size_t)n >= sizeof location)
            return mf__static_error(r, 404);
        mf__static_header(r->ex, "Location", location, (size_t)n);
        return mf__static_plain(r, 301, "301 Moved Permanently\n");
    }
    static const char index[] = "index.html";
    if (len + sizeof index > cap)
        return mf__static_error(r, 404);
    memcpy(rel + len, index, sizeof index);
    struct stat st;
    int fd = mf__static_open_stat(root, rel, cacheable, &st);
    if (fd < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return mf__static_error(r, 403);
    }
    return mf__static_answer(r, fd, &st, index);
}

/* The siblings of rel beside it ("rel.gz", "rel.br"): each one a regular
 * file is opened into fds[coding] (st filled); the mask of those found. */
static unsigned mf__static_siblings(const mf_http_static_t *root,
                                    const char *rel, bool cacheable,
                                    int fds[3], struct stat sts[3])
{
    static const char *const ext[3] = {NULL, ".gz", ".br"};
    char name[PATH_MAX];
    size_t len = strlen(rel);
    unsigned found = 0;
    for (int c = MF_HTTP_CODING_GZIP; c <= MF_HTTP_CODING_BR; c++) {
        fds[c] = -1;
        if (len + 4 > sizeof name)
            continue;
        memcpy(name, rel, len);
        memcpy(name + len, ext[c], 4); /* with its NUL */
        int fd = mf__static_open_stat(root, name, cacheable, &sts[c]);
        if (fd >= 0 && !S_ISREG(sts[c].st_mode)) {
            close(fd);
            fd = -1;
        }
        fds[c] = fd;
        if (fd >= 0)
            found |= 1u << c;
    }
    return found;
}

/* nginx's gzip_static and brotli_static (mf_http_static_precompressed):
 * swaps *fd and *st for the sibling the client takes, if any, naming its
 * coding in Content-Encoding; a file with a sibling varies by
 * Accept-Encoding whichever is answered. */
static void mf__static_precompressed(const mf_http_static_t *root,
                                     const mf_static_req_t *r, const char *rel,
                                     bool cacheable, int *fd, struct stat *st)
{
    static const char vary[] = "Vary: Accept-Encoding\r\n";
    static const char *const names[3] = {NULL, "gzip", "br"};
    int fds[3];
    struct stat sts[3];
    unsigned found = mf__static_siblings(root, rel, cacheable, fds, sts);
    if (!found)
        return;
    mf_http_exchange_add_header_static(r->ex, vary, sizeof vary - 1);
    const mf_http_request_t *req = mf_http_exchange_request(r->ex);
    mf_http_coding_t coding =
        mf__http_accept_encoding_fields(req->headers, req->num_headers, found);
    for (int c = MF_HTTP_CODING_GZIP; c <= MF_HTTP_CODING_BR; c++) {
        if (fds[c] < 0)
            continue;
        if (c != (int)coding) {
            close(fds[c]);
            continue;
        }
        close(*fd);
        *fd = fds[c];
        *st = sts[c];
        mf__static_header(r->ex, "Content-Encoding", names[c],
                          strlen(names[c]));
    }
}

/* rel (decoded, NUL terminated, in a buffer of cap bytes) beneath root. */
static int mf__static_serve_rel(const mf_http_static_t *root,
                                const mf_static_req_t *r, char *rel, size_t cap)
{
    bool cacheable = mf__static_canon(rel);
    struct stat st;
    int fd = mf__static_open_stat(root, *rel ? rel : ".", cacheable, &st);
    if (fd < 0) {
        int status = mf__static_open_status(fd);
        if (status == 500)
            fprintf(stderr, "moonflow: static %s: %s: %s\n", root->dir, rel,
                    mf_strerror(fd));
        return mf__static_error(r, status);
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return mf__static_directory(root, r, rel, cap, cacheable);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mf__static_error(r, 403);
    }
    if (root->precompressed && r->conditional)
        mf__static_precompressed(root, r, rel, cacheable, &fd, &st);
    return mf__static_answer(r, fd, &st, rel);
}

static bool mf__method_is(const mf_http_request_t *req, const char *m)
{
    size_t n = strlen(m);
    return req->method_len == n && memcmp(req->method, m, n) == 0;
}

int mf_http_static_serve(const mf_http_static_t *root, mf_http_exchange_t *ex,
                         const char *path, size_t len,
                         mf_http_static_log_cb log, void *arg)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    bool get = mf__method_is(req, "GET");
    mf_static_req_t r = {ex, true, NULL, true, get, log, arg};
    if (!get && !mf__method_is(req, "HEAD")) {
        static const char allow[] = "Allow: GET, HEAD\r\n";
        mf_http_exchange_add_header_static(ex, allow, sizeof allow - 1);
        return mf__static_plain(&r, 405, "405 Method Not Allowed\n");
    }
    char rel[PATH_MAX];
    int status = mf__static_decode(path, len, rel, sizeof rel);
    if (status)
        return mf__static_error(&r, status);
    return mf__static_serve_rel(root, &r, rel, sizeof rel);
}

int mf_http_static_serve_file(const mf_http_static_t *root,
                              mf_http_exchange_t *ex, const char *file,
                              const char *type, mf_http_static_log_cb log,
                              void *arg)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    bool get = mf__method_is(req, "GET");
    mf_static_req_t r = {ex,  false, type, get || mf__method_is(req, "HEAD"),
                         get, log,   arg};
    if (root) {
        char rel[PATH_MAX];
        size_t len = strlen(file);
        if (len >= sizeof rel)
            return mf__static_error(&r, 404);
        memcpy(rel, file, len + 1);
        return mf__static_serve_rel(root, &r, rel, sizeof rel);
    }
    int fd = open(file, MF_STATIC_OPEN_FLAGS);
    if (fd < 0)
        return mf__static_error(&r, mf__static_open_status(-errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mf__static_error(&r, 403);
    }
    return mf__static_answer(&r, fd, &st, file);
}
