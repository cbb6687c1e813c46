/*
 * lua/serve/handler.c — a request handled by a Lua handler: the request and
 * response objects (userdata "moonflow.request" / "moonflow.response"), the
 * coroutine that runs `handler(req, resp)`, and turning its end into an
 * HTTP answer.
 *
 * A request record (mf_serve_request_t, from the loop's free lists) ties
 * the exchange, the coroutine and the two Lua objects together for one
 * request. It has one owner at a time: mf_serve_handler_on_request makes
 * it and hands it to the coroutine at mf_lua_co_start_with; from then on the
 * coroutine owns it, and its exit callback — which may run inside
 * mf_lua_co_start_with, when the handler ends without parking — is the one
 * place that frees it. The Lua objects point to it and are cut loose then
 * (a script that keeps `resp` and uses it later gets an error, never freed
 * memory). The exchange is held for the coroutine: its answer is sent by
 * resp:send/json/redirect, or when the handler returns (status and headers
 * set, empty body), or as a 500 when it raised (its CPU budget and the Lua
 * memory cap end it so too), a 504 when it ran past its timeout (parked:
 * the timer aborts it; running: the host's watchdog stops it), a 503 when
 * the server stopped it at shutdown; once resp:write has begun a stream,
 * any of these cuts the stream instead (no last chunk, the connection
 * closed, a line on the error log) so that it never looks complete. A
 * header in resp.headers that cannot be sent makes the answer a 500,
 * reported with the route; resp:set_header raises on a bad name or value at
 * once. A send while the handler still runs is safe: the HTTP server
 * finishes the exchange only after its handler call has returned. A client
 * that goes away is logged 499 (nginx's code) and the exchange is
 * forgotten, but the handler goes on, as OpenResty's does: the record
 * keeps the req fields (request.c), answers and writes return nil,
 * "closed" (a parked write is woken), the route's on_abort function runs;
 * on_abort = "stop" aborts the coroutine instead (its pending task is
 * canceled).
 *
 * A route may be a table of phases (moonflow.serve runs them): rewrite,
 * access and content in the handler's coroutine, the header and body
 * filters called from the answering functions, and the log phase in a
 * coroutine of its own started once the handler's has ended, which then
 * owns the record. Threads the request's code spawns (mf.spawn,
 * ngx.thread.spawn) are adopted (the host's adopt hook): bound to the
 * record, which outlives its coroutine until the last of them ends; the
 * log phase starts only then. Functions given to moonflow.serve's
 * at_end run as the record goes, however the request ended (they give
 * back what it held: mf.limit.conn's slots). A path without
 * a script (404) or whose script never loaded (500) is answered at once,
 * without a record.
 *
 * The record is shared with request.c (request.h), which implements `req`.
 *
 * May call: the Lua host (coroutines, registry references), the HTTP
 * exchange API, routes.h, request.c, the access log (log.c) and the
 * metrics (metrics.c).
 */
#include <lauxlib.h>
#include <stddef.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moonflow/http_forward.h>
#include <moonflow/lua_arg.h>
#include <moonflow/lua_json.h>
#include <moonflow/lua_uri.h>

#include "request.h"

/* The Content-Type of an answer whose resp.headers name none. */
static const char mf__text_type[] =
    "Content-Type: text/plain; charset=utf-8\r\n";
static const char mf__json_type[] = "Content-Type: application/json\r\n";
#define MF__TEXT_TYPE mf__text_type, sizeof mf__text_type - 1
#define MF__JSON_TYPE mf__json_type, sizeof mf__json_type - 1
static const char mf__resp_mt[] = "moonflow.response";

/* Out of the way of a plain handler's path (phases, a client gone): kept
 * out of line so that the hot functions around them stay inlined. */
#define MF__COLD __attribute__((noinline, cold))

/* ---- answering -------------------------------------------------------------
 */

/* The request's start, for the access log and the metrics only (no clock
 * read without them). */
static void mf__clock_start(const mf_serve_worker_t *w, struct timespec *start)
{
    if (w->log_fd >= 0 || w->mstate)
        clock_gettime(CLOCK_MONOTONIC, start);
}

static double mf__seconds_since(const mf_serve_worker_t *w,
                                const struct timespec *start)
{
    if (w->log_fd < 0 && !w->mstate)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) +
           (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* What an ended exchange leaves: its trace's status, its access line and
 * its metrics (request: NULL for an answer without a handler's request,
 * whose id is `id`, or made for the line when NULL). */
static void mf__exchange_account(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                                 mf_serve_request_t *request, const char *id,
                                 int status, size_t bytes, double seconds)
{
    if (request && request->trace)
        mf_serve_trace_answered(request->trace, status);
    if (w->log_fd >= 0)
        mf_serve_log_request(w, mf_http_exchange_request(ex),
                             mf_http_exchange_peer(ex), status, bytes, seconds,
                             request ? mf_serve_request_id(request) : id);
    if (w->mstate)
        mf_serve_metrics_exchange(w, ex, request != NULL, status, bytes,
                                  seconds);
}

/* mf__exchange_account of an exchange timed from start: out of line, so
 * that the answer's path, with all three off, saves no registers for it. */
static __attribute__((noinline)) void
mf__exchange_account_since(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                           mf_serve_request_t *request, const char *id,
                           int status, size_t bytes,
                           const struct timespec *start)
{
    mf__exchange_account(w, ex, request, id, status, bytes,
                         mf__seconds_since(w, start));
}

/* The access log line and the metrics of an exchange about to end; from
 * here on the handler's side wants no on_close call. request: the record
 * of a handler's request, NULL for an answer without one (id: its id). */
static void mf__exchange_log(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             int status, size_t bytes,
                             const struct timespec *start,
                             mf_serve_request_t *request, const char *id)
{
    mf_http_exchange_on_close(ex, NULL, NULL);
    /* all three off (the default): no call, no clock read */
    if (w->log_fd >= 0 || w->mstate || (request && request->trace))
        mf__exchange_account_since(w, ex, request, id, status, bytes, start);
}

void mf_serve_exchange_log(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                           int status, size_t bytes,
                           const struct timespec *start,
                           mf_serve_request_t *request, const char *id)
{
    mf__exchange_log(w, ex, status, bytes, start, request, id);
}

/* The last step of every answer: the access log line, then the send (after
 * which the exchange and its request are gone). */
static void mf__exchange_send_logged(mf_serve_worker_t *w,
                                     mf_http_exchange_t *ex, int status,
                                     size_t bytes, const struct timespec *start,
                                     const char *body, size_t len,
                                     mf_serve_request_t *request,
                                     const char *id)
{
    mf__exchange_log(w, ex, status, bytes, start, request, id);
    mf_http_exchange_send_body(ex, body, len);
}

/* An answer without Lua (404, 500, 504): with the request's id, made here
 * when there is no handler's request. */
static void mf__exchange_send_plain(mf_serve_worker_t *w,
                                    mf_http_exchange_t *ex, int status,
                                    const char *text,
                                    const struct timespec *start,
                                    mf_serve_request_t *request)
{
    static const char type[] = "Content-Type: text/plain\r\n";
    char made[MF_SERVE_ID_MAX + 1];
    const char *id = made;
    if (request)
        id = mf_serve_request_id(request);
    else
        mf_serve_make_request_id(w, mf_http_exchange_request(ex), made);
    size_t len = strlen(text);
    mf_http_exchange_set_status(ex, status);
    mf_http_exchange_add_header_static(ex, type, sizeof type - 1);
    mf_serve_add_request_id(w, ex, id);
    mf__exchange_send_logged(w, ex, status, len, start, text, len, request, id);
}

/* "moonflow: GET /route: message" on the error log (stderr). */
static void mf__log_handler_error(mf_serve_request_t *request,
                                  const char *message)
{
    const mf_http_request_t *head =
        request->ex     ? mf_http_exchange_request(request->ex)
        : request->kept ? &request->kept_head->head /* the client left */
                        : NULL;
    mf_lua_host_log(request->w->host, "moonflow: %.*s %.*s: %s",
                    head ? (int)head->method_len : 1, head ? head->method : "-",
                    head ? (int)head->path_len : 1, head ? head->path : "-",
                    message);
}

/* A header of resp.headers that is not a string name with a string or
 * number value: the exchange never sees it, so it is reported here (the
 * server reports the ones it refuses). */
static void mf__report_header_type(lua_State *L, mf_serve_request_t *request,
                                   int key, int value)
{
    char text[400];
    char name[4 * 64 + 1];
    if (lua_type(L, key) != LUA_TSTRING) {
        snprintf(text, sizeof text,
                 "resp.headers has a %s key (a header name expected): the "
                 "answer is a 500",
                 luaL_typename(L, key));
    } else {
        size_t len;
        const char *s = lua_tolstring(L, key, &len);
        mf_http_log_escape(name, sizeof name, s, len > 64 ? 64 : len);
        snprintf(text, sizeof text,
                 "response header \"%s\" has a %s value (a string or a "
                 "number expected): the answer is a 500",
                 name, luaL_typename(L, value));
    }
    mf__log_handler_error(request, text);
}

/* Adds the header named by the key at index key, with the value on top
 * (a string or a number). 0, or -1 after a report. */
static int mf__request_add_header(lua_State *L, mf_serve_request_t *request,
                                  int key)
{
    int t = lua_type(L, -1);
    if (lua_type(L, key) != LUA_TSTRING ||
        (t != LUA_TSTRING && t != LUA_TNUMBER)) {
        mf__report_header_type(L, request, key, lua_gettop(L));
        return -1;
    }
    size_t nlen, vlen;
    const char *name = lua_tolstring(L, key, &nlen);
    const char *v = lua_tolstring(L, -1, &vlen);
    /* an invalid one is reported by the server */
    return mf_http_exchange_add_header(request->ex, name, nlen, v, vlen) < 0
               ? -1
               : 0;
}

/* Whether the header name [name, name + len) is the one the request's id
 * goes back in: the handler's own value wins then. */
static bool mf__is_id_header(const mf_serve_request_t *request,
                             const char *name, size_t len)
{
    const char *id_name = request->w->config->request_id_header;
    return id_name && strlen(id_name) == len &&
           strncasecmp(name, id_name, len) == 0;
}

/* Copies resp.headers into the exchange; values may be strings, numbers
 * or lists of them. Notes whether a Content-Type, and the id's header,
 * were among them. 0, or -1 when one could not be added (reported): the
 * answer must be a 500. */
static int mf__request_copy_headers(lua_State *L, mf_serve_request_t *request,
                                    bool *has_type, bool *has_id)
{
    int rc = 0;
    if (request->headers_ref == LUA_NOREF)
        return 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->headers_ref);
    lua_pushnil(L);
    while (rc == 0 && lua_next(L, -2)) {
        int key = lua_gettop(L) - 1;
        size_t nlen = 0;
        const char *name =
            lua_type(L, key) == LUA_TSTRING ? lua_tolstring(L, key, &nlen) : "";
        if (nlen == 12 && !strncasecmp(name, "content-type", 12))
            *has_type = true;
        else if (mf__is_id_header(request, name, nlen))
            *has_id = true;
        bool list = lua_istable(L, -1);
        int n = list ? (int)lua_objlen(L, -1) : 1;
        for (int i = 1; rc == 0 && i <= n; i++) {
            if (list)
                lua_rawgeti(L, -1, i);
            else
                lua_pushvalue(L, -1);
            rc = mf__request_add_header(L, request, key);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, lua_gettop(L) - (rc == 0 ? 1 : 2)); /* the table (and key) */
    return rc;
}

/* Whether L runs the request's code: filters run there only (an answer
 * made at the coroutine's end, on the host's state, has none to run in). */
static bool mf__in_request(lua_State *L, const mf_serve_request_t *request)
{
    return request->co && L != mf_lua_host_state(request->w->host);
}

/* Calls moonflow.serve's runner ref (a filter) with the route's phases,
 * req and resp, and nargs more values on top of L; leaves nret results. */
static void mf__call_phases(lua_State *L, mf_serve_request_t *request, int ref,
                            int nargs, int nret)
{
    int base = lua_gettop(L) - nargs;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->phases_ref);
    int *keep = mf_lua_co_keep(request->co);
    lua_rawgeti(L, LUA_REGISTRYINDEX, keep[MF_SERVE_KEEP_REQ]);
    lua_rawgeti(L, LUA_REGISTRYINDEX, keep[MF_SERVE_KEEP_RESP]);
    for (int i = 1; i <= nargs; i++)
        lua_pushvalue(L, base + i);
    lua_call(L, 3 + nargs, nret);
    for (int i = 0; i < nargs; i++)
        lua_remove(L, base + 1);
}

