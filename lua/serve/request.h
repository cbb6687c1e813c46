/*
 * lua/serve/request.h — one request served by a Lua handler, as handler.c
 * (the coroutine, the answer) and request.c (the `req` object, the request
 * id) share it. Internal to serve.
 *
 * Ownership: handler.c makes the record (from the loop's free lists) and
 * frees it when the handler's coroutine (or its log phase's) and the
 * threads they spawned have ended; the Lua objects point to it
 * until then (see handler.c). request.c only reads it, and fills its lazily
 * computed parts: the field cache and the id.
 */
#ifndef MF_SERVE_REQUEST_H
#define MF_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <lua.h>

#include "serve.h"

typedef struct mf_serve_request mf_serve_request_t;
typedef struct mf_serve_trace mf_serve_trace_t;

/* A request's head, body and peer copied out of its exchange (one
 * allocation: this, the header array, the head's bytes, the body), so
 * that req answers once the exchange is gone. */
typedef struct mf_serve_kept_head {
    mf_http_request_t head; /* its pointers into the bytes below */
    const char *body;
    size_t body_len;
    mf_sockaddr_t peer;
    uint16_t port; /* the server's, for req.server_addr */
} mf_serve_kept_head_t;

/* Where a request is (moonflow.serve.phase(), ngx.get_phase()). A plain
 * handler runs in CONTENT, the zero of a fresh record. */
typedef enum mf_serve_phase {
    MF_SERVE_PHASE_CONTENT = 0,
    MF_SERVE_PHASE_REWRITE,
    MF_SERVE_PHASE_ACCESS,
    MF_SERVE_PHASE_HEADER_FILTER,
    MF_SERVE_PHASE_BODY_FILTER,
    MF_SERVE_PHASE_LOG
} mf_serve_phase_t;

/* req or resp: made once per coroutine thread and kept with it
 * (mf_lua_co_keep), so a request allocates no Lua object. request is the
 * one the thread serves now; an object is usable only by the coroutine
 * that owns that request (mf_serve_object_request), so one kept past its
 * request can never reach another request's answer. */
typedef struct mf_serve_object {
    mf_serve_request_t *request; /* NULL between requests */
    /* The thread is one the request's code spawned (mf.spawn,
     * ngx.thread.spawn), bound to request until it ends; phase: the phase
     * of the code that spawned it, which the thread reports. */
    bool thread;
    uint8_t phase;
} mf_serve_object_t;

