/*
 * moonflow/http_forward.h — proxying: a task that sends a server exchange's
 * request to an upstream HTTP server and streams the answer back to the
 * exchange as it arrives (an http task, http_client.h, relaying through the
 * public exchange API, http_server.h).
 *
 *   void handler(mf_http_exchange_t *ex, void *user) {
 *       mf_series_push_back(mf_http_exchange_series(ex),
 *           mf_task_http_forward(ex, "http://127.0.0.1:9000", NULL, NULL));
 *   }
 *
 * Threads: the loop's thread. Ownership: the task copies the request
 * (method, target, end-to-end headers, body) when created; it must run in
 * the exchange's series, which keeps the exchange alive while it runs.
 */
#ifndef MOONFLOW_HTTP_FORWARD_H
#define MOONFLOW_HTTP_FORWARD_H

#include "http_client.h"
#include "http_server.h"

MF_EXTERN_C_BEGIN

/* Sends the exchange's request (method, target, end-to-end headers plus
 * X-Forwarded-For, body) to upstream (e.g. "http://127.0.0.1:9000") and
 * relays the answer: a body complete at once goes out with its length,
 * else it is streamed (chunked), pausing the upstream while the client is
 * slow. Push it onto mf_http_exchange_series(ex); the exchange is answered
 * when the series ends. A failure before any byte was relayed becomes a 502
 * (504 on timeout); a client that leaves ends the task as canceled. */
MF_API mf_task_t *mf_task_http_forward(mf_http_exchange_t *ex,
                                       const char *upstream, mf_task_cb cb,
                                       void *user);

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_FORWARD_H */