/* The route's header filter, once, before the head is built: it may
 * change resp.status and resp.headers. */
static MF__COLD void mf__header_filter(lua_State *L,
                                       mf_serve_request_t *request)
{
    if (request->head_filtered || !mf__in_request(L, request))
        return;
    request->head_filtered = true;
    mf__call_phases(L, request, request->w->header_filter_ref, 0, 0);
}

/* The route's body filter on a piece of the body (eof: its last): returns
 * what to send instead (left on L's stack, which anchors it), or data. */
static MF__COLD const char *mf__body_filter(lua_State *L,
                                            mf_serve_request_t *request,
                                            const char *data, size_t *len,
                                            bool eof)
{
    if (!mf__in_request(L, request))
        return data;
    lua_pushlstring(L, data, *len);
    lua_pushboolean(L, eof);
    mf__call_phases(L, request, request->w->body_filter_ref, 2, 1);
    return lua_tolstring(L, -1, len); /* a string: the runner checked */
}

/* Status, headers, the Content-Type line given (a literal) and the id's
 * header unless resp.headers has them, before the first byte. 0, or -1
 * when the headers cannot be sent (reported). */
/* The head's lines besides resp.headers (a type, the id, unless those
 * named them) and its status. */
static void mf__request_head_rest(mf_serve_request_t *request, bool has_type,
                                  bool has_id, const char *type_line,
                                  size_t type_len)
{
    if (!has_type) /* a constant: no copy */
        mf_http_exchange_add_header_static(request->ex, type_line, type_len);
    if (!has_id)
        mf_serve_request_add_id(request);
    mf_http_exchange_set_status(request->ex, request->status);
}

static int mf__request_set_head(lua_State *L, mf_serve_request_t *request,
                                const char *type_line, size_t type_len)
{
    bool has_type = false, has_id = false;
    if (mf__request_copy_headers(L, request, &has_type, &has_id) < 0)
        return -1;
    mf__request_head_rest(request, has_type, has_id, type_line, type_len);
    return 0;
}

int mf_serve_request_set_head(lua_State *L, mf_serve_request_t *request)
{
    return mf__request_set_head(L, request, "", 0); /* no Content-Type */
}

int mf_serve_request_file_head(lua_State *L, mf_serve_request_t *request,
                               bool *has_type)
{
    bool has_id = false;
    *has_type = false;
    if (mf__request_copy_headers(L, request, has_type, &has_id) < 0)
        return -1;
    if (!has_id)
        mf_serve_request_add_id(request);
    return 0;
}

/* Takes the exchange from the request, which is answered now. A route
 * with phases keeps its req fields first: its log phase reads them. */
static mf_http_exchange_t *
mf__request_take_exchange(mf_serve_request_t *request)
{
    if (MF_UNLIKELY(request->phased))
        mf_serve_request_keep(request);
    mf_http_exchange_t *ex = request->ex;
    request->ex = NULL;
    return ex;
}

/* Sends the answer (or ends a streamed one) with body as its last bytes. */
static inline void mf__request_send(mf_serve_request_t *request,
                                    const char *body, size_t len)
{
    mf_http_exchange_t *ex = request->ex; /* phases: kept by the caller */
    request->ex = NULL;
    request->sent = true;
    mf__exchange_send_logged(request->w, ex, request->status, request->bytes,
                             &request->start, body, len, request, NULL);
}

/* Sets the answer's status, unless the server refused the request's body
 * while the handler read it: the client heard that refusal (413, 400,
 * 408), and the access log, the metrics and the log phase say so. */
static inline void mf__set_status(mf_serve_request_t *request, int status)
{
    if (MF_LIKELY(!request->refused))
        request->status = status;
}

static void mf__request_fail(mf_serve_request_t *request, int status,
                             const char *text)
{
    mf_http_exchange_t *ex = mf__request_take_exchange(request);
    request->sent = true;
    mf__set_status(request, status);
    status = request->status;
    mf__exchange_send_plain(request->w, ex, status, text, &request->start,
                            request);
}

void mf_serve_request_refuse(mf_serve_request_t *request, int status,
                             const char *text)
{
    mf__request_fail(request, status, text);
}

/* Ends an answer that cannot be completed (mf_http_exchange_abort): with
 * nothing sent yet it becomes the server's 500, logged as a 500 with the
 * body the server sends; a stream is cut and logged with the status and
 * bytes it had sent (as nginx logs it). */
static void mf__request_abort(mf_serve_request_t *request)
{
    mf_http_exchange_t *ex = mf__request_take_exchange(request);
    request->sent = true;
    if (!request->streaming) {
        mf__set_status(request, 500);
        request->bytes = mf_http_error_body_len(request->status);
    }
    mf__exchange_log(request->w, ex, request->status, request->bytes,
                     &request->start, request, NULL);
    mf_http_exchange_abort(ex);
}

/* A streamed answer the handler could not finish: the client must see it
 * cut (no last chunk), and the error log says so. */
static void mf__request_cut(mf_serve_request_t *request, const char *why)
{
    char text[256];
    snprintf(text, sizeof text,
             "the streamed response is cut after %zu body bytes: %s",
             request->bytes, why);
    mf__log_handler_error(request, text);
    mf__request_abort(request);
}

/* ---- the coroutine's end ------------------------------------------------- */

static void mf__log_phase_start(mf_serve_request_t *request);
static void mf__request_wake(mf_serve_request_t *request);

/* The req and resp objects let go of the request (their thread may serve
 * another one next). */
static void mf__request_unbind(mf_serve_request_t *request)
{
    if (request->req->request == request)
        request->req->request = NULL;
    if (request->resp->request == request)
        request->resp->request = NULL;
}

/* Runs the request's at_end functions, each in a protected call on the
 * host's state (a raise is logged, the others still run): they give back
 * what the request held (a limit.conn slot) however it ended. */
