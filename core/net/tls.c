/*
 * tls.c — OpenSSL contexts (server with SNI, client with verification) and
 * TLS-aware socket reads and writes.
 */
#include "tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "moonflow/common.h"
#include "moonflow/error.h"

/* ---- server ------------------------------------------------------------ */

typedef struct mf_tls_sni_ctx {
    char *name;
    SSL_CTX *ctx;
} mf_tls_sni_ctx_t;

struct mf_tls_server {
    SSL_CTX *ctx;
    mf_tls_sni_ctx_t *sni;
    size_t nsni;
};

static SSL_CTX *mf__tls_server_ctx(const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        unsigned long e = ERR_peek_last_error();
        fprintf(stderr, "moonflow: tls: %s / %s: %s\n", cert, key,
                ERR_reason_error_string(e) ? ERR_reason_error_string(e)
                                           : "unusable certificate or key");
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* SNI: switch the connection to the context whose name matches. */
static int mf__tls_servername(SSL *ssl, int *alert, void *arg)
{
    mf_tls_server_t *tls = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    (void)alert;
    if (!name)
        return SSL_TLSEXT_ERR_NOACK;
    for (size_t i = 0; i < tls->nsni; i++)
        if (strcasecmp(tls->sni[i].name, name) == 0) {
            SSL_set_SSL_CTX(ssl, tls->sni[i].ctx);
            return SSL_TLSEXT_ERR_OK;
        }
    return SSL_TLSEXT_ERR_OK; /* default certificate */
}

/* ALPN (RFC 7301): the first of ours, in our order of preference, that the
 * client offers; none in common: no ALPN in the answer (the client decides
 * whether to go on with HTTP/1.1). */
static int mf__tls_alpn_select(SSL *ssl, const unsigned char **out,
                               unsigned char *outlen, const unsigned char *in,
                               unsigned int inlen, void *arg)
{
    static const unsigned char ours[] = "\x02h2\x08http/1.1";
    unsigned char *chosen;
    (void)ssl;
    (void)arg;
    if (SSL_select_next_proto(&chosen, outlen, ours, sizeof ours - 1, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

bool mf__tls_alpn_is_h2(const SSL *ssl)
{
    const unsigned char *p = NULL;
    unsigned int len = 0;
    if (ssl)
        SSL_get0_alpn_selected(ssl, &p, &len);
    return len == 2 && p[0] == 'h' && p[1] == '2';
}

int mf__tls_server_create(const mf_tls_server_config_t *config,
                          mf_tls_server_t **out)
{
    mf_tls_server_t *tls = mf_xcalloc(1, sizeof(*tls));
    *out = NULL;
    tls->ctx = mf__tls_server_ctx(config->cert_file, config->key_file);
    if (!tls->ctx) {
        mf__tls_server_free(tls);
        return MF_ETLS;
    }
    if (config->sni_count) {
        tls->sni = mf_xcalloc(config->sni_count, sizeof(*tls->sni));
        for (size_t i = 0; i < config->sni_count; i++) {
            const mf_tls_sni_t *sni = &config->sni[i];
            tls->sni[i].ctx = mf__tls_server_ctx(sni->cert_file, sni->key_file);
            tls->sni[i].name = strdup(sni->server_name);
            tls->nsni++;
            if (!tls->sni[i].ctx || !tls->sni[i].name) {
                mf__tls_server_free(tls);
                return MF_ETLS;
            }
        }
    }
    if (config->alpn_h2) { /* SNI may switch the context: each offers it */
        SSL_CTX_set_alpn_select_cb(tls->ctx, mf__tls_alpn_select, NULL);
        for (size_t i = 0; i < tls->nsni; i++)
            SSL_CTX_set_alpn_select_cb(tls->sni[i].ctx, mf__tls_alpn_select,
                                       NULL);
    }
    SSL_CTX_set_tlsext_servername_callback(tls->ctx, mf__tls_servername);
    SSL_CTX_set_tlsext_servername_arg(tls->ctx, tls);
    *out = tls;
    return 0;
}

void mf__tls_server_free(mf_tls_server_t *tls)
{
    if (!tls)
        return;
    for (size_t i = 0; i < tls->nsni; i++) {
        SSL_CTX_free(tls->sni[i].ctx);
        free(tls->sni[i].name);
    }
    mf_free(tls->sni);
    SSL_CTX_free(tls->ctx);
    mf_free(tls);
}

SSL *mf__tls_server_ssl(mf_tls_server_t *tls, int fd)
{
    SSL *ssl = SSL_new(tls->ctx);
    if (!ssl)
        return NULL;
    SSL_set_fd(ssl, fd);
    SSL_set_accept_state(ssl);
    return ssl;
}

/* ---- client -------------------------------------------------------------- */

typedef struct mf_tls_client {
    SSL_CTX *verify_ctx;
    SSL_CTX *noverify_ctx;
    char *ca_file;
} mf_tls_client_t;

static void mf__tls_client_free(mf_loop_t *loop, void *ext)
{
    mf_tls_client_t *c = ext;
    (void)loop;
    SSL_CTX_free(c->verify_ctx);
    SSL_CTX_free(c->noverify_ctx);
    free(c->ca_file);
    mf_free(c);
}

static SSL_CTX *mf__tls_client_ctx_new(bool verify, const char *ca_file)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                         : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return ctx;
}

/* Goes after the other protocol clients, before the HTTP pools (loop.h). */
#define MF_TLS_LOOP_RANK 21
static mf_loop_key_t mf__tls_loop_key =
    MF_LOOP_KEY_INIT(MF_TLS_LOOP_RANK, mf__tls_client_free);

static SSL_CTX *mf__tls_client_ctx(mf_loop_t *loop, bool verify,
                                   const char *ca_file)
{
    mf_tls_client_t *c = mf_loop_get(loop, &mf__tls_loop_key);
    if (!c) {
        c = mf_xcalloc(1, sizeof(*c));
        mf_loop_set(loop, &mf__tls_loop_key, c);
    }
    if (!verify) {
        if (!c->noverify_ctx)
            c->noverify_ctx = mf__tls_client_ctx_new(false, NULL);
        return c->noverify_ctx;
    }
    /* A different CA file than the cached context's: rebuild it. */
    bool same_ca = (!ca_file && !c->ca_file) ||
                   (ca_file && c->ca_file && strcmp(ca_file, c->ca_file) == 0);
    if (c->verify_ctx && !same_ca) {
        SSL_CTX_free(c->verify_ctx);
        c->verify_ctx = NULL;
    }
    if (!c->verify_ctx) {
        free(c->ca_file);
        c->ca_file = ca_file ? strdup(ca_file) : NULL;
        c->verify_ctx = mf__tls_client_ctx_new(true, ca_file);
    }
    return c->verify_ctx;
}

SSL *mf__tls_client_ssl(mf_loop_t *loop, int fd, const char *host, bool verify,
                        const char *ca_file)
{
    SSL_CTX *ctx = mf__tls_client_ctx(loop, verify, ca_file);
    if (!ctx)
        return NULL;
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    SSL_set_fd(ssl, fd);
    SSL_set_connect_state(ssl);
    if (host)
        SSL_set_tlsext_host_name(ssl, host);
    if (verify && host) {
        /* Match the certificate against the host name or IP we dialled. */
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(param,
                                        X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (!X509_VERIFY_PARAM_set1_ip_asc(param, host))
            X509_VERIFY_PARAM_set1_host(param, host, 0);
    }
    return ssl;
}

/* "h2" first: the server picks; one that knows only HTTP/1.1, or no ALPN,
 * leaves the client on HTTP/1.1. */
int mf__tls_client_offer_h2(SSL *ssl)
{
    static const unsigned char protos[] = "\x02h2\x08http/1.1";
    /* SSL_set_alpn_protos returns 0 on success (unlike most of OpenSSL). */
    return SSL_set_alpn_protos(ssl, protos, sizeof protos - 1) == 0 ? 0
                                                                    : MF_ETLS;
}

/* ---- I/O ---------------------------------------------------------------- */

static int mf__tls_error(SSL *ssl, int ret)
{
    int err = SSL_get_error(ssl, ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
        return MF_EAGAIN;
    if (err == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (err == SSL_ERROR_SYSCALL && errno && errno != EAGAIN) {
        int e = mf_err_from_errno(errno);
        ERR_clear_error();
        return e;
    }
    ERR_clear_error();
    return MF_ETLS;
}

int mf__tls_handshake(SSL *ssl)
{
    int ret = SSL_do_handshake(ssl);
    if (ret == 1)
        return 0;
    int err = mf__tls_error(ssl, ret);
    return err == 0 ? MF_ETLS : err;
}

/* read/write/writev straight through syscall(2): libc's wrappers are
 * thread cancellation points and pay for switching asynchronous
 * cancellation on and off around every call (about 1% of a keep-alive
 * request's CPU); our loop threads are never canceled. */
static ssize_t mf__sys_read(int fd, void *buf, size_t len)
{
    return (ssize_t)syscall(SYS_read, fd, buf, len);
}

static ssize_t mf__sys_writev(int fd, const struct iovec *iov, int n)
{
    if (n == 1)
        return (ssize_t)syscall(SYS_write, fd, iov[0].iov_base, iov[0].iov_len);
    return (ssize_t)syscall(SYS_writev, fd, iov, n);
}

ssize_t mf__sock_read(int fd, SSL *ssl, void *buf, size_t len)
{
    if (ssl) {
        size_t n = 0;
        int ret = SSL_read_ex(ssl, buf, len, &n);
        return ret == 1 ? (ssize_t)n : mf__tls_error(ssl, ret);
    }
    ssize_t n;
    do {
        n = mf__sys_read(fd, buf, len);
    } while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    return errno == EAGAIN ? MF_EAGAIN : mf_err_from_errno(errno);
}

static ssize_t mf__tls_writev(SSL *ssl, const struct iovec *iov, int n)
{
    ssize_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t written = 0;
        if (!iov[i].iov_len)
            continue;
        int ret = SSL_write_ex(ssl, iov[i].iov_base, iov[i].iov_len, &written);
        if (ret != 1) {
            int err = mf__tls_error(ssl, ret);
            return total ? total : (err == 0 ? MF_ECLOSED : err);
        }
        total += (ssize_t)written;
        if (written < iov[i].iov_len)
            break;
    }
    return total;
}

ssize_t mf__sock_writev(int fd, SSL *ssl, const struct iovec *iov, int n)
{
    if (ssl)
        return mf__tls_writev(ssl, iov, n);
    ssize_t w;
    do {
        w = mf__sys_writev(fd, iov, n);
    } while (w < 0 && errno == EINTR);
    if (w >= 0)
        return w;
    return errno == EAGAIN ? MF_EAGAIN : mf_err_from_errno(errno);
}

void mf__tls_close(SSL *ssl)
{
    if (!ssl)
        return;
    SSL_set_quiet_shutdown(ssl, 0);
    (void)SSL_shutdown(ssl); /* one best-effort close_notify; no waiting */
    ERR_clear_error();
    SSL_free(ssl);
}
