/*
 * moonflow/tls.h — the TLS settings of a server: its default certificate
 * and key, and extra certificates chosen by the name a client asks for
 * (SNI). Any server that speaks TLS embeds one (the HTTP server's
 * config.tls); the TLS layer reads nothing else, so it depends on no
 * protocol above it.
 *
 * Ownership: the strings and the SNI array are the caller's; they are read
 * (the files loaded) when the server starts and not kept after.
 */
#ifndef MOONFLOW_TLS_H
#define MOONFLOW_TLS_H

#include <stddef.h>

#include "common.h"

MF_EXTERN_C_BEGIN

/* One more certificate, used when the client's SNI names server_name. */
typedef struct mf_tls_sni {
    const char *server_name;
    const char *cert_file; /* PEM, the chain after the leaf */
    const char *key_file;  /* PEM */
} mf_tls_sni_t;

typedef struct mf_tls_server_config {
    /* Both set → the server speaks TLS; either NULL → plain TCP. */
    const char *cert_file;
    const char *key_file;
    const mf_tls_sni_t *sni; /* sni_count entries, or NULL */
    size_t sni_count;
    /* ALPN: offer "h2" before "http/1.1" (the server speaks HTTP/2). */
    bool alpn_h2;
} mf_tls_server_config_t;

MF_EXTERN_C_END

#endif /* MOONFLOW_TLS_H */