static MF__COLD void mf__request_run_at_end(mf_serve_request_t *request)
{
    mf_lua_host_t *host = request->w->host;
    lua_State *L = mf_lua_host_state(host);
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->at_end_ref);
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, top + 1, i);
        if (mf_lua_host_pcall(host, 0, 0, 0) != 0) {
            mf__log_handler_error(request, lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
    mf_lua_unref(host, request->at_end_ref);
}

/* What a record with phases, an on_abort, at_end functions or a wake
 * holds. */
static MF__COLD void mf__request_free_extras(mf_serve_request_t *request)
{
    if (request->has_at_end)
        mf__request_run_at_end(request);
    if (request->wake_made)
        mf_timer_stop(request->w->loop, &request->wake);
    if (request->phased)
        mf_lua_unref(request->w->host, request->phases_ref);
    if (request->kept)
        mf_free(request->kept_head);
    if (request->has_on_abort)
        mf_lua_unref(request->w->host, request->on_abort_ref);
}

static inline __attribute__((always_inline)) void
mf__request_free(mf_serve_request_t *request)
{
    mf_loop_t *loop = request->w->loop;
    mf_timer_stop(loop, &request->timer);
    if (request->headers_ref != LUA_NOREF) /* made on first use only */
        mf_lua_unref(request->w->host, request->headers_ref);
    if (request->fields_ref != LUA_NOREF)
        mf_lua_unref(request->w->host, request->fields_ref);
    if (MF_UNLIKELY(request->extras))
        mf__request_free_extras(request);
    mf__request_unbind(request);
    if (request->trace) /* its tasks may still hold it */
        mf_serve_trace_end(request->trace);
    if (!request->w->spare_request)
        request->w->spare_request = request; /* the next request's */
    else
        mf_loop_free(loop, request, sizeof(*request));
}

void mf_serve_handler_close(mf_serve_worker_t *w)
{
    if (w->spare_request)
        mf_loop_free(w->loop, w->spare_request, sizeof(*w->spare_request));
    w->spare_request = NULL;
}

/* A handler that raised, or that the host stopped: 504 at its timeout,
 * 503 at the server's stop, 500 otherwise (its CPU budget, the memory cap,
 * its own error). */
static void mf__request_fail_raised(mf_serve_request_t *request,
                                    mf_lua_co_cause_t cause)
{
    if (cause == MF_LUA_CAUSE_DEADLINE)
        mf__request_fail(request, 504, "504 Gateway Timeout\n");
    else if (cause == MF_LUA_CAUSE_STOP)
        mf__request_fail(request, 503, "503 Service Unavailable\n");
    else
        mf__request_fail(request, 500, "500 Internal Server Error\n");
}

/* Why a stream is cut: what the error log says after "cut after N body
 * bytes: ". */
static const char *mf__cut_reason(const mf_lua_co_exit_t *ex)
{
    if (ex->status != MF_LUA_CO_ERROR)
        return ex->message; /* aborted: "handler timeout", a client gone */
    switch (ex->cause) {
    case MF_LUA_CAUSE_DEADLINE:
        return "handler timeout";
    case MF_LUA_CAUSE_CPU:
        return "the handler exceeded its cpu budget";
    case MF_LUA_CAUSE_STOP:
        return "the server is stopping";
    case MF_LUA_CAUSE_MEMORY:
        return "the handler ran out of memory";
    default:
        return "the handler raised an error";
    }
}

/* The answer of a handler that returned: what it set (status, headers,
 * an empty body), or the last chunk of its stream; in the request's
 * coroutine, through the route's filters. */
static void mf__request_end(lua_State *L, mf_serve_request_t *request)
{
    size_t len = 0;
    const char *last = "";
    if (request->phased && !request->streaming)
        mf__header_filter(L, request);
    if (!request->streaming &&
        mf__request_set_head(L, request, MF__TEXT_TYPE) < 0) {
        mf__request_abort(request);
        return;
    }
    if (request->phased)
        last = mf__body_filter(L, request, "", &len, true);
    request->bytes += len;
    if (request->streaming && len > 0) { /* a filter's last piece */
        mf_http_exchange_write(request->ex, last, len); /* queued */
        if (!request->ex)
            return; /* the client left meanwhile */
        len = 0;
    }
    if (request->phased)
        mf_serve_request_keep(request);
    mf__request_send(request, last, len);
}

/* Answers what the handler's end calls for, if nothing was sent yet: when
 * it returned, what it set (status, headers, empty body) or the end of its
 * chunked body; when it raised or was stopped, a 500/503/504; when it timed
 * out parked, a 504; once a stream had begun, the cut of that stream: an
 * answer the handler did not finish must never look complete. */
static void mf__request_answer_at_exit(mf_serve_request_t *request,
                                       const mf_lua_co_exit_t *ex)
{
    if (!request->ex || request->sent)
        return;
    if (ex->status == MF_LUA_CO_DONE || request->exiting) {
        mf__request_end(mf_lua_host_state(request->w->host), request);
    } else if (request->streaming) {
        mf__request_cut(request, mf__cut_reason(ex));
    } else if (ex->status == MF_LUA_CO_ERROR) {
        mf__request_fail_raised(request, ex->cause);
    } else if (request->timed_out) {
        mf__request_fail(request, 504, "504 Gateway Timeout\n");
    } else {
        mf__request_fail(request, 500, "500 Internal Server Error\n");
    }
}

/* Whether the request's route has a log phase to run now that its
 * handler has ended (its req fields were kept: the route has phases);
 * then it starts on the loop, not inside the exit callback. */
static MF__COLD bool mf__log_due(mf_serve_request_t *request)
{
    lua_State *L = mf_lua_host_state(request->w->host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->phases_ref);
    lua_getfield(L, -1, "log");
    bool has_log = lua_isfunction(L, -1);
    lua_pop(L, 2);
    if (!has_log || !request->kept)
        return false;
    mf__request_unbind(request); /* the handler's thread is free now */
    request->log_due = true;
    mf__request_wake(request);
    return true;
}

/* The request's code is over (its handler's or log phase's coroutine and
 * the threads they spawned): its log phase is due, or the record goes. */
static void mf__request_settle(mf_serve_request_t *request)
{
    if (MF_UNLIKELY(request->phased) && request->phase != MF_SERVE_PHASE_LOG &&
        mf__log_due(request))
        return;
    mf__request_free(request);
}

/* The coroutine ended (returned, raised or was aborted): the record is
 * freed now, or by the last of its threads (mf__thread_ended). */
static void mf__on_handler_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                                void *data)
{
    mf_serve_request_t *request = data;
    (void)co;
    request->co = NULL;
    if (ex->status == MF_LUA_CO_ERROR)
        mf__log_handler_error(request, ex->message);
    mf__request_answer_at_exit(request, ex);
    if (MF_UNLIKELY(request->phased || request->threads)) {
        if (!request->threads) /* else the last one settles it */
            mf__request_settle(request);
        return;
    }
    mf__request_free(request);
}

/* After the client left, on the loop (never inside the callback that
 * said so): a resp:write that waits for the client returns nil, "closed";
 * the request's on_abort function runs in a coroutine of its own. */
static void mf__on_wake(mf_timer_t *timer)
{
    mf_serve_request_t *request = timer->data;
    if (request->log_due) {
        request->log_due = false;
        mf__log_phase_start(request);
        return;
    }
    if (request->abort_due && request->has_on_abort) {
        request->abort_due = false;
        lua_State *L = mf_lua_host_state(request->w->host);
        lua_rawgeti(L, LUA_REGISTRYINDEX, request->on_abort_ref);
        mf_lua_host_spawn(request->w->host, 0, NULL, NULL); /* errors: logged */
    }
    if (request->exiting && request->co) { /* ngx.exit: end it now */
        mf_lua_co_abort(request->co, "ngx.exit");
        return;
    }
    mf_lua_co_t *writer = request->writer;
    if (request->write_parked && writer) {
        request->write_parked = false;
        request->writer = NULL;
        mf_lua_co_unpark(writer);
        lua_State *T = mf_lua_co_thread(writer);
        lua_pushnil(T);
        lua_pushliteral(T, "closed");
        mf_lua_co_resume(writer, 2);
    }
}

static void mf__request_wake(mf_serve_request_t *request)
{
    if (!request->wake_made) {
        mf_timer_init(&request->wake, mf__on_wake, request);
        request->wake_made = request->extras = true;
    }
    mf_timer_start(request->w->loop, &request->wake, 0);
}

/* The client left before the answer was complete: logged as nginx does,
 * 499 when nothing was sent, else the status its stream had sent. The
 * handler goes on, as OpenResty's does (its writes return nil, "closed",
 * its req keeps its fields, its log phase runs), unless its route says
 * on_abort = "stop"; an on_abort function is run at once. */
static void mf__on_client_gone(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_request_t *request = arg;
    mf_serve_worker_t *w = request->w;
    mf__set_status(request, request->streaming ? request->status : 499);
    int status = request->status;
    mf__exchange_account(w, ex, request, NULL, status, request->bytes,
                         mf__seconds_since(w, &request->start));
    mf_serve_request_keep(request);
    if (request->proxying) /* its forward must let go of ex now */
        mf_task_cancel(request->proxy);
    request->ex = NULL; /* dead after this callback */
    request->client_gone = true;
    if (!request->co)
        return;
    if (request->abort_stop) {
        mf_lua_co_abort(request->co, "client closed the connection");
        return;
    }
    request->abort_due = request->has_on_abort;
    if (request->abort_due || request->write_parked)
        mf__request_wake(request);
}

static void mf__on_handler_timeout(mf_timer_t *timer)
{
    mf_serve_request_t *request = timer->data;
    request->timed_out = true;
    if (request->co)
        mf_lua_co_abort(request->co, "handler timeout");
}

/* ---- threads of a request ------------------------------------------------
 */

static mf_serve_object_t *mf__push_object(mf_lua_co_t *co, int slot, int mt_ref,
                                          mf_serve_request_t *request);
static void mf__describe_request(void *ud, char *buf, size_t cap);
static const char *mf__request_id_of(void *ud);

/* A thread the request's code spawned (mf.spawn, ngx.thread.spawn) ended:
 * its objects let go of the request, and the last one over settles it. */
