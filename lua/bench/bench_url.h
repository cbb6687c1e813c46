/*
 * lua/bench/bench_url.h — a bench URL split as wrk's table holds it
 * (bench_cli.c checks every URL with it at start; bench_http.c builds the
 * targets from it).
 *
 * Ownership: the parts are copies in the caller's bench_url_t, freed by
 * bench_url_free.
 */
#ifndef MF_BENCH_URL_H
#define MF_BENCH_URL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bench_url {
    char *scheme; /* "http" or "https" */
    char *host;   /* without brackets for IPv6 */
    char *port;   /* NULL when the URL has none */
    char *path;   /* from the first '/' on, query included; "/" if none */
    bool tls;
} bench_url_t;

/* 0, or -1 with the reason in err ("bad URL scheme ..."). */
int bench_url_parse(const char *text, bench_url_t *u, char *err, size_t errlen);
void bench_url_free(bench_url_t *u);

#endif /* MF_BENCH_URL_H */
