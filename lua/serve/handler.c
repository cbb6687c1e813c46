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
 * that goes away aborts the coroutine (its pending task is canceled), is
 * logged 499 (nginx's code), and the exchange is forgotten. A path without
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

/* The access log line and the metrics of an exchange about to end; from
 * here on the handler's side wants no on_close call. request: the record
 * of a handler's request, NULL for an answer without one (id: its id). */
static void mf__exchange_log(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             int status, size_t bytes,
                             const struct timespec *start,
                             mf_serve_request_t *request, const char *id)
{
    mf_http_exchange_on_close(ex, NULL, NULL);
    mf__exchange_account(w, ex, request, id, status, bytes,
                         mf__seconds_since(w, start));
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
        request->ex ? mf_http_exchange_request(request->ex) : NULL;
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

/* Status, headers, the Content-Type line given (a literal) and the id's
 * header unless resp.headers has them, before the first byte. 0, or -1
 * when the headers cannot be sent (reported). */
static int mf__request_set_head(lua_State *L, mf_serve_request_t *request,
                                const char *type_line, size_t type_len)
{
    bool has_type = false, has_id = false;
    if (mf__request_copy_headers(L, request, &has_type, &has_id) < 0)
        return -1;
    if (!has_type) /* a constant: no copy */
        mf_http_exchange_add_header_static(request->ex, type_line, type_len);
    if (!has_id)
        mf_serve_add_request_id(request->w, request->ex,
                                mf_serve_request_id(request));
    mf_http_exchange_set_status(request->ex, request->status);
    return 0;
}

int mf_serve_request_set_head(lua_State *L, mf_serve_request_t *request)
{
    return mf__request_set_head(L, request, "", 0); /* no Content-Type */
}

/* Sends the answer (or ends a streamed one) with body as its last bytes. */
static void mf__request_send(mf_serve_request_t *request, const char *body,
                             size_t len)
{
    mf_http_exchange_t *ex = request->ex;
    request->ex = NULL;
    request->sent = true;
    mf__exchange_send_logged(request->w, ex, request->status, request->bytes,
                             &request->start, body, len, request, NULL);
}

static void mf__request_fail(mf_serve_request_t *request, int status,
                             const char *text)
{
    mf_http_exchange_t *ex = request->ex;
    request->ex = NULL;
    request->sent = true;
    request->status = status;
    mf__exchange_send_plain(request->w, ex, status, text, &request->start,
                            request);
}

/* Ends an answer that cannot be completed (mf_http_exchange_abort): with
 * nothing sent yet it becomes the server's 500, logged as a 500 with the
 * body the server sends; a stream is cut and logged with the status and
 * bytes it had sent (as nginx logs it). */
static void mf__request_abort(mf_serve_request_t *request)
{
    mf_http_exchange_t *ex = request->ex;
    request->ex = NULL;
    request->sent = true;
    if (!request->streaming) {
        request->status = 500;
        request->bytes = mf_http_error_body_len(500);
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

static void mf__request_free(mf_serve_request_t *request)
{
    mf_loop_t *loop = request->w->loop;
    mf_timer_stop(loop, &request->timer);
    mf_lua_unref(request->w->host, request->headers_ref);
    mf_lua_unref(request->w->host, request->fields_ref);
    if (request->req->request == request)
        request->req->request = NULL;
    if (request->resp->request == request)
        request->resp->request = NULL;
    if (request->trace) /* its tasks may still hold it */
        mf_serve_trace_end(request->trace);
    mf_loop_free(loop, request, sizeof(*request));
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
    if (ex->status == MF_LUA_CO_DONE) {
        lua_State *L = mf_lua_host_state(request->w->host);
        if (!request->streaming &&
            mf__request_set_head(L, request, MF__TEXT_TYPE) < 0)
            mf__request_abort(request);
        else
            mf__request_send(request, NULL, 0);
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

/* The coroutine ended (returned, raised or was aborted): the one place a
 * request record is freed. */
static void mf__on_handler_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                                void *data)
{
    mf_serve_request_t *request = data;
    (void)co;
    request->co = NULL;
    if (ex->status == MF_LUA_CO_ERROR)
        mf__log_handler_error(request, ex->message);
    mf__request_answer_at_exit(request, ex);
    mf__request_free(request);
}

/* The client left before the answer was complete: logged as nginx does,
 * 499 when nothing was sent, else the status its stream had sent. */
static void mf__on_client_gone(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_request_t *request = arg;
    mf_serve_worker_t *w = request->w;
    int status = request->streaming ? request->status : 499;
    mf__exchange_account(w, ex, request, NULL, status, request->bytes,
                         mf__seconds_since(w, &request->start));
    request->ex = NULL; /* dead after this callback */
    if (request->co)
        mf_lua_co_abort(request->co, "client closed the connection");
}

static void mf__on_handler_timeout(mf_timer_t *timer)
{
    mf_serve_request_t *request = timer->data;
    request->timed_out = true;
    if (request->co)
        mf_lua_co_abort(request->co, "handler timeout");
}

/* ---- the handler -----------------------------------------------------------
 */

/* Pushes the thread's kept object keep[slot] (made on the thread's first
 * request), bound to request. */
static mf_serve_object_t *mf__push_object(lua_State *T, int *keep, int mt_ref,
                                          mf_serve_request_t *request)
{
    mf_serve_object_t *obj;
    if (*keep == LUA_NOREF) {
        obj = lua_newuserdata(T, sizeof(*obj));
        lua_rawgeti(T, LUA_REGISTRYINDEX, mt_ref);
        lua_setmetatable(T, -2);
        lua_pushvalue(T, -1);
        *keep = luaL_ref(T, LUA_REGISTRYINDEX);
    } else {
        lua_rawgeti(T, LUA_REGISTRYINDEX, *keep);
        obj = lua_touserdata(T, -1);
    }
    obj->request = request;
    return obj;
}

static mf_serve_request_t *mf__request_create(mf_serve_worker_t *w,
                                              mf_http_exchange_t *ex,
                                              const struct timespec *start)
{
    mf_serve_request_t *request = mf_loop_alloc(w->loop, sizeof(*request));
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

/* Runs the handler on top of the host's stack in a new coroutine, which
 * owns the request record from mf_lua_co_start_with on, with the request's
 * hooks (moonflow/lua_co.h): its log label, its id, its trace, its
 * deadline. */
static void mf__request_start(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                              uint32_t timeout, const struct timespec *start)
{
    mf_serve_request_t *request = mf__request_create(w, ex, start);
    mf_http_exchange_hold(ex);
    mf_http_exchange_on_close(ex, mf__on_client_gone, request);
    if (timeout)
        mf_timer_start(w->loop, &request->timer, timeout);
    request->co = mf_lua_host_prepare(w->host, mf__on_handler_exit, request);
    mf_lua_co_hooks_t hooks = {
        .describe = mf__describe_request,
        .describe_ud = request,
        .request_id = mf__request_id_of,
        .request_id_ud = request,
    };
    if (w->trace_fd >= 0) /* tracing on: maybe this one */
        request->trace =
            mf_serve_trace_begin(request, mf_http_exchange_request(ex));
    if (request->trace)
        hooks.trace = mf_serve_trace_context(request->trace);
    if (timeout) /* for Lua code still running then (the timer cannot fire) */
        hooks.deadline = mf_loop_now(w->loop) + timeout;
    lua_State *T = mf_lua_co_thread(request->co);
    lua_xmove(mf_lua_host_state(w->host), T, 1); /* the handler */
    int *keep = mf_lua_co_keep(request->co);     /* MF_SERVE_KEEP_REQ, _RESP */
    request->req = mf__push_object(T, &keep[0], w->req_mt_ref, request);
    request->resp = mf__push_object(T, &keep[1], w->resp_mt_ref, request);
    /* may free request: not touched after */
    mf_lua_co_start_with(request->co, 2, &hooks);
}

void mf_serve_handler_on_request(mf_http_exchange_t *ex, void *worker)
{
    mf_serve_worker_t *w = worker;
    const mf_http_request_t *head = mf_http_exchange_request(ex);
    struct timespec start = {0};
    uint32_t timeout;
    mf__clock_start(w, &start);
    if (w->mstate && mf_serve_metrics_is_page(w, head)) {
        mf_serve_metrics_answer(w, ex, &start);
        return;
    }
    switch (mf_serve_routes_push_handler(w->routes, mf_lua_host_state(w->host),
                                         head->path, head->path_len,
                                         &timeout)) {
    case MF_SERVE_ROUTE_FOUND:
        mf__request_start(
            w, ex, timeout ? timeout : w->config->handler_timeout_ms, &start);
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

/* ---- the response object ---------------------------------------------------
 */

/* Sends data (copied) as the whole body, with the type given unless
 * resp.headers has one. */
static int mf__resp_answer(lua_State *L, mf_serve_request_t *request,
                           const char *data, size_t len, const char *type,
                           size_t type_len)
{
    if (mf__request_set_head(L, request, type, type_len) < 0) {
        mf__request_abort(request); /* a 500, reported */
        return 0;
    }
    request->bytes = len;
    mf__request_send(request, data, len);
    return 0;
}

static int mf__resp_send_body(lua_State *L, mf_serve_request_t *request,
                              int body)
{
    if (request->streaming && !request->sent && lua_isnoneornil(L, body)) {
        mf__request_send(request, NULL, 0); /* the stream's last chunk */
        return 0;
    }
    if (request->sent || request->streaming)
        return luaL_error(L, "the response was already sent");
    size_t len = 0;
    const char *data =
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
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    mf_lua_check_any(L, 2);
    int status = lua_isnoneornil(L, 3) ? 0 : mf__check_status(L, 3);
    if (request->sent || request->streaming)
        return luaL_error(L, "the response was already sent");
    size_t len;
    const char *body = mf_lua_json_encode(L, 2, &len);
    if (status)
        request->status = status;
    return mf__resp_answer(L, request, body, len, MF__JSON_TYPE);
}

static int mf__resp_send(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    return mf__resp_send_body(L, request, 2);
}

static int mf__resp_redirect(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    size_t len;
    const char *url = mf_lua_check_lstring(L, 2, &len);
    int status = (int)mf_lua_opt_integer(L, 3, 302);
    if (!mf_http_field_value_valid(url, len))
        return mf_lua_arg_error(L, 2, "a URL without control bytes expected");
    if (status < 300 || status > 399)
        return mf_lua_arg_error(L, 3, "a 3xx status expected");
    if (mf_http_exchange_add_header(request->ex, "Location", 8, url, len) < 0) {
        mf__request_abort(request); /* no memory: a 500, reported */
        return 0;
    }
    request->status = status;
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
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
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

static void mf__write_cleanup(void *op)
{
    mf_serve_request_t *request = op;
    if (request->ex)
        mf_http_exchange_on_drain(request->ex, NULL, NULL);
}

static void mf__on_drain(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_request_t *request = arg;
    (void)ex;
    if (!request->co)
        return;
    mf_lua_co_unpark(request->co);
    lua_pushboolean(mf_lua_co_thread(request->co), 1);
    mf_lua_co_resume(request->co, 1);
}

/* Streams a piece (chunked). Waits (yields) while the client is slow. */
static int mf__resp_write(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    size_t len;
    const char *data = mf_lua_check_lstring(L, 2, &len);
    if (request->sent)
        return luaL_error(L, "the response was already sent");
    int rc = 0;
    if (!request->streaming) {
        rc = mf__request_set_head(L, request, MF__TEXT_TYPE);
        request->streaming = rc == 0;
    }
    if (rc == 0) {
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
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    mf_lua_co_park(request->co, mf__write_cleanup, request);
    mf_http_exchange_on_drain(request->ex, mf__on_drain, request);
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
    lua_pushnil(L);
    return 1;
}

static int mf__resp_newindex(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    const char *key = mf_lua_check_string(L, 2);
    if (!strcmp(key, "status")) {
        int status = mf__check_status(L, 3);
        if (request->sent || request->streaming)
            return luaL_error(L, "the status was already sent");
        request->status = status;
        return 0;
    }
    return luaL_error(L, "resp.%s cannot be set", key);
}

void mf_serve_handler_open(mf_serve_worker_t *w)
{
    lua_State *L = mf_lua_host_state(w->host);
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
    static const luaL_Reg methods[] = {
        {"send resp:send([body])", mf__resp_send},
        {"write resp:write(chunk)", mf__resp_write},
        {"redirect resp:redirect(url [, status])", mf__resp_redirect},
        {"json resp:json(value [, status])", mf__resp_json},
        {"set_header resp:set_header(name, value)", mf__resp_set_header},
        {NULL, NULL}};
    lua_getfield(L, -1, "response");
    lua_pushvalue(L, mt);
    mf_lua_register_up(L, methods, 1);
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
