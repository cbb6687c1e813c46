/*
 * test_cert.h — a self-signed certificate for tests that serve TLS: made by
 * `openssl req` in a new temporary folder, valid for localhost and
 * 127.0.0.1, removed with its folder.
 */
#ifndef MF_TEST_CERT_H
#define MF_TEST_CERT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

typedef struct mf_test_cert {
    char dir[64];   /* the temporary folder (tests may put more files in) */
    char cert[128]; /* dir/c.pem: the certificate, also the CA to trust */
    char key[128];  /* dir/k.pem */
} mf_test_cert_t;

static inline void mf_test_cert_make(mf_test_cert_t *c)
{
    char cmd[512];
    strcpy(c->dir, "/tmp/mf-cert-XXXXXX");
    ASSERT(mkdtemp(c->dir) != NULL);
    snprintf(c->cert, sizeof c->cert, "%s/c.pem", c->dir);
    snprintf(c->key, sizeof c->key, "%s/k.pem", c->dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s "
             "-days 2 -subj /CN=localhost "
             "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 "
             ">/dev/null 2>&1",
             c->key, c->cert);
    ASSERT_EQ(system(cmd), 0);
}

/* Removes the folder and everything in it; false if that failed. */
static inline bool mf_test_cert_remove(const mf_test_cert_t *c)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", c->dir);
    return system(cmd) == 0;
}

#endif /* MF_TEST_CERT_H */
