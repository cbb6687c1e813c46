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
 * (504 on timeout; 503 when the URL's host is an upstream group with no
 * live server, moonflow/upstream.h); a client that leaves ends the task as
 * canceled.
 * The same as mf_task_http_forward_with(ex, upstream, NULL, cb, user). */
MF_API mf_task_t *mf_task_http_forward(mf_http_exchange_t *ex,
                                       const char *upstream, mf_task_cb cb,
                                       void *user);

typedef struct mf_http_forward_opts {
    /* The longest wait for the upstream: to connect, and between two
     * reads or writes of it (not while the client is the slow side).
     * 0: connect within 10 s, then 60 s between two reads or writes. */
    uint32_t timeout_ms;
    /* Attempts when the upstream cannot be reached (the connection did not
     * open: nothing was sent), for idempotent methods only; at least 1,
     * the default. The same URL each time: a named upstream group resolves
     * its host again, so a next attempt may reach another server. */
    int tries;
    /* The client's scheme, "http" (NULL) or "https": X-Forwarded-Proto and
     * the proto= of Forwarded. */
    const char *proto;
    /* NULL: no Via of ours; else its received-by, e.g. "moonflow": Via:
     * 1.1 moonflow appended (to the request's Via, and the answer's). */
    const char *via;
    /* The URL is the whole target: the request's path and query are not
     * appended to it. */
    bool whole_url;
} mf_http_forward_opts_t;

MF_API void mf_http_forward_opts_init(mf_http_forward_opts_t *opts);

/* mf_task_http_forward with options (NULL: the defaults). What goes to
 * the upstream:
 *   - the request's headers but the hop-by-hop ones (RFC 9110 §7.6.1:
 *     Connection and every field it names, Keep-Alive, Proxy-Connection,
 *     TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authorization) and
 *     Content-Length (the framing is the task's); Host as the client sent
 *     it (remove it to have the upstream's: mf_task_http_remove_header);
 *   - X-Forwarded-For: the client's list with the peer appended;
 *     Forwarded (RFC 7239): the client's elements with
 *     for=<peer>;proto=<proto>[;host=<Host>] appended (an IPv6 peer quoted,
 *     for="[::1]"); X-Forwarded-Proto and X-Forwarded-Host: ours, in place
 *     of the client's (values of a hop we cannot vouch for);
 *   - a body read whole before the handler: copied (the task may be
 *     retried); a streamed one (mf_http_exchange_body_streamed): read from
 *     the client as the upstream takes it, with Content-Length if the
 *     client gave one, else chunked: a slow upstream stops the reading
 *     from the client, memory stays flat.
 * The answer's hop-by-hop headers (the same, Proxy-Authenticate for
 * Proxy-Authorization) and Content-Length, Date, Server are not relayed.
 * Headers added to the task after this call (mf_task_http_add_header,
 * _remove_header) add to and override these. */
MF_API mf_task_t *mf_task_http_forward_with(mf_http_exchange_t *ex,
                                            const char *upstream,
                                            const mf_http_forward_opts_t *opts,
                                            mf_task_cb cb, void *user);

/* The body bytes a forward (made by the functions above) gave its
 * exchange: the upstream's answer relayed so far, or the text of its own
 * 502/503/504 ("bad gateway\n", "no live upstream\n", "upstream timed
 * out\n"). For the access log. */
MF_API uint64_t mf_task_http_forwarded_bytes(const mf_task_t *task);

/* Whether the field name [name, name + len) is hop-by-hop in a message
 * with these headers (RFC 9110 §7.6.1): a fixed name, or one listed by
 * one of its Connection fields. */
MF_API bool mf_http_hop_by_hop(const mf_http_header_t *headers, size_t n,
                               const char *name, size_t len);

/* Writes the Forwarded element for=<peer>;proto=<proto>[;host=<host>]
 * (RFC 7239: an IPv6 peer is "[v6]", a host that is not a token quoted)
 * into out, NUL-terminated. Returns its length, or 0 when it does not
 * fit in cap. host may be NULL. */
MF_API size_t mf_http_forwarded_element(char *out, size_t cap,
                                        const mf_sockaddr_t *peer,
                                        const char *proto, const char *host,
                                        size_t host_len);

MF_EXTERN_C_END

#endif /* MOONFLOW_HTTP_FORWARD_H */