static MF__COLD void mf__thread_ended(void *ud, mf_lua_co_t *co)
{
    mf_serve_request_t *request = ud;
    lua_State *L = mf_lua_host_state(request->w->host);
    int *keep = mf_lua_co_keep(co);
    for (int i = 0; i < 2; i++) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, keep[i]);
        mf_serve_object_t *obj = lua_touserdata(L, -1);
        lua_pop(L, 1);
        if (obj && obj->request == request) {
            obj->request = NULL;
            obj->thread = false;
        }
    }
    if (--request->threads == 0 && !request->co)
        mf__request_settle(request);
}

static void mf__thread_adopt(void *ud, mf_lua_co_t *child);

/* The request's coroutines adopt the threads they spawn; so do those
 * threads, whose end the request follows. */
static const mf_lua_co_family_t mf__request_family = {mf__thread_adopt, NULL};
static const mf_lua_co_family_t mf__thread_family = {mf__thread_adopt,
                                                     mf__thread_ended};

/* The hooks of the request's coroutines and of its threads: its log
 * label, its id, its trace, and its family. */
static inline mf_lua_co_hooks_t
mf__request_hooks(mf_serve_request_t *request, const mf_lua_co_family_t *family)
{
    return (mf_lua_co_hooks_t){
        .describe = mf__describe_request,
        .describe_ud = request,
        .request_id = mf__request_id_of,
        .request_id_ud = request,
        .trace = request->trace ? mf_serve_trace_context(request->trace) : NULL,
        .family = family,
        .family_ud = request,
    };
}

/* A thread spawned by the request's code belongs to the request, as in
 * OpenResty: its req and resp objects are bound to it, it reports the
 * phase of the code that spawned it, and the record (and the log phase)
 * waits for its end. */
static MF__COLD void mf__thread_adopt(void *ud, mf_lua_co_t *child)
{
    mf_serve_request_t *request = ud;
    mf_serve_worker_t *w = request->w;
    const mf_serve_object_t *spawner =
        mf_serve_current_object(w, MF_SERVE_KEEP_REQ);
    uint8_t phase =
        spawner && spawner->thread ? spawner->phase : request->phase;
    lua_State *T = mf_lua_co_thread(child);
    mf_serve_object_t *objs[2] = {
        mf__push_object(child, MF_SERVE_KEEP_REQ, w->req_mt_ref, request),
        mf__push_object(child, MF_SERVE_KEEP_RESP, w->resp_mt_ref, request)};
    lua_pop(T, 2);
    for (int i = 0; i < 2; i++) {
        objs[i]->thread = true;
        objs[i]->phase = phase;
    }
    mf_lua_co_hooks_t hooks = mf__request_hooks(request, &mf__thread_family);
    mf_lua_co_set_hooks(child, &hooks);
    mf_serve_request_keep(request); /* req outlives the answer for it */
    request->threads++;
}

/* ---- the handler -----------------------------------------------------------
 */

/* Pushes on co's thread its kept object keep[slot] (made on the thread's
 * first request, its address noted beside the ref), bound to request. */
static MF__COLD mf_serve_object_t *mf__make_object(mf_lua_co_t *co, int slot,
                                                   int mt_ref)
{
    lua_State *T = mf_lua_co_thread(co);
    mf_serve_object_t *obj = lua_newuserdata(T, sizeof(*obj));
    obj->thread = false; /* a thread's binding sets it */
    obj->phase = 0;
    lua_rawgeti(T, LUA_REGISTRYINDEX, mt_ref);
    lua_setmetatable(T, -2);
    lua_pushvalue(T, -1);
    mf_lua_co_keep(co)[slot] = luaL_ref(T, LUA_REGISTRYINDEX);
    mf_lua_co_keep_ptrs(co)[slot] = obj;
    return obj;
}

static mf_serve_object_t *mf__push_object(mf_lua_co_t *co, int slot, int mt_ref,
                                          mf_serve_request_t *request)
{
    mf_serve_object_t *obj = mf_lua_co_push_kept(co, slot);
    if (MF_UNLIKELY(!obj))
        obj = mf__make_object(co, slot, mt_ref);
    obj->request = request;
    return obj;
}

static mf_serve_request_t *mf__request_create(mf_serve_worker_t *w,
                                              mf_http_exchange_t *ex,
                                              const struct timespec *start)
{
    mf_serve_request_t *request = w->spare_request;
    if (request)
        w->spare_request = NULL;
    else
        request = mf_loop_alloc(w->loop, sizeof(*request));
    memset(request, 0, offsetof(mf_serve_request_t, id)); /* id: id_len */
    request->w = w;
    request->ex = ex;
    request->status = 200;
    request->headers_ref = LUA_NOREF;
    request->fields_ref = LUA_NOREF;
    request->start = *start;
    request->start_ms = mf_loop_now(w->loop);
    mf_timer_init(&request->timer, mf__on_handler_timeout, request);
    mf_serve_request_id_start(request, mf_http_exchange_request(ex));
    return request;
}

/* A route with phases (its table on top of T): the request holds the
 * table, takes its on_abort, and runs moonflow.serve's runner with it:
 * runner(phases, req, resp). */
static MF__COLD void mf__request_phases(mf_serve_request_t *request,
                                        lua_State *T, uint32_t timeout)
{
    request->timeout_ms = timeout; /* the log phase's too */
    lua_pushvalue(T, -1);
    request->phases_ref = mf_lua_ref(request->w->host, T);
    request->phased = request->extras = true;
    lua_getfield(T, -1, "on_abort");
    if (lua_isfunction(T, -1)) {
        request->on_abort_ref = mf_lua_ref(request->w->host, T);
        request->has_on_abort = true;
    } else {
        request->abort_stop = lua_isstring(T, -1); /* "stop": checked */
        lua_pop(T, 1);
    }
    lua_rawgeti(T, LUA_REGISTRYINDEX, request->w->run_ref);
    lua_insert(T, -2);
}

/* The label of the request's mf.log lines: "GET /path [ID]" while it is
 * not answered (the head's memory goes with the exchange), then
 * "(answered) [ID]". */
static void mf__describe_request(void *ud, char *buf, size_t cap)
{
    mf_serve_request_t *request = ud;
    const char *id = mf_serve_request_id(request);
    if (!request->ex) {
        snprintf(buf, cap, "(answered) [%s]", id);
        return;
    }
    const mf_http_request_t *head = mf_http_exchange_request(request->ex);
    char path[200];
    mf_http_log_escape(path, sizeof path, head->path, head->path_len);
    snprintf(buf, cap, "%.*s %s [%s]", (int)head->method_len, head->method,
             path, id);
}

static const char *mf__request_id_of(void *ud)
{
    return mf_serve_request_id(ud);
}

/* Runs the route's handler (handler_ref: pushed straight onto the
 * coroutine's thread, no move from the host's stack) in a new coroutine, which
 * owns the request record from mf_lua_co_start_with on, with the request's
 * hooks (moonflow/lua_co.h): its log label, its id, its trace, its
 * deadline. */
static void mf__request_start(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                              uint32_t timeout, const struct timespec *start,
                              int handler_ref, bool phases)
{
    mf_serve_request_t *request = mf__request_create(w, ex, start);
    mf_http_exchange_hold(ex);
    mf_http_exchange_on_close(ex, mf__on_client_gone, request);
    if (timeout)
        mf_timer_start(w->loop, &request->timer, timeout);
    if (w->trace_fd >= 0) /* tracing on: maybe this one */
        request->trace =
            mf_serve_trace_begin(request, mf_http_exchange_request(ex));
    mf_lua_co_hooks_t hooks = mf__request_hooks(request, &mf__request_family);
    if (timeout) /* for Lua code still running then (the timer cannot fire) */
        hooks.deadline = mf_loop_now(w->loop) + timeout;
    request->co =
        mf_lua_host_prepare_with(w->host, mf__on_handler_exit, request, &hooks);
    lua_State *T = mf_lua_co_thread(request->co);
    lua_rawgeti(T, LUA_REGISTRYINDEX, handler_ref); /* straight onto T */
    int nargs = 2;
    if (phases) { /* the route's table of phases */
        mf__request_phases(request, T, timeout);
        nargs = 3;
    }
    if (MF_LIKELY(mf_lua_co_push_keeps(request->co))) { /* a reused thread */
        void **objs = mf_lua_co_keep_ptrs(request->co);
        request->req = objs[MF_SERVE_KEEP_REQ];
        request->resp = objs[MF_SERVE_KEEP_RESP];
        request->req->request = request->resp->request = request;
    } else {
        request->req = mf__push_object(request->co, MF_SERVE_KEEP_REQ,
                                       w->req_mt_ref, request);
        request->resp = mf__push_object(request->co, MF_SERVE_KEEP_RESP,
                                        w->resp_mt_ref, request);
    }
    /* may free request: not touched after */
    mf_lua_co_start(request->co, nargs);
}

