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
 * ALPN chose "h2" or the first bytes are the connection preface.
 */
#ifndef MF_HTTP2_H
#define MF_HTTP2_H

#include "http_site.h"
#include "http_transport.h"

/* Takes the transport over from the protocol attached before (which frees
 * itself): the input holds the client's first bytes, read at once. The
 * protocol's state is freed with the transport (ops->on_free). */
void mf__http2_attach(mf_http_site_t *site, struct mf_transport *t);

/* 0 when the numbers are within RFC 9113's ranges (§6.5.2), else
 * MF_EINVAL. */
int mf__http2_config_check(const mf_http2_config_t *c);

#endif /* MF_HTTP2_H */
