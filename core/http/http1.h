/*
 * http1.h — the HTTP/1.x protocol on a transport. Internal.
 *
 * http1.c owns mf_http1_t (private to it): the request state machine
 * (parsing heads and bodies in place with the parser, keep-alive,
 * pipelining, 100-continue, the request timeouts, error answers) and the
 * framing of responses (Content-Length or chunked, the Connection line).
 * Below it, the transport (http_transport.h) through its down-calls; above
 * it, the exchange (http_proto.h) through the ops the server registered in
 * the site (http_site.h), and the server through the site's hooks.
 *
 * A second protocol on the same transport (HTTP/2 after ALPN, a WebSocket
 * after an upgrade) is a file like this one: an attach function, a
 * mf_transport_ops_t for the transport and a mf_http_proto_ops_t for its
 * exchanges.
 */
#ifndef MF_HTTP1_H
#define MF_HTTP1_H

#include "http_site.h"
#include "http_transport.h"

/* Attaches HTTP/1 to a new transport (before mf__transport_start): the
 * first request must arrive within the header timeout. The protocol's
 * state is freed with the transport (ops->on_free). */
void mf__http1_attach(mf_http_site_t *site, mf_transport_t *t);

#endif /* MF_HTTP1_H */