void mf_serve_handler_on_request(mf_http_exchange_t *ex, void *worker)
{
    mf_serve_worker_t *w = worker;
    const mf_http_request_t *head = mf_http_exchange_request(ex);
    struct timespec start = {0};
    uint32_t timeout;
    int handler_ref;
    mf__clock_start(w, &start);
    if (w->metrics_page_len == head->path_len && w->mstate &&
        mf_serve_metrics_is_page(w, head)) {
        mf_serve_metrics_answer(w, ex, &start);
        return;
    }
    if (w->config->nstatics && mf_serve_static_answer(w, ex, head, &start))
        return;
    mf_serve_route_result_t rc = mf_serve_routes_find_handler(
        w->routes, head->path, head->path_len, &timeout, &handler_ref);
    const mf_http_compress_config_t *compress;
    switch (rc) {
    case MF_SERVE_ROUTE_FOUND:
    case MF_SERVE_ROUTE_PHASES:
        if (mf_serve_routes_compress(w->routes, head->path, head->path_len,
                                     &compress))
            mf_http_exchange_set_compress(ex, compress);
        mf__request_start(w, ex,
                          timeout ? timeout : w->config->handler_timeout_ms,
                          &start, handler_ref, rc == MF_SERVE_ROUTE_PHASES);
        break;
    case MF_SERVE_ROUTE_MISSING:
        mf__exchange_send_plain(w, ex, 404, "404 Not Found\n", &start, NULL);
        break;
    case MF_SERVE_ROUTE_BROKEN:
        mf__exchange_send_plain(w, ex, 500, "500 Internal Server Error\n",
                                &start, NULL);
        break;
    }
}

/* ---- the log phase ---------------------------------------------------------
 */

static void mf__on_log_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                            void *data)
{
    mf_serve_request_t *request = data;
    (void)co;
    request->co = NULL;
    if (ex->status == MF_LUA_CO_ERROR)
        mf__log_handler_error(request, ex->message);
    if (!request->threads)
        mf__request_free(request);
}

/* Runs the route's log function in a coroutine of its own once the
 * answer is over (sent, failed, or the client gone): it sees the request's
 * kept req fields, req.ctx and resp.status, under the handler's limits.
 * The coroutine owns the request from here on. */
static void mf__log_phase_start(mf_serve_request_t *request)
{
    mf_serve_worker_t *w = request->w;
    request->phase = MF_SERVE_PHASE_LOG;
    request->co = mf_lua_host_prepare(w->host, mf__on_log_exit, request);
    lua_State *T = mf_lua_co_thread(request->co);
    lua_rawgeti(T, LUA_REGISTRYINDEX, w->log_ref);
    lua_rawgeti(T, LUA_REGISTRYINDEX, request->phases_ref);
    request->req =
        mf__push_object(request->co, MF_SERVE_KEEP_REQ, w->req_mt_ref, request);
    request->resp = mf__push_object(request->co, MF_SERVE_KEEP_RESP,
                                    w->resp_mt_ref, request);
    mf_lua_co_hooks_t hooks = mf__request_hooks(request, &mf__request_family);
    if (request->timeout_ms) {
        mf_timer_start(w->loop, &request->timer, request->timeout_ms);
        hooks.deadline = mf_loop_now(w->loop) + request->timeout_ms;
    }
    mf_lua_co_start_with(request->co, 3, &hooks); /* may free request */
}

/* ---- the response object ---------------------------------------------------
 */

/* The resp at index 1 and its live request (raises otherwise). */
static inline mf_serve_request_t *mf__check_resp(lua_State *L)
{
    return mf_serve_check_kept_request(L, MF_SERVE_KEEP_RESP);
}

/* Sends data (copied) as the whole body, with the type given unless
 * resp.headers has one. */
/* mf__resp_answer for a route with phases: through its filters, its req
 * fields kept for the log phase. */
static MF__COLD int mf__resp_answer_phased(lua_State *L,
                                           mf_serve_request_t *request,
                                           const char *data, size_t len,
                                           const char *type, size_t type_len)
{
    mf__header_filter(L, request); /* cannot wait: the client is here */
    if (mf__request_set_head(L, request, type, type_len) < 0) {
        mf__request_abort(request); /* a 500, reported */
        return 0;
    }
    data = mf__body_filter(L, request, data, &len, true);
    request->bytes = len;
    mf_serve_request_keep(request);
    mf__request_send(request, data, len);
    return 0;
}

static inline int mf__resp_answer(lua_State *L, mf_serve_request_t *request,
                                  const char *data, size_t len,
                                  const char *type, size_t type_len)
{
    if (MF_UNLIKELY(request->phased))
        return mf__resp_answer_phased(L, request, data, len, type, type_len);
    if (mf__request_set_head(L, request, type, type_len) < 0) {
        mf__request_abort(request); /* a 500, reported */
        return 0;
    }
    request->bytes = len;
    mf__request_send(request, data, len);
    return 0;
}

/* What an answer or a write gets once the client has left. */
static int mf__resp_closed(lua_State *L, mf_serve_request_t *request,
                           bool answer)
{
    if (answer) /* the answer is over, though unheard: no second one */
        request->sent = true;
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
}

/* An answer the request cannot take: raises when one was sent, or
 * returns nil, "closed" when the client has left. */
static MF__COLD int mf__resp_refused(lua_State *L, mf_serve_request_t *request)
{
    if (request->sent || request->streaming)
        return luaL_error(L, "the response was already sent");
    return mf__resp_closed(L, request, true);
}

static inline int mf__resp_send_body(lua_State *L, mf_serve_request_t *request,
                                     int body)
{
    if (MF_UNLIKELY(request->sent || request->streaming || !request->ex)) {
        if (request->streaming && !request->sent && request->ex &&
            lua_isnoneornil(L, body)) {
            mf__request_end(L, request); /* the stream's last chunk */
            return 0;
        }
        return mf__resp_refused(L, request);
    }
    /* the string first: one call for the common case, the type asked
     * only of what is not one (nil, none: an empty body; others raise) */
    size_t len = 0;
    const char *data = lua_tolstring(L, body, &len);
    if (MF_UNLIKELY(!data))
        data =
            lua_isnoneornil(L, body) ? "" : mf_lua_check_lstring(L, body, &len);
    return mf__resp_answer(L, request, data, len, MF__TEXT_TYPE);
}

static int mf__check_status(lua_State *L, int idx)
{
    int status = (int)mf_lua_check_integer(L, idx);
    if (status < 100 || status > 999)
        return mf_lua_arg_error(L, idx, "an HTTP status (100-999) expected");
    return status;
}

/* resp:json(value [, status]): the value as JSON (moonflow/lua_json.h),
 * encoded into the state's scratch buffer and copied straight out: no Lua
 * string. Content-Type: application/json unless resp.headers has one. */
static int mf__resp_json(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    mf_lua_check_any(L, 2);
    int status = lua_isnoneornil(L, 3) ? 0 : mf__check_status(L, 3);
    if (MF_UNLIKELY(request->sent || request->streaming || !request->ex))
        return mf__resp_refused(L, request);
    size_t len;
    const char *body = mf_lua_json_encode(L, 2, &len);
    if (status)
        mf__set_status(request, status);
    return mf__resp_answer(L, request, body, len, MF__JSON_TYPE);
}

/* resp:send(body) of a string body as moonflow.serve's send calls it,
 * through LuaJIT's FFI (ffi.C finds it in the binary's dynamic symbols): a
 * compiled handler calls it from its trace, where a Lua C function would
 * end the trace and run in the interpreter. It answers only the plain
 * case: obj the running coroutine's own resp, its request live, not
 * answered nor streaming, no phases, no resp.headers; 0 then. Else 1,
 * nothing done: the caller runs the method (mf__resp_send), which answers
 * or raises as it always does. It touches no Lua state (an FFI call must
 * not) and never raises. */
__attribute__((visibility("default"))) int
mf_serve_resp_send_ffi(const void *obj, const char *body, size_t len)
{
    mf_serve_request_t *request =
        mf_serve_kept_request_of(obj, MF_SERVE_KEEP_RESP);
    if (!request || request->phased || request->sent || request->streaming ||
        !request->ex || request->headers_ref != LUA_NOREF)
        return 1;
    mf__request_head_rest(request, false, false, MF__TEXT_TYPE);
    request->bytes = len;
    mf__request_send(request, body, len);
    return 0;
}

static int mf__resp_send(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    return mf__resp_send_body(L, request, 2);
}

static int mf__resp_redirect(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    size_t len;
    const char *url = mf_lua_check_lstring(L, 2, &len);
    int status = (int)mf_lua_opt_integer(L, 3, 302);
    if (!mf_http_field_value_valid(url, len))
        return mf_lua_arg_error(L, 2, "a URL without control bytes expected");
    if (status < 300 || status > 399)
        return mf_lua_arg_error(L, 3, "a 3xx status expected");
    if (!request->ex)
        return request->sent || request->streaming
                   ? luaL_error(L, "the response was already sent")
                   : mf__resp_closed(L, request, true);
    if (mf_http_exchange_add_header(request->ex, "Location", 8, url, len) < 0) {
        mf__request_abort(request); /* no memory: a 500, reported */
        return 0;
    }
    mf__set_status(request, status);
    lua_settop(L, 1);
    return mf__resp_send_body(L, request, 2);
}

/* Pushes resp.headers, creating (and anchoring) it on first use. */
static void mf__push_resp_headers(lua_State *L, mf_serve_request_t *request)
{
    if (request->headers_ref == LUA_NOREF) {
        lua_newtable(L);
        lua_pushvalue(L, -1);
        request->headers_ref = mf_lua_ref(request->w->host, L);
        return;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->headers_ref);
}

/* Raises unless the value at idx can be sent as a header value: nil (which
 * removes the header), a string or a number without control bytes, or a
 * list of such. */
static void mf__check_header_value(lua_State *L, int idx)
{
    bool list = lua_istable(L, idx);
    int n = list ? (int)lua_objlen(L, idx) : lua_isnil(L, idx) ? 0 : 1;
    for (int i = 1; i <= n; i++) {
        if (list)
            lua_rawgeti(L, idx, i);
        else
            lua_pushvalue(L, idx);
        int t = lua_type(L, -1);
        size_t len;
        const char *v = lua_tolstring(L, -1, &len);
        if ((t != LUA_TSTRING && t != LUA_TNUMBER) ||
            !mf_http_field_value_valid(v, len))
            mf_lua_arg_error(L, idx,
                             "a header value expected (a string or a number "
                             "without control bytes, or a list of them)");
        lua_pop(L, 1);
    }
}

