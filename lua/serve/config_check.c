/*
 * lua/serve/config_check.c — what `moonflow serve` checks once the config
 * file and the command line are merged, before any worker starts: the
 * listen address, and that the TLS certificates and keys and the explicit
 * routes' scripts are files it can read. Each message names the key (or
 * the option), the config file and the reason, so an operator's typo is
 * reported once at start, not by every worker or at the first request.
 * (Keys, types and ranges of the config file are checked as it is read:
 * config.c.)
 *
 * May call: the engine's address parser and the file system.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moonflow/dns.h>
#include <moonflow/error.h>

#include "serve.h"

int mf_serve_check_listen(const char *listen, char *why, size_t whylen)
{
    mf_sockaddr_t addr;
    if (mf_sockaddr_parse_listen(listen, &addr) == 0)
        return 0;
    snprintf(why, whylen,
             "HOST:PORT expected (a numeric IPv4 address, [IPv6], localhost, "
             "* or nothing before the colon; a port from 0 to 65535), got "
             "'%.60s'",
             listen);
    return -1;
}

#define MF__NOT_A_FILE 1

/* path is a regular file this process can read: 0, a negative MF_E* code,
 * or MF__NOT_A_FILE (a folder, a device ...). */
static int mf__check_readable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return mf_err_from_errno(errno);
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : mf_err_from_errno(errno);
    close(fd);
    return rc == 0 && !S_ISREG(st.st_mode) ? MF__NOT_A_FILE : rc;
}

/* "FILE: key: path: reason" when path cannot be read. */
static int mf__check_file(const mf_serve_config_t *c, const char *key,
                          const char *path, char *err, size_t errlen)
{
    int rc = mf__check_readable(path);
    if (rc == 0)
        return 0;
    snprintf(err, errlen, "%s%s%s: %s: %s", c->file ? c->file : "",
             c->file ? ": " : "", key, path,
             rc == MF__NOT_A_FILE ? "not a regular file" : mf_strerror(rc));
    return -1;
}

static int mf__check_tls(const mf_serve_config_t *c, char *err, size_t errlen)
{
    const mf_tls_server_config_t *tls = &c->http.tls;
    if (tls->cert_file &&
        (mf__check_file(c, "tls.cert", tls->cert_file, err, errlen) < 0 ||
         mf__check_file(c, "tls.key", tls->key_file, err, errlen) < 0))
        return -1;
    for (size_t i = 0; i < tls->sni_count; i++) {
        char key[160];
        const mf_tls_sni_t *sni = &tls->sni[i];
        snprintf(key, sizeof key, "tls.sni[%.100s].cert", sni->server_name);
        if (mf__check_file(c, key, sni->cert_file, err, errlen) < 0)
            return -1;
        snprintf(key, sizeof key, "tls.sni[%.100s].key", sni->server_name);
        if (mf__check_file(c, key, sni->key_file, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* An explicit route's script, as routes.c finds it: relative to the root
 * unless absolute. */
static int mf__check_routes(const mf_serve_config_t *c, char *err,
                            size_t errlen)
{
    for (size_t i = 0; i < c->nroutes; i++) {
        const mf_serve_route_spec_t *r = &c->routes[i];
        char path[PATH_MAX], key[160];
        int n = r->file[0] == '/'
                    ? snprintf(path, sizeof path, "%s", r->file)
                    : snprintf(path, sizeof path, "%s/%s", c->root, r->file);
        snprintf(key, sizeof key, "routes[%.100s]", r->path);
        if (n < 0 || (size_t)n >= sizeof path) {
            snprintf(err, errlen, "%s: %s: the path is too long",
                     c->file ? c->file : "", key);
            return -1;
        }
        if (mf__check_file(c, key, path, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int mf_serve_config_check(const mf_serve_config_t *c, char *err, size_t errlen)
{
    if (mf__check_tls(c, err, errlen) < 0)
        return -1;
    if (c->init && mf__check_file(c, "init", c->init, err, errlen) < 0)
        return -1;
    if (c->init_worker &&
        mf__check_file(c, "init_worker", c->init_worker, err, errlen) < 0)
        return -1;
    return mf__check_routes(c, err, errlen);
}
