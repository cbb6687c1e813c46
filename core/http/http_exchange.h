/*
 * http_exchange.h — the exchange layer's side of http_proto.h: the ops a
 * protocol creates and drives exchanges with. Internal.
 *
 * The exchange (http_exchange.c) owns mf_http_exchange_t, whose body is
 * private to that file: the parsed request, the response being built, the
 * handler's series, hold and callbacks. It frames its response only
 * through the protocol's ops (mf_http_proto_ops_t) and reports up only
 * through the site (http_site.h). Only the server includes this header: it
 * puts these ops in the site, where protocols find them, so no protocol
 * file names the exchange's functions.
 */
#ifndef MF_HTTP_EXCHANGE_H
#define MF_HTTP_EXCHANGE_H

#include "http_proto.h"

extern const mf_http_exchange_ops_t mf__http_exchange_ops;

#endif /* MF_HTTP_EXCHANGE_H */
