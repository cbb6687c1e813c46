/*
 * http2.h — HTTP/2 (RFC 9113) on a transport, server side. Internal.
 *
 * http2.c owns mf_http2_t and its streams (private to it). Debian's
 * libnghttp2 does the framing, HPACK, stream states, flow control and the
 * flood limits; this file turns each request stream into an exchange
 * (http_proto.h), so the same handlers serve it, and frames the
 * exchange's answer as HEADERS and DATA through nghttp2. Below it, the
 * transport (http_transport.h) through its down-calls; above it, the
 * exchange through the ops in the site (http_site.h).
 *
 * The server puts mf__http2_attach in the site (attach_h2) when http2 is
 * on; HTTP/1 hands a connection over with it before parsing anything, when
 * ALPN chose "h2" or the first bytes are the connection preface. On a
 * server without TLS it also puts mf__http2_attach_upgraded there
 * (upgrade_h2), which HTTP/1 offers a request asking for "Upgrade: h2c".
 */
#ifndef MF_HTTP2_H
#define MF_HTTP2_H

#include "http_site.h"
#include "http_transport.h"

/* Takes the transport over from the protocol attached before (which frees
 * itself): the input holds the client's first bytes, read at once. The
 * protocol's state is freed with the transport (ops->on_free). */
void mf__http2_attach(mf_http_site_t *site, struct mf_transport *t);

/* Upgrade: h2c (RFC 7540 §3.2): when req (parsed by HTTP/1 from the
 * input, head_len bytes at its off, no body) asks for h2c with exactly one
 * HTTP2-Settings that nghttp2 accepts, queues the 101, takes the transport
 * over as mf__http2_attach does, serves req as stream 1 and reads what
 * follows its head as HTTP/2 (the client's preface); true then, and the
 * protocol attached before frees itself. False, with nothing done, when
 * the request cannot be upgraded: HTTP/1 serves it, the Upgrade ignored. */
bool mf__http2_attach_upgraded(mf_http_site_t *site, struct mf_transport *t,
                               const mf_http_request_t *req, size_t head_len);

/* 0 when the numbers are within RFC 9113's ranges (§6.5.2), else
 * MF_EINVAL. */
int mf__http2_config_check(const mf_http2_config_t *c);

#endif /* MF_HTTP2_H */