struct mf_serve_request {
    mf_serve_worker_t *w;
    mf_http_exchange_t *ex; /* NULL once answered or the client is gone */
    mf_lua_co_t *co;        /* NULL once the coroutine has ended */
    mf_serve_object_t *req;
    mf_serve_object_t *resp;
    int status;
    bool sent;      /* the answer (or its end) is queued */
    bool streaming; /* resp:write started a chunked answer */
    bool timed_out;
    /* The request lives on without its exchange (the client left, or a
     * route with phases answered): req reads kept_head. */
    bool kept;
    bool client_gone;
    bool write_parked;  /* resp:write waits for the client to drain */
    bool abort_stop;    /* the route's on_abort = "stop" */
    bool head_filtered; /* the header filter has run */
    bool exiting;       /* ngx.exit ended a plain handler: as if returned */
    bool abort_due;     /* the client left: on_abort runs at the wake */
    bool log_due;       /* the handler ended: the log phase starts then */
    bool wake_made;     /* wake is initialized */
    bool extras;   /* phases_ref, on_abort_ref, at_end_ref or wake to let go */
    uint8_t phase; /* mf_serve_phase_t */
    bool phased;   /* a route with phases: phases_ref is set */
    bool has_on_abort; /* on_abort_ref is set */
    bool has_at_end;   /* at_end_ref is set */
    bool refused;      /* the server refused the body as it was read: status */
    bool proxying;     /* resp:proxy's forward runs: proxy, proxy_co valid */
    /* Threads its code spawned that still run: the record outlives its
     * coroutine until they end (its log phase waits for them). */
    uint32_t threads;
    mf_lua_co_t *writer; /* the coroutine a parked resp:write holds */
    size_t bytes;
    int headers_ref; /* resp.headers, created on first use */
    int fields_ref;  /* req.query/headers/body, computed on first use */
    mf_serve_trace_t *trace; /* trace.c: a sampled request's; NULL */
    uint8_t id_len;  /* the id in id[], 0: not written yet */
    char id[MF_SERVE_ID_MAX + 1];
    /* Past the part a new record zeroes: */
    /* set as the record is made */
    struct timespec start;
    uint64_t start_ms; /* the loop's time at the start (req.start_time) */
    mf_timer_t timer;  /* the handler timeout */
    uint64_t serial;   /* this worker's count of requests: a made id's end */
    /* A route with phases: its table (held by the request until the log
     * phase ends, whatever reloads do); valid when phased. */
    int phases_ref;
    char serial_hex[16]; /* serial's digits, copied at the start */
    int on_abort_ref; /* a function run when the client leaves */
    int at_end_ref;   /* functions run as the record goes (serve.at_end) */
    mf_serve_kept_head_t *kept_head; /* valid when kept; freed with it */
    uint32_t timeout_ms;   /* the handler's, when phased: the log phase's too */
    mf_task_t *proxy;      /* resp:proxy's forward, while proxying */
    mf_lua_co_t *proxy_co; /* the coroutine it resumes; NULL: aborted */
    mf_timer_t wake; /* made when needed (wake_made): a client gone, an exit */
    /* "X-Request-Id: ID\r\n", written where the answer's head is set and
     * handed to the exchange by reference (it is copied out as the head
     * goes, in the same call): no copy into the exchange's header buffer,
     * which a plain answer does not need otherwise. */
    char id_line[MF_SERVE_ID_HEADER_MAX + MF_SERVE_ID_MAX + 5];
};

/* Takes the request's id from its head (a valid X-Request-Id: 1 to 128
 * bytes of [A-Za-z0-9._~:/+=@-]) or, without one, reserves the next serial
 * of the worker, whose id is written on first use. Cheap: a look at the
 * headers whose name has the right length. */
void mf_serve_request_id_start(mf_serve_request_t *request,
                               const mf_http_request_t *head);
/* The request's id (NUL-terminated, in the record). */
const char *mf_serve_request_id(mf_serve_request_t *request);
/* Adds the request id's header (the config's request_id_header, unless
 * off) to the answer about to be sent, from request->id_line. */
void mf_serve_request_add_id(mf_serve_request_t *request);

/* Copies the exchange's head, body and peer (mf_serve_kept_head_t), so
 * that req answers once the exchange is gone; sets kept. The record frees
 * the copy (kept_head, when kept). */
void mf_serve_request_keep(mf_serve_request_t *request);
/* The request whose handler (or phase) the running coroutine is, or one
 * of whose threads it is; or NULL. */
mf_serve_request_t *mf_serve_current_request(mf_serve_worker_t *w);
/* The client's address (kept after it left). */
const mf_sockaddr_t *mf_serve_request_peer(const mf_serve_request_t *request);
/* The running coroutine's object keep[slot] when it is bound to a request
 * (its handler's, or a thread of it); else NULL. */
mf_serve_object_t *mf_serve_current_object(mf_serve_worker_t *w, int slot);

/* The request obj is bound to, if the running coroutine is the one
 * handling it (or a flow callback of it); else NULL. */
mf_serve_request_t *mf_serve_object_request(const mf_serve_object_t *obj);
/* The object at idx (its metatable the one in upvalue mt_up of the
 * running C function) and its live request; raises otherwise. */
mf_serve_object_t *mf_serve_check_object(lua_State *L, int idx, int mt_up);
mf_serve_request_t *mf_serve_check_request(lua_State *L, int idx, int mt_up);
/* mf_serve_check_request(L, 1, 1) for a method of the class kept in slot
 * (MF_SERVE_KEEP_REQ, _RESP): the running coroutine's own object is known
 * by its address, with no metatable check. */
