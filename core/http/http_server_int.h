/*
 * http_server_int.h — what the server (http_server.c) offers its
 * connections (http_conn.c) and their exchanges (http_exchange.c): its
 * settings and TLS context, the Server and Date lines every answer shares,
 * the user's handler, the counts of failed answers and refused headers,
 * the report of refused requests, and the register of open connections.
 * Internal.
 *
 * The server struct is private to http_server.c; nothing else reads its
 * fields. Ownership: the server owns its connections (it keeps their list
 * links and waits for the last one to close when stopping); a connection
 * owns at most one exchange at a time.
 */
#ifndef MF_HTTP_SERVER_INT_H
#define MF_HTTP_SERVER_INT_H

#include <stdbool.h>

#include "engine/buf.h"
#include "moonflow/http_server.h"
#include "net/tls.h"

const mf_http_server_config_t *
mf__http_server_config(const mf_http_server_t *srv);
/* The TLS context, or NULL for plain TCP. */
mf_tls_server_t *mf__http_server_tls(const mf_http_server_t *srv);
/* A graceful stop is under way: no more keep-alive. */
bool mf__http_server_stopping(const mf_http_server_t *srv);

/* A connection opened / closed; link is its entry in the server's list. */
void mf__http_server_conn_opened(mf_http_server_t *srv, mf_list_t *link);
void mf__http_server_conn_closed(mf_http_server_t *srv, mf_list_t *link);

/* "Server: name\r\n" (empty when disabled) and "Date: ...\r\n" (the wall
 * clock read at most once per loop tick). */
const char *mf__http_server_line(const mf_http_server_t *srv, size_t *len);
const char *mf__http_server_date(mf_http_server_t *srv, size_t *len);

/* Calls the user's handler with the exchange. */
void mf__http_server_handle(mf_http_server_t *srv, mf_http_exchange_t *ex);

/* A response could not be built for lack of memory: it was answered 500
 * (answered) or its connection closed instead. Counts it
 * (mf_http_server_failed_responses) and says so on stderr. */
void mf__http_server_response_failed(mf_http_server_t *srv, bool answered);

/* The handler gave a header that cannot be sent (fault says why). Counts
 * it (mf_http_server_invalid_headers); with report, says on stderr which
 * request and which header, and what follows: the answer becomes a 500,
 * or (head_sent) the header is only refused. */
void mf__http_server_header_refused(mf_http_server_t *srv,
                                    const mf_http_request_t *req,
                                    const char *name, size_t name_len,
                                    const char *fault, bool report,
                                    bool head_sent);

/* The connection refused a request with status (or closed it stalled:
 * 408); in->data[off..len) is what it had received of it. Tells the
 * config's on_reject hook, if any, what is known of the request. */
void mf__http_server_rejected(mf_http_server_t *srv, int status,
                              const mf_buf_t *in, size_t off,
                              const mf_sockaddr_t *peer);

#endif /* MF_HTTP_SERVER_INT_H */