/* resp:set_header(name, value): misuse raises at once (a name that is not
 * a token, a value with control bytes, a head already sent); names the
 * server manages are refused when the head is built (a 500). */
static int mf__resp_set_header(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    size_t nlen;
    const char *name = mf_lua_check_lstring(L, 2, &nlen);
    if (!mf_http_field_name_valid(name, nlen))
        return mf_lua_arg_error(L, 2,
                                "a header name expected (a token: "
                                "letters, digits, !#$%&'*+-.^_`|~)");
    mf__check_header_value(L, 3);
    if (request->streaming)
        return luaL_error(L, "the headers were already sent");
    mf__push_resp_headers(L, request);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_settable(L, -3);
    return 0;
}

/* resp:set_trailer(name, value): recorded at once in the exchange, sent
 * after the body's last piece; a field that cannot be a trailer raises
 * (mf_http_trailer_fault says why). Returns true, or nil, "closed" when
 * the client has left. */
static int mf__resp_set_trailer(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    size_t nlen, vlen;
    const char *name = mf_lua_check_lstring(L, 2, &nlen);
    int t = lua_type(L, 3);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        return mf_lua_arg_error(L, 3,
                                "a trailer value expected (a string "
                                "or a number)");
    const char *value = lua_tolstring(L, 3, &vlen);
    const char *fault = mf_http_trailer_fault(name, nlen, value, vlen);
    if (fault) {
        char shown[4 * 64 + 1];
        mf_http_log_escape(shown, sizeof shown, name, nlen > 64 ? 64 : nlen);
        return luaL_error(L, "trailer \"%s\" %s", shown, fault);
    }
    if (request->sent)
        return luaL_error(L, "the response was already sent");
    if (!request->ex)
        return mf__resp_closed(L, request, false);
    if (mf_http_exchange_add_trailer(request->ex, name, nlen, value, vlen) < 0)
        return luaL_error(L, "trailer \"%s\" could not be stored", name);
    lua_pushboolean(L, 1);
    return 1;
}

static void mf__write_cleanup(void *op)
{
    mf_serve_request_t *request = op;
    request->write_parked = false;
    request->writer = NULL;
    if (request->ex)
        mf_http_exchange_on_drain(request->ex, NULL, NULL);
}

static void mf__on_drain(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_request_t *request = arg;
    (void)ex;
    mf_lua_co_t *writer = request->writer;
    if (!writer)
        return;
    request->write_parked = false;
    request->writer = NULL;
    mf_lua_co_unpark(writer);
    lua_pushboolean(mf_lua_co_thread(writer), 1);
    mf_lua_co_resume(writer, 1);
}

/* Streams a piece (chunked). Waits (yields) while the client is slow. */
static int mf__resp_write(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    size_t len;
    const char *data = mf_lua_check_lstring(L, 2, &len);
    if (request->sent)
        return luaL_error(L, "the response was already sent");
    if (!request->ex)
        return mf__resp_closed(L, request, false);
    int rc = 0;
    if (!request->streaming) {
        if (request->phased)
            mf__header_filter(L, request);
        rc = mf__request_set_head(L, request, MF__TEXT_TYPE);
        request->streaming = rc == 0;
    }
    if (rc == 0 && request->phased)
        data = mf__body_filter(L, request, data, &len, false);
    if (rc == 0 && len > 0) { /* a filter may drop a piece: "" */
        request->bytes += len;
        rc = mf_http_exchange_write(request->ex, data, len);
    }
    if (rc < 0) {
        /* Still here: the answer became a 500 (a header that cannot be
         * sent, no memory for the head): end it. Gone: the client left or
         * the stream was cut (logged by mf__on_client_gone). */
        if (request->ex) {
            request->streaming = false; /* its head never went out */
            mf__request_abort(request);
        }
        return mf__resp_closed(L, request, false);
    }
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    request->write_parked = true;
    request->writer = mf_lua_co_check(L); /* the handler or a thread of it */
    mf_lua_co_park(request->writer, mf__write_cleanup, request);
    mf_http_exchange_on_drain(request->ex, mf__on_drain, request);
    return lua_yield(L, 0);
}

/* ---- resp:proxy ------------------------------------------------------------
 */

/* The upstream of a URL for a log line: scheme://host[:port], without
 * user info, path or query (they may carry credentials). */