mf_serve_request_t *mf_serve_check_kept_request(lua_State *L, int slot);
/* The worker whose loop runs on this thread (mf_serve_objects_open). */
extern _Thread_local const mf_serve_worker_t *mf_serve__thread_worker;

/* The coroutine the calling thread's worker is running now, or NULL. */
static inline mf_lua_co_t *mf_serve_running_co(void)
{
    const mf_serve_worker_t *w = mf_serve__thread_worker;
    return w && w->host ? mf_lua_host_current(w->host) : NULL;
}

/* The request obj (a userdata's address) is bound to, when obj is the
 * running coroutine's own object of slot (only serve's objects are noted
 * there, handler.c, so the address alone proves its class) and that
 * coroutine handles the live request; else NULL (a thread's object,
 * another's, none). Touches no Lua state. Inline: every resp:send and
 * req field read asks it. */
static inline mf_serve_request_t *mf_serve_kept_request_of(const void *obj,
                                                           int slot)
{
    mf_lua_co_t *co = mf_serve_running_co();
    if (!co || !obj || obj != mf_lua_co_keep_ptrs(co)[slot])
        return NULL;
    mf_serve_request_t *request = ((const mf_serve_object_t *)obj)->request;
    return request && request->co == co && (request->ex || request->kept)
               ? request
               : NULL;
}
/* The worker of the calling thread, for mf_serve_check_kept_request (as
 * its host opens). */
void mf_serve_objects_open(mf_serve_worker_t *w);

/* req's methods and __index (upvalues 1: the metatable; 2, 3: req:header
 * and req:form for __index), for handler.c to register. */
int mf_serve_req_header(lua_State *L);
int mf_serve_req_form(lua_State *L);
int mf_serve_req_index(lua_State *L);
/* downstream.c: req:socket([raw]) (upvalue 1: the metatable). */
int mf_serve_req_socket(lua_State *L);
/* websocket.c: req:websocket([options]) (upvalue 1: the metatable). */
int mf_serve_req_websocket(lua_State *L);
/* trailers.c: req:trailers() (upvalue 1: the metatable). */
int mf_serve_req_trailers(lua_State *L);
/* handler.c: answers the request now with status and text (text/plain),
 * headers added to the exchange before kept: a refused upgrade. */
void mf_serve_request_refuse(mf_serve_request_t *request, int status,
                             const char *text);

/* The exchange of a request that a connection object (req:socket,
 * req:websocket) was made for, while the request lasts (its handler runs
 * and has not answered, or holds the raw connection), else NULL. The
 * record is only read once the req object says it is still the one the
 * object saw: the serial tells a later request in the same thread. */
static inline mf_http_exchange_t *
mf_serve_request_live(const mf_serve_object_t *req,
                      const mf_serve_request_t *request, uint64_t serial)
{
    if (req->request != request || request->serial != serial || !request->co)
        return NULL;
    return request->ex;
}
/* handler.c: puts the response head (resp.status, resp.headers, the id's
 * header) into the exchange, for req:socket(true) to send: 0, or -1 when
 * a header cannot be sent (reported; the answer becomes a 500). */
int mf_serve_request_set_head(lua_State *L, mf_serve_request_t *request);
/* handler.c: resp:file's head: resp.headers (has_type: one of them is a
 * Content-Type) and the id's header; 0, or -1 as above. */
int mf_serve_request_file_head(lua_State *L, mf_serve_request_t *request,
                               bool *has_type);
/* static.c: resp:file(path [, opts]) (upvalue 1: the metatable). */
int mf_serve_resp_file(lua_State *L);

/* trace.c: the trace of a request, when the config asks for one and it is
 * sampled (NULL otherwise): begun as its coroutine is made, told its
 * answer, and let go when its coroutine ends; its line is written once
 * every task it saw is released too. */
mf_serve_trace_t *mf_serve_trace_begin(mf_serve_request_t *request,
                                       const mf_http_request_t *head);
mf_task_trace_t *mf_serve_trace_context(mf_serve_trace_t *t);
void mf_serve_trace_answered(mf_serve_trace_t *t, int status);
void mf_serve_trace_end(mf_serve_trace_t *t);

#endif /* MF_SERVE_REQUEST_H */
