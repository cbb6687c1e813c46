/*
 * http_exchange_int.h — the interface of the exchange (http_exchange.c) to
 * the connection that runs it. Internal.
 *
 * The exchange owns mf_http_exchange_t (its body is private to
 * http_exchange.c): the parsed request, the response being built, the
 * handler's series, hold and callbacks. The connection creates one per
 * request, runs it, tells it when the connection is lost or its output has
 * drained, and destroys it once the exchange has released the connection
 * (mf__http_conn_release) and nothing on the stack uses it any more.
 */
#ifndef MF_HTTP_EXCHANGE_INT_H
#define MF_HTTP_EXCHANGE_INT_H

#include "http_conn.h"

/* Request headers kept per exchange (and parsed per request). */
#define MF_HTTP_MAX_HEADERS 100

/* The exchange of a parsed request. req's headers are copied; req's
 * strings and body point into the connection's input, which stays in
 * place until the exchange is destroyed. */
mf_http_exchange_t *mf__http_exchange_create(mf_http_conn_t *conn,
                                             const mf_http_request_t *req,
                                             const char *body, size_t body_len);
/* Runs the handler, then sends the response, starts the exchange's series,
 * or leaves it to its holder. */
void mf__http_exchange_run(mf_http_exchange_t *ex);
/* The connection closed while the exchange held it: the on_drain and
 * on_close callbacks run; may release the connection. */
void mf__http_exchange_lost(mf_http_exchange_t *ex);
/* The output fell below MF_HTTP_WRITE_LOW_WATER: wakes a waiting writer. */
void mf__http_exchange_drained(mf_http_exchange_t *ex);
/* Frees the exchange and its response buffers. */
void mf__http_exchange_destroy(mf_http_exchange_t *ex);

#endif /* MF_HTTP_EXCHANGE_INT_H */