static void mf__proxy_origin(const char *url, char *out, size_t cap)
{
    const char *auth = strstr(url, "://");
    size_t skip = auth ? (size_t)(auth + 3 - url) : 0;
    size_t alen = strcspn(url + skip, "/?#");
    const char *host = url + skip;
    const char *at = memchr(host, '@', alen);
    if (at) {
        alen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    snprintf(out, cap, "%.*s%.*s", (int)skip, url, (int)alen, host);
}

/* "proxy to ORIGIN: STATUS: cause" on the error log. */
static void mf__proxy_log(mf_serve_request_t *request, mf_task_t *task,
                          int status, const char *cause)
{
    char origin[300], text[512];
    mf__proxy_origin(mf_task_http_url(task), origin, sizeof origin);
    if (status)
        snprintf(text, sizeof text, "proxy to %s: %d: %s", origin, status,
                 cause);
    else
        snprintf(text, sizeof text, "proxy to %s: %s", origin, cause);
    mf__log_handler_error(request, text);
}

/* What a failed forward's error says in nil, err and the log. */
static const char *mf__proxy_cause(int state, int error)
{
    if (state == MF_STATE_TIMEOUT)
        return "timeout";
    return mf_strerror(error);
}

/* Ends the request's answer after its forward: sent (the upstream's
 * answer, or the 502/504 the forward made), cut (a stream that failed
 * midway), or nothing when the client has left. */
static void mf__proxy_answer(mf_serve_request_t *request, mf_task_t *task)
{
    int state = mf_task_state(task), error = mf_task_error(task);
    int status = mf_task_http_status(task);
    request->bytes = (size_t)mf_task_http_forwarded_bytes(task);
    if (state == MF_STATE_SUCCESS) {
        mf__set_status(request, status);
        mf__request_send(request, "", 0);
        return;
    }
    const char *cause = mf__proxy_cause(state, error);
    if (status) { /* its head is out: the client must see a cut */
        mf__set_status(request, status);
        request->streaming = true;
        mf__proxy_log(request, task, 0, "the answer was cut");
        mf__request_cut(request, cause);
        return;
    }
    mf__set_status(request, state == MF_STATE_TIMEOUT ? 504 : 502);
    mf__proxy_log(request, task, request->status, cause);
    mf__request_send(request, "", 0);
}

static void mf__proxy_done(mf_task_t *task)
{
    mf_serve_request_t *request = task->user;
    if (!request) /* the handler was aborted: it answered */
        return;
    mf_lua_co_t *co = request->proxy_co;
    request->proxying = false;
    request->proxy = NULL;
    request->proxy_co = NULL;
    int state = mf_task_state(task);
    if (request->ex && !request->sent)
        mf__proxy_answer(request, task);
    if (!co) /* the handler was aborted meanwhile */
        return;
    mf_lua_co_unpark(co);
    lua_State *T = mf_lua_co_thread(co);
    if (state == MF_STATE_SUCCESS) {
        lua_pushinteger(T, mf_task_http_status(task));
        mf_lua_co_resume(co, 1);
        return;
    }
    lua_pushnil(T);
    if (request->client_gone)
        lua_pushliteral(T, "closed");
    else
        lua_pushstring(T, mf__proxy_cause(state, mf_task_error(task)));
    mf_lua_co_resume(co, 2);
}

/* The handler was aborted (its timeout, a stop) while its forward ran:
 * the forward ends now, and resumes nobody. */
static void mf__proxy_cleanup(void *op)
{
    mf_serve_request_t *request = op;
    request->proxy_co = NULL;
    if (!request->proxying)
        return;
    /* An answer begun must end cut, never complete with the 504 after it */
    if (mf_task_http_status(request->proxy)) {
        request->streaming = true;
        request->bytes = (size_t)mf_task_http_forwarded_bytes(request->proxy);
    }
    /* The record may be freed before the task's callback runs (it is
     * queued): the callback finds no request then. */
    request->proxy->user = NULL;
    request->proxying = false;
    mf_task_cancel(request->proxy);
}

/* Raises unless the option table at idx has only known keys of the right
 * types, and the headers table only header names with string, number or
 * false values. */
static void mf__proxy_check_opts(lua_State *L, int idx)
{
    static const struct {
        const char *name;
        int type;
    } known[] = {{"headers", LUA_TTABLE},
                 {"timeout", LUA_TNUMBER},
                 {"tries", LUA_TNUMBER},
                 {"via", LUA_TNONE}};
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *key =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        size_t i = 0;
        while (i < MF_ARRAY_SIZE(known) && strcmp(key, known[i].name))
            i++;
        if (i == MF_ARRAY_SIZE(known))
            luaL_error(L,
                       "resp:proxy: unknown option '%s' (headers, "
                       "timeout, tries, via)",
                       key);
        if (known[i].type != LUA_TNONE && lua_type(L, -1) != known[i].type)
            luaL_error(L, "resp:proxy: option '%s' must be a %s", key,
                       lua_typename(L, known[i].type));
        lua_pop(L, 1);
    }
    lua_getfield(L, idx, "via");
    int vt = lua_type(L, -1);
    size_t vlen = 0;
    const char *via = vt == LUA_TSTRING ? lua_tolstring(L, -1, &vlen) : "";
    if ((vt != LUA_TNIL && vt != LUA_TBOOLEAN && vt != LUA_TSTRING) ||
        (vt == LUA_TSTRING &&
         (vlen == 0 || vlen > 64 || !mf_http_field_value_valid(via, vlen))))
        luaL_error(L, "resp:proxy: option 'via' must be true, false or a "
                      "name (1 to 64 bytes, no control bytes)");
    lua_pop(L, 1);
    lua_getfield(L, idx, "headers");
    if (lua_istable(L, -1)) {
        int h = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, h)) {
            size_t nlen, len;
            const char *name = lua_type(L, -2) == LUA_TSTRING
                                   ? lua_tolstring(L, -2, &nlen)
                                   : NULL;
            if (!name || !mf_http_field_name_valid(name, nlen))
                luaL_error(L, "resp:proxy: headers: a header name expected "
                              "as key");
            int t = lua_type(L, -1);
            const char *v = lua_tolstring(L, -1, &len);
            if (!(t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) &&
                ((t != LUA_TSTRING && t != LUA_TNUMBER) ||
                 !mf_http_field_value_valid(v, len)))
                luaL_error(L,
                           "resp:proxy: headers['%s']: a string, a "
                           "number or false expected",
                           name);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

/* The options at idx (checked) into o; via's name is on L's stack. */
static void mf__proxy_opts(lua_State *L, int idx, mf_http_forward_opts_t *o)
{
    lua_getfield(L, idx, "timeout");
    lua_Number ms = lua_isnil(L, -1) ? 0 : lua_tonumber(L, -1);
    if (!(ms >= 0 && ms <= 86400000))
        luaL_error(L, "resp:proxy: option 'timeout' must be 0 to 86400000 "
                      "ms");
    o->timeout_ms = (uint32_t)ms;
    lua_getfield(L, idx, "tries");
    lua_Number tries = lua_isnil(L, -1) ? 1 : lua_tonumber(L, -1);
    if (!(tries >= 1 && tries <= 16) || tries != (int)tries)
        luaL_error(L, "resp:proxy: option 'tries' must be an integer from 1 "
                      "to 16");
    o->tries = (int)tries;
    lua_pop(L, 2);
    lua_getfield(L, idx, "via"); /* left on the stack: o->via points in */
    if (lua_type(L, -1) == LUA_TSTRING)
        o->via = lua_tostring(L, -1);
    else if (lua_toboolean(L, -1))
        o->via = "moonflow";
}

/* opts.headers over the forward's: false removes, a value replaces. */
static void mf__proxy_headers(lua_State *L, int idx, mf_task_t *task)
{
    lua_getfield(L, idx, "headers");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    int h = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, h)) {
        const char *name = lua_tostring(L, -2);
        mf_task_http_remove_header(task, name);
        if (lua_type(L, -1) != LUA_TBOOLEAN)
            mf_task_http_add_header(task, name, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Whether the URL names a path (or a query) after its host. */
static bool mf__url_has_path(const char *url)
{
    const char *auth = strstr(url, "://");
    return auth && auth[3 + strcspn(auth + 3, "/?#")] != '\0';
}

/* resp:proxy(url [, opts]): the request forwarded to url, its answer
 * relayed as it comes; waits until it is over. */
static int mf__resp_proxy(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    size_t len;
    const char *url = mf_lua_check_lstring(L, 2, &len);
    if (!(len > 7 && !strncasecmp(url, "http://", 7)) &&
        !(len > 8 && !strncasecmp(url, "https://", 8)))
        return mf_lua_arg_error(L, 2, "an http:// or https:// URL expected");
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_istable(L, 3))
            return mf_lua_type_error(L, 3, "table");
        mf__proxy_check_opts(L, 3);
    }
    if (request->sent || request->streaming || request->proxying)
        return luaL_error(L, "the response was already sent");
    if (!request->ex)
        return mf__resp_closed(L, request, true);
    mf_lua_co_t *co = mf_lua_co_check(L);
    if (co != request->co) /* a thread: the handler would answer meanwhile */
        return luaL_error(L, "resp:proxy: from the handler itself only, not "
                             "from a thread of it");
    mf_http_forward_opts_t o;
    mf_http_forward_opts_init(&o);
    if (!lua_isnoneornil(L, 3))
        mf__proxy_opts(L, 3, &o);
    const mf_serve_config_t *c = request->w->config;
    o.proto = c->http.tls.cert_file ? "https" : "http";
    o.whole_url = mf__url_has_path(url);
    mf_task_t *task = mf_task_http_forward_with(request->ex, url, &o,
                                                mf__proxy_done, request);
    if (!lua_isnoneornil(L, 3))
        mf__proxy_headers(L, 3, task);
    mf_serve_request_add_id(request);
    request->proxying = true;
    request->proxy = task;
    request->proxy_co = co;
    mf_lua_co_park(co, mf__proxy_cleanup, request);
    mf_task_start(task);
    return lua_yield(L, 0);
}

/* resp's properties (status, headers, sent): the fallback of its __index,
 * which finds the methods first in a table (serve.lua), without a C call. */
static int mf__resp_property(lua_State *L)
{
    mf_serve_request_t *request =
        mf_serve_object_request(mf_serve_check_object(L, 1, 1));
    size_t len;
    const char *key = mf_lua_check_lstring(L, 2, &len);
    if (len == 6 && !memcmp(key, "status", 6)) {
        lua_pushinteger(L, request ? request->status : 0);
        return 1;
    }
    if (len == 7 && !memcmp(key, "headers", 7)) {
        if (!request)
            return luaL_error(L, "the request is over");
        mf__push_resp_headers(L, request);
        return 1;
    }
    if (len == 4 && !memcmp(key, "sent", 4)) {
        lua_pushboolean(L, !request || request->sent);
        return 1;
    }
    if (len == 12 && !memcmp(key, "headers_sent", 12)) {
        lua_pushboolean(L, !request || request->sent || request->streaming);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int mf__resp_newindex(lua_State *L)
{
    mf_serve_request_t *request = mf__check_resp(L);
    const char *key = mf_lua_check_string(L, 2);
    if (!strcmp(key, "status")) {
        int status = mf__check_status(L, 3);
        if (request->sent || request->streaming)
            return luaL_error(L, "the status was already sent");
        mf__set_status(request, status);
        return 0;
    }
    return luaL_error(L, "resp.%s cannot be set", key);
}

/* ---- phases: what moonflow.serve's Lua side asks ---------------------------
 */

static const char *const mf__phase_names[] = {
    [MF_SERVE_PHASE_CONTENT] = "content",
    [MF_SERVE_PHASE_REWRITE] = "rewrite",
    [MF_SERVE_PHASE_ACCESS] = "access",
    [MF_SERVE_PHASE_HEADER_FILTER] = "header_filter",
    [MF_SERVE_PHASE_BODY_FILTER] = "body_filter",
    [MF_SERVE_PHASE_LOG] = "log"};

static mf_serve_worker_t *mf__phase_worker(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* phase() -> the running code's phase: its request's, or init,
 * init_worker, timer for code that serves no request. */
static int mf__serve_phase(lua_State *L)
{
    mf_serve_worker_t *w = mf__phase_worker(L);
    const mf_serve_object_t *obj =
        mf_serve_current_object(w, MF_SERVE_KEEP_REQ);
    if (!obj)
        lua_pushstring(L, w->phase_outside);
    else
        lua_pushstring(
            L, mf__phase_names[obj->thread ? obj->phase : obj->request->phase]);
    return 1;
}

static mf_serve_request_t *mf__phase_request(lua_State *L, const char *what)
{
    mf_serve_request_t *request = mf_serve_current_request(mf__phase_worker(L));
    if (!request)
        luaL_error(L,
                   "%s: no request here (a handler or one of its phases "
                   "has one)",
                   what);
    return request;
}

/* request() -> req, resp, phase name, whether the route has phases,
 * whether the running coroutine is a thread of the request; or nothing
 * outside a request. */
static int mf__serve_request(lua_State *L)
{
    mf_serve_worker_t *w = mf__phase_worker(L);
    const mf_serve_object_t *obj =
        mf_serve_current_object(w, MF_SERVE_KEEP_REQ);
    if (!obj)
        return 0;
    int *keep = mf_lua_co_keep(mf_lua_host_current(w->host));
    lua_rawgeti(L, LUA_REGISTRYINDEX, keep[MF_SERVE_KEEP_REQ]);
    lua_rawgeti(L, LUA_REGISTRYINDEX, keep[MF_SERVE_KEEP_RESP]);
    lua_pushstring(
        L, mf__phase_names[obj->thread ? obj->phase : obj->request->phase]);
    lua_pushboolean(L, obj->request->phased);
    lua_pushboolean(L, obj->thread);
    return 5;
}

/* enter(n) -> the phase it leaves: the runner's step to phase n. */
static int mf__serve_enter(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "phase");
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= MF_SERVE_PHASE_LOG, 1, "a phase");
    lua_pushinteger(L, request->phase);
    request->phase = (uint8_t)n;
    return 1;
}

/* finish(): the end of the answer of a handler that returned (the
 * runner's last step, so that the filters see it). */
static int mf__serve_finish(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "finish");
    if (request->ex && !request->sent)
        mf__request_end(L, request);
    return 0;
}

static void mf__exit_cleanup(void *op)
{
    (void)op;
}

/* stop(): ends the running handler now, as if it had returned (ngx.exit
 * in a plain handler, after its answer): it parks, and the request's wake
 * aborts it on the loop. */
