/*
 * fuzz_mysql_url.c — libFuzzer target for the MySQL client's URL parser
 * (mf__mysql_endpoint_parse, core/mysql/mysql_url.c).
 *
 * Each input, up to its first NUL, is a URL. Whatever it holds, the parser
 * must not crash, leak or read past the string (ASan), and must give the
 * same verdict and fields twice. An accepted URL's endpoint must make
 * sense (a port unless a socket, a socket path that starts with '/', ssl
 * within its modes, a CA only with verify_*), and writing the endpoint back
 * as a canonical URL (every byte of the user, password, database, path and
 * query values %-encoded unless unreserved) must parse to the very same
 * endpoint: nothing the parser keeps depends on how it was spelled.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_assert.h"
#include "mysql/mysql_int.h"

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int same_endpoint(const mf_mysql_endpoint_t *a,
                         const mf_mysql_endpoint_t *b)
{
    return strcmp(a->host, b->host) == 0 && a->port == b->port &&
           same_str(a->socket_path, b->socket_path) &&
           same_str(a->user, b->user) && same_str(a->password, b->password) &&
           same_str(a->db, b->db) && same_str(a->charset, b->charset) &&
           same_str(a->ca, b->ca) && a->ssl == b->ssl &&
           a->connect_timeout_ms == b->connect_timeout_ms;
}

/* ---- the canonical URL ---------------------------------------------------- */

typedef struct out {
    char buf[8192];
    size_t n;
} out_t;

static void put(out_t *o, const char *s)
{
    size_t n = strlen(s);
    FUZZ_CHECK(o->n + n < sizeof o->buf);
    memcpy(o->buf + o->n, s, n + 1);
    o->n += n;
}

/* s with every byte but letters, digits and keep %-encoded. */
static void put_encoded(out_t *o, const char *s, const char *keep)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char one[4] = {(char)c, 0};
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || strchr(keep, c))) {
            one[0] = '%';
            one[1] = hex[c >> 4];
            one[2] = hex[c & 15];
        }
        put(o, one);
    }
}

static void put_authority(out_t *o, const mf_mysql_endpoint_t *ep)
{
    char port[16];
    if (ep->socket_path) {
        put(o, "unix:");
        put_encoded(o, ep->socket_path, "/._-");
        if (ep->db) {
            put(o, ":/");
            put_encoded(o, ep->db, "._-");
        }
        return;
    }
    int bracket = strchr(ep->host, ':') != NULL;
    put(o, bracket ? "[" : "");
    put(o, ep->host);
    snprintf(port, sizeof port, "%s:%u", bracket ? "]" : "", ep->port);
    put(o, port);
    if (ep->db) {
        put(o, "/");
        put_encoded(o, ep->db, "._-");
    }
}

static const char *const ssl_modes[] = {"disabled", "preferred", "required",
                                        "verify_ca", "verify_identity"};

static void canonical(out_t *o, const mf_mysql_endpoint_t *ep)
{
    o->n = 0;
    o->buf[0] = 0;
    put(o, "mysql://");
    if (ep->user) {
        put_encoded(o, ep->user, "._-");
        if (ep->password) {
            put(o, ":");
            put_encoded(o, ep->password, "._-");
        }
        put(o, "@");
    }
    put_authority(o, ep);
    put(o, "?charset=");
    put_encoded(o, ep->charset, "._-");
    put(o, "&ssl=");
    put(o, ssl_modes[ep->ssl]);
    if (ep->ca) {
        put(o, "&ca=");
        put_encoded(o, ep->ca, "/._-");
    }
    if (ep->connect_timeout_ms) {
        char t[32];
        snprintf(t, sizeof t, "&connect_timeout=%u", ep->connect_timeout_ms);
        put(o, t);
    }
}

/* ---- the target ----------------------------------------------------------- */

static void check_sense(const mf_mysql_endpoint_t *ep)
{
    FUZZ_CHECK(ep->charset && *ep->charset);
    FUZZ_CHECK(ep->ssl <= MF_MYSQL_SSL_VERIFY_IDENTITY);
    FUZZ_CHECK(!ep->ca || ep->ssl >= MF_MYSQL_SSL_VERIFY_CA);
    FUZZ_CHECK(!ep->user || *ep->user);
    if (ep->socket_path) {
        FUZZ_CHECK(ep->socket_path[0] == '/' && ep->host[0] == 0);
    } else {
        FUZZ_CHECK(ep->host[0] != 0 && ep->port != 0);
        FUZZ_CHECK(strlen(ep->host) <= MF_DNS_MAX_HOST);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = strnlen((const char *)data, size);
    char *url = malloc(n + 1); /* exact size: ASan sees a read past it */
    FUZZ_CHECK(url != NULL);
    memcpy(url, data, n);
    url[n] = 0;
    mf_mysql_endpoint_t a, b;
    int rc = mf__mysql_endpoint_parse(&a, url);
    int again = mf__mysql_endpoint_parse(&b, url);
    FUZZ_CHECK(rc == 0 || rc == MF_EINVAL);
    FUZZ_CHECK(rc == again);
    if (rc == 0) {
        FUZZ_CHECK(same_endpoint(&a, &b));
        check_sense(&a);
        static out_t o;
        canonical(&o, &a);
        mf__mysql_endpoint_free(&b);
        FUZZ_CHECK(mf__mysql_endpoint_parse(&b, o.buf) == 0);
        FUZZ_CHECK(same_endpoint(&a, &b));
    }
    mf__mysql_endpoint_free(&a);
    mf__mysql_endpoint_free(&b);
    free(url);
    return 0;
}