static int mf__serve_stop(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "ngx.exit");
    request->exiting = true;
    mf_lua_co_park(request->co, mf__exit_cleanup, request);
    mf__request_wake(request);
    return lua_yield(L, 0);
}

/* ngx.exit in code that serves no request (a timer, init, a thread): the
 * coroutine parks, and a timer of its own aborts it on the loop. The park's
 * cleanup (this abort, or the host's at a stop) lets go of the coroutine,
 * so a later timer never touches a dead one. */
typedef struct mf__exit_op {
    mf_timer_t timer;
    mf_lua_co_t *co;
    mf_loop_t *loop;
} mf__exit_op_t;

static void mf__exit_op_cleanup(void *op)
{
    ((mf__exit_op_t *)op)->co = NULL;
}

static void mf__exit_op_fire(mf_timer_t *timer)
{
    mf__exit_op_t *op = timer->data;
    if (op->co) /* its cleanup (mf__exit_op_cleanup) runs in here */
        mf_lua_co_abort(op->co, "ngx.exit");
    mf_loop_free(op->loop, op, sizeof(*op));
}

/* end(): ends the running coroutine (not a request's) at once. */
static int mf__serve_end(lua_State *L)
{
    mf_serve_worker_t *w = mf__phase_worker(L);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf__exit_op_t *op = mf_loop_alloc(w->loop, sizeof(*op));
    op->co = co;
    op->loop = w->loop;
    mf_timer_init(&op->timer, mf__exit_op_fire, op);
    mf_lua_co_park(co, mf__exit_op_cleanup, op);
    mf_timer_start(w->loop, &op->timer, 0);
    return lua_yield(L, 0);
}

/* on_abort(fn): fn runs in a coroutine of its own when the client leaves
 * (at once if it has). Returns true. */
static int mf__serve_on_abort(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "on_abort");
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    if (request->has_on_abort)
        mf_lua_unref(request->w->host, request->on_abort_ref);
    request->on_abort_ref = mf_lua_ref(request->w->host, L);
    request->has_on_abort = request->extras = true;
    if (request->client_gone) {
        request->abort_due = true;
        mf__request_wake(request);
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* at_end(fn): fn runs when the request is over, whatever ended it (an
 * answer, a raise, a timeout, a client gone, the server's stop), once its
 * handler, its log phase and its threads have all ended; in a protected
 * call of its own, where it cannot wait. */
static int mf__serve_at_end(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "at_end");
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    if (!request->has_at_end) {
        lua_createtable(L, 2, 0);
        request->at_end_ref = mf_lua_ref(request->w->host, L);
        request->has_at_end = request->extras = true;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->at_end_ref);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    return 0;
}

/* peer_key() -> the client's IP address as its 4 or 16 bytes: a limit's
 * key by address without formatting it (inet_ntop and its sprintf cost
 * more than the rest of a limit check). */
static int mf__serve_peer_key(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "peer_key");
    const mf_sockaddr_t *peer = mf_serve_request_peer(request);
    if (peer->sa.sa_family == AF_INET6)
        lua_pushlstring(L, (const char *)&peer->in6.sin6_addr, 16);
    else
        lua_pushlstring(L, (const char *)&peer->in4.sin_addr, 4);
    return 1;
}

/* dict_ptr(name) -> the process's shared dict of that name as a light
 * userdata, or nil: for limit_peer, looked up once when a route compiles
 * (the registry's lookup takes its mutex). */
static int mf__serve_dict_ptr(lua_State *L)
{
    mf_shdict_t *d = mf_lua_shared_find(luaL_checkstring(L, 1));
    if (!d)
        return 0;
    lua_pushlightuserdata(L, d);
    return 1;
}

/* limit_peer(dict, rate, burst, prefix) -> excess, or nil and why ("rejected"):
 * a route's local limit.req keyed by prefix and the client's address bytes
 * in one call (the usual route limit; moonflow.limit's route() makes the
 * arguments: dict from dict_ptr). */
static int mf__serve_limit_peer(lua_State *L)
{
    mf_serve_request_t *request = mf__phase_request(L, "limit_peer");
    mf_shdict_t *d = lua_touserdata(L, 1);
    size_t plen;
    const char *prefix = lua_tolstring(L, 4, &plen);
    char key[512 + 16];
    if (!d || !prefix || plen > 512)
        return luaL_error(L, "limit_peer: a dict and a prefix expected");
    const mf_sockaddr_t *peer = mf_serve_request_peer(request);
    bool v6 = peer->sa.sa_family == AF_INET6;
    size_t alen = v6 ? 16 : 4;
    memcpy(key, prefix, plen);
    memcpy(key + plen,
           v6 ? (const void *)&peer->in6.sin6_addr
              : (const void *)&peer->in4.sin_addr,
           alen);
    mf_shdict_leaky_t in = {.rate = lua_tonumber(L, 2),
                            .burst = lua_tonumber(L, 3),
                            .mode = MF_SHDICT_LEAKY_COMMIT,
                            .now_ms = -1};
    double excess = 0;
    int rc = mf_shdict_leaky(d, key, plen + alen, &in, &excess);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, mf_shdict_strerror(rc));
        return 2;
    }
    lua_pushnumber(L, excess);
    return 1;
}

/* reason(status) -> "403 Forbidden\n": the body of an ngx.exit answer. */
static int mf__serve_reason(lua_State *L)
{
    int status = (int)luaL_checkinteger(L, 1);
    lua_pushfstring(L, "%d %s\n", status, mf_http_reason(status));
    return 1;
}

/* Gives moonflow.serve (on top of L) its C side and takes its runners. */
static void mf__phases_open(mf_serve_worker_t *w, lua_State *L)
{
    static const luaL_Reg funcs[] = {{"phase", mf__serve_phase},
                                     {"request", mf__serve_request},
                                     {"enter", mf__serve_enter},
                                     {"finish", mf__serve_finish},
                                     {"stop", mf__serve_stop},
                                     {"end", mf__serve_end},
                                     {"on_abort", mf__serve_on_abort},
                                     {"at_end", mf__serve_at_end},
                                     {"peer_key", mf__serve_peer_key},
                                     {"dict_ptr", mf__serve_dict_ptr},
                                     {"limit_peer", mf__serve_limit_peer},
                                     {"reason", mf__serve_reason},
                                     {NULL, NULL}};
    int m = lua_gettop(L);
    lua_getfield(L, m, "install"); /* install(c): the Lua side's runners */
    lua_newtable(L);
    lua_pushlightuserdata(L, w);
    luaL_openlib(L, NULL, funcs, 1);
    lua_call(L, 1, 0);
    static const char *const runners[] = {"run", "run_log", "header_filter",
                                          "body_filter"};
    int *refs[] = {&w->run_ref, &w->log_ref, &w->header_filter_ref,
                   &w->body_filter_ref};
    for (int i = 0; i < 4; i++) {
        lua_getfield(L, m, runners[i]);
        *refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    w->phase_outside = "init";
}

void mf_serve_handler_open(mf_serve_worker_t *w)
{
    lua_State *L = mf_lua_host_state(w->host);
    mf_serve_objects_open(w);
    /* request: __index(upvalues: metatable, req:header) */
    luaL_newmetatable(L, MF_SERVE_REQUEST_MT);
    lua_pushvalue(L, -1);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, mf_serve_req_header, 1);
    mf_lua_name(L, "req:header(name)");
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, mf_serve_req_form, 1);
    mf_lua_name(L, "req:form([max])");
    lua_pushcclosure(L, mf_serve_req_index, 3);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    /* response: methods(upvalue: metatable); __index from serve.lua
     * (methods, then mf__resp_property); __newindex(metatable) */
    luaL_newmetatable(L, mf__resp_mt);
    int mt = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "moonflow.serve");
    lua_call(L, 1, 1); /* the Lua side: methods, index, headers_mt */
    mf__phases_open(w, L);
    static const luaL_Reg methods[] = {
        {"send resp:send([body])", mf__resp_send},
        {"write resp:write(chunk)", mf__resp_write},
        {"redirect resp:redirect(url [, status])", mf__resp_redirect},
        {"proxy resp:proxy(url [, opts])", mf__resp_proxy},
        {"json resp:json(value [, status])", mf__resp_json},
        {"set_header resp:set_header(name, value)", mf__resp_set_header},
        {"set_trailer resp:set_trailer(name, value)", mf__resp_set_trailer},
        {"file resp:file(path [, opts])", mf_serve_resp_file},
        {NULL, NULL}};
    lua_getfield(L, -1, "response");
    lua_pushvalue(L, mt);
    mf_lua_register_up(L, methods, 1);
    lua_getfield(L, -2, "fast_send"); /* send: mf_serve_resp_send_ffi first */
    lua_getfield(L, -2, "send");
    lua_call(L, 1, 1);
    lua_setfield(L, -2, "send");
    lua_getfield(L, -2, "index"); /* index(methods, property) */
    lua_insert(L, -2);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, mf__resp_property, 1);
    lua_call(L, 2, 1);
    lua_setfield(L, mt, "__index");
    lua_getfield(L, -1, "headers_mt");
    lua_setfield(L, LUA_REGISTRYINDEX, "moonflow.headers");
    lua_pop(L, 1);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, mf__resp_newindex, 1);
    lua_setfield(L, mt, "__newindex");
    lua_settop(L, mt - 1);
    luaL_getmetatable(L, MF_SERVE_REQUEST_MT);
    w->req_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    luaL_getmetatable(L, mf__resp_mt);
    w->resp_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}
