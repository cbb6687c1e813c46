/*
 * lua/serve/websocket.c — req:websocket(options): the opening handshake
 * of RFC 6455 (§4.2) and the server's WebSocket (userdata
 * "moonflow.websocket"): ws:recv(), ws:send_text, ws:send_binary,
 * ws:ping, ws:close, ws.protocol.
 *
 * The handshake is checked before anything is sent; a request that is
 * not a WebSocket upgrade is answered 400 (426 for another version, with
 * Sec-WebSocket-Version: 13) and req:websocket returns nil and the
 * reason. An accepted one is answered 101 through the exchange's upgrade
 * (mf_http_exchange_upgrade), whose raw connection this object drives as
 * downstream.c drives req:socket(true): bytes from mf_http_exchange_read,
 * woken by mf_http_exchange_on_readable, frames out through
 * mf_http_exchange_write with its drain for backpressure.
 *
 * Frames are read with the codec (moonflow/websocket.h). A read goes to
 * a buffer on the C stack, and whole frames are taken from there: only
 * the bytes of a frame still arriving, and a fragmented message still
 * open, are kept on the heap, and freed once used, so an idle socket
 * holds no buffer. With permessage-deflate (the compress option and the
 * client's offer) a message is inflated whole once its last frame is in
 * and sent deflated when long enough (websocket_deflate.c: the worker's
 * zlib streams, none per socket). A ping is answered with a pong at once, a
 * close with its code echoed (§5.5.1); a protocol error closes with 1002, bad
 * UTF-8 with 1007, a message past max_payload with 1009, and recv answers nil
 * and the reason once; after the close every call answers "closed".
 *
 * One recv and one send may wait at a time, in two threads of the request
 * (a reader and a writer, as with req:socket). The object is usable while
 * the request lasts; the server closes the connection when the handler
 * ends.
 *
 * May call: the HTTP exchange API, the frame codec, the Lua host,
 * request.h.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_co.h>
#include <moonflow/lua_host.h>
#include <moonflow/websocket.h>

#include "request.h"
#include "websocket_deflate.h"

#define MF_WS_MT "moonflow.websocket"
/* Bytes of one read (on the C stack). */
#define MF_WS_READ 8192
/* Messages shorter than this go uncompressed even with permessage-deflate
 * (the bytes saved would not pay for the work). */
#define MF_WS_DEFLATE_MIN 64
/* max_payload when the options give none (lua-resty-websocket's). */
#define MF_WS_MAX_PAYLOAD_DEFAULT 65535
#define MF_WS_WAIT (-1)
#define MF_WS_AGAIN (-2) /* a frame was taken that answers nothing yet */

typedef struct mf_ws {
    mf_serve_object_t *req;      /* the handler thread's req object */
    mf_serve_request_t *request; /* valid while req->request is it */
    uint64_t serial;             /* and has this serial */
    mf_loop_t *loop;
    mf_lua_co_t *rd, *wr; /* parked on a recv, on a send */
    mf_timer_t timer;     /* a parked recv's timeout */
    mf_timer_t pinger;    /* ping_interval */
    uint32_t timeout_ms, ping_ms;
    uint64_t due;     /* a parked recv's timeout, loop time (0: none) */
    int protocol_ref; /* the subprotocol chosen, or LUA_NOREF */
    mf_ws_zlib_t *z;  /* the worker's, with permessage-deflate; else NULL */
    unsigned deflate_bits; /* our window with permessage-deflate */
    bool close_sent, close_heard;
    bool failed; /* a protocol error or a silent peer ended it */
    bool eof;
    bool heard;   /* a frame came since the last keepalive ping */
    bool checked; /* the head at the front passed mf_ws_reader_frame */
    mf_ws_reader_t reader;
    mf_ws_frame_t frame; /* the head at the front, once checked */
    /* the bytes of a frame still arriving: [0, pend_len) of pend_cap */
    uint8_t *pend;
    size_t pend_len, pend_cap;
    /* a fragmented message so far: its opcode (| 0x80 when compressed) */
    uint8_t *msg;
    size_t msg_len, msg_cap;
    uint8_t msg_op;
} mf_ws_t;

/* ---- state --------------------------------------------------------------- */

static mf_http_exchange_t *mf__ws_live(const mf_ws_t *s)
{
    return mf_serve_request_live(s->req, s->request, s->serial);
}

static void mf__ws_free_buffers(mf_ws_t *s)
{
    free(s->pend);
    free(s->msg);
    s->pend = s->msg = NULL;
    s->pend_len = s->pend_cap = s->msg_len = s->msg_cap = 0;
}

static int mf__ws_fail(lua_State *L, const char *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

/* Grows *buf to hold need bytes (it keeps what it has). */
static bool mf__ws_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return false;
    *buf = p;
    *cap = n;
    return true;
}

/* ---- frames out ---------------------------------------------------------- */

/* Queues one whole frame (compressed: RSV1 set): 0, 1 above the high
 * water mark, or < 0. */
static int mf__ws_write_frame(mf_http_exchange_t *ex, unsigned op,
                              bool compressed, const void *p, size_t n)
{
    uint8_t head[MF_WS_HEAD_MAX];
    size_t hl = mf_ws_build_head(head, true, op, n);
    if (compressed)
        head[0] |= 0x40;
    int rc = mf_http_exchange_write(ex, head, hl);
    if (rc >= 0 && n)
        rc = mf_http_exchange_write(ex, p, n);
    return rc;
}

static int mf__ws_write(mf_http_exchange_t *ex, unsigned op, const void *p,
                        size_t n)
{
    return mf__ws_write_frame(ex, op, false, p, n);
}

/* A data message: compressed when permessage-deflate is on and it is
 * worth it (zlib failing sends it plain). */
static int mf__ws_write_message(mf_ws_t *s, mf_http_exchange_t *ex, unsigned op,
                                const void *p, size_t n)
{
    const uint8_t *z;
    size_t zn;
    if (s->z && n >= MF_WS_DEFLATE_MIN &&
        mf_ws_zlib_deflate(s->z, s->deflate_bits, p, n, &z, &zn) == 0)
        return mf__ws_write_frame(ex, op, true, z, zn);
    return mf__ws_write(ex, op, p, n);
}

static void mf__ws_send_close(mf_ws_t *s, mf_http_exchange_t *ex, unsigned code,
                              const char *reason)
{
    uint8_t p[MF_WS_CONTROL_MAX];
    size_t n = mf_ws_close_build(p, code, reason, reason ? strlen(reason) : 0);
    s->close_sent = true;
    if (ex)
        mf__ws_write(ex, MF_WS_OP_CLOSE, p, n);
}

/* The stream broke a rule (code < 0 from the codec): the close that says
 * which, and nil and the reason for recv. */
static int mf__ws_broken(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                         int code)
{
    const char *why = code == -MF_WS_CLOSE_BAD_DATA  ? "invalid utf-8"
                      : code == -MF_WS_CLOSE_TOO_BIG ? "message too big"
                                                     : "protocol error";
    if (!s->close_sent)
        mf__ws_send_close(s, ex, (unsigned)-code, why);
    s->failed = true;
    mf__ws_free_buffers(s);
    return mf__ws_fail(L, why);
}

/* ---- frames in ----------------------------------------------------------- */

static const char *mf__ws_type(unsigned op)
{
    switch (op) {
    case MF_WS_OP_TEXT:
        return "text";
    case MF_WS_OP_BINARY:
        return "binary";
    case MF_WS_OP_PING:
        return "ping";
    default:
        return "pong";
    }
}

/* A close frame's payload p[0..n): echoed unless we closed first; recv
 * answers "close", the code (1005: none) and the reason. */
static int mf__ws_close_frame(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                              const uint8_t *p, size_t n)
{
    unsigned code;
    const uint8_t *reason;
    size_t rlen;
    int rc = mf_ws_close_parse(p, n, &code, &reason, &rlen);
    if (rc < 0)
        return mf__ws_broken(L, s, ex, rc);
    if (!s->close_sent) {
        uint8_t echo[2];
        size_t en = mf_ws_close_build(echo, code, NULL, 0);
        s->close_sent = true;
        if (ex)
            mf__ws_write(ex, MF_WS_OP_CLOSE, echo, en);
    }
    s->close_heard = true;
    lua_pushliteral(L, "close");
    lua_pushinteger(L, (lua_Integer)code);
    lua_pushlstring(L, (const char *)reason, rlen);
    return 3;
}

/* Pushes the type and the message p[0..n), inflated when compressed. */
static int mf__ws_message(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                          unsigned op, bool compressed, const uint8_t *p,
                          size_t n)
{
    lua_pushstring(L, mf__ws_type(op));
    if (!compressed) {
        lua_pushlstring(L, (const char *)p, n);
        return 2;
    }
    int rc = mf_ws_zlib_inflate(L, s->z, p, n, s->reader.max_payload,
                                op == MF_WS_OP_TEXT);
    if (rc < 0) {
        lua_pop(L, 1);
        return mf__ws_broken(L, s, ex, rc);
    }
    return 2;
}

/* A data frame's payload: the message when it is whole, else kept. */
static int mf__ws_data_frame(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                             const uint8_t *p, size_t n)
{
    const mf_ws_frame_t *f = &s->frame;
    unsigned op = s->reader.message_op;
    bool compressed = s->reader.compressed;
    int rc = mf_ws_reader_data(&s->reader, f, p, n, true);
    if (rc < 0)
        return mf__ws_broken(L, s, ex, rc);
    if (f->fin && s->msg_len == 0) /* the common case: no copy */
        return mf__ws_message(L, s, ex, op, compressed, p, n);
    s->msg_op = (uint8_t)(op | (compressed ? 0x80 : 0));
    if (!mf__ws_reserve(&s->msg, &s->msg_cap, s->msg_len + n))
        return mf__ws_broken(L, s, ex, -MF_WS_CLOSE_TOO_BIG);
    if (n)
        memcpy(s->msg + s->msg_len, p, n);
    s->msg_len += n;
    if (!f->fin)
        return MF_WS_AGAIN;
    op = s->msg_op & 0x0f;
    rc = mf__ws_message(L, s, ex, op, s->msg_op & 0x80, s->msg, s->msg_len);
    if (s->failed)
        return rc;
    free(s->msg);
    s->msg = NULL;
    s->msg_len = s->msg_cap = 0;
    return rc;
}

/* Takes the frame at the front of p[0..avail), unmasking it in place:
 * the count of results pushed, MF_WS_AGAIN (taken, nothing to answer),
 * or MF_WS_WAIT (more bytes needed: *used says how many the frame needs
 * in all). *used: the bytes taken. */
static int mf__ws_step(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                       uint8_t *p, size_t avail, size_t *used)
{
    mf_ws_frame_t *f = &s->frame;
    *used = 0;
    if (!s->checked) {
        ssize_t head = mf_ws_parse_head(f, p, avail);
        int rc = head < 0 ? (int)head : 0;
        if (head > 0)
            rc = mf_ws_reader_frame(&s->reader, f);
        if (rc < 0)
            return mf__ws_broken(L, s, ex, rc);
        if (head == 0) {
            *used = MF_WS_HEAD_MAX;
            return MF_WS_WAIT;
        }
        s->checked = true;
    }
    size_t total = f->head_len + (size_t)f->len; /* len <= max_payload */
    if (avail < total) {
        *used = total;
        return MF_WS_WAIT;
    }
    uint8_t *payload = p + f->head_len;
    size_t n = (size_t)f->len;
    mf_ws_unmask(payload, n, f->mask, 0);
    s->checked = false;
    s->heard = true;
    *used = total;
    if (f->opcode == MF_WS_OP_CLOSE)
        return mf__ws_close_frame(L, s, ex, payload, n);
    if (f->opcode == MF_WS_OP_PING && !s->close_sent && ex)
        mf__ws_write(ex, MF_WS_OP_PONG, payload, n);
    if (f->opcode & 0x8) {
        lua_pushstring(L, mf__ws_type(f->opcode));
        lua_pushlstring(L, (const char *)payload, n);
        return 2;
    }
    return mf__ws_data_frame(L, s, ex, payload, n);
}

/* Keeps p[0..n), the start of a frame still arriving, in pend (whose
 * room grows to need, the frame's whole size when known). */
static bool mf__ws_keep(mf_ws_t *s, const uint8_t *p, size_t n, size_t need)
{
    if (!mf__ws_reserve(&s->pend, &s->pend_cap, need > n ? need : n))
        return false;
    memmove(s->pend + s->pend_len, p, n);
    s->pend_len += n;
    return true;
}

/* Takes the frames in p[0..n) (a read on the stack, or pend itself):
 * results pushed or MF_WS_WAIT, what is left kept in pend. */
static int mf__ws_take(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex,
                       uint8_t *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        size_t used;
        int r = mf__ws_step(L, s, ex, p + off, n - off, &used);
        if (s->failed)
            return r;
        if (r == MF_WS_WAIT) {
            if (p == s->pend) { /* the part taken goes */
                memmove(s->pend, s->pend + off, n - off);
                s->pend_len = n - off;
                if (!mf__ws_reserve(&s->pend, &s->pend_cap, used))
                    return mf__ws_broken(L, s, ex, -MF_WS_CLOSE_TOO_BIG);
            } else if (!mf__ws_keep(s, p + off, n - off, used))
                return mf__ws_broken(L, s, ex, -MF_WS_CLOSE_TOO_BIG);
            return MF_WS_WAIT;
        }
        off += used;
        if (r != MF_WS_AGAIN) {
            size_t left = n - off;
            if (p == s->pend) {
                memmove(s->pend, s->pend + off, left);
                s->pend_len = left;
            } else if (left && !mf__ws_keep(s, p + off, left, left))
                return mf__ws_broken(L, s, ex, -MF_WS_CLOSE_TOO_BIG);
            if (s->pend_len == 0) { /* idle: no buffer */
                free(s->pend);
                s->pend = NULL;
                s->pend_cap = 0;
            }
            return r;
        }
    }
}

/* recv until it has an answer: the count of results pushed on L, or
 * MF_WS_WAIT when the exchange has nothing more yet. */
static int mf__ws_run(lua_State *L, mf_ws_t *s, mf_http_exchange_t *ex)
{
    uint8_t stack[MF_WS_READ];
    if (s->failed || s->close_heard)
        return mf__ws_fail(L, "closed");
    if (s->pend_len) { /* frames that came with an earlier one */
        int r = mf__ws_take(L, s, ex, s->pend, s->pend_len);
        if (r != MF_WS_WAIT)
            return r;
    }
    for (;;) {
        if (s->failed || s->eof || !ex)
            return mf__ws_fail(L, "closed");
        /* a frame begun: its bytes go after it; else to the stack */
        bool into_pend = s->pend_len > 0;
        uint8_t *dst = into_pend ? s->pend + s->pend_len : stack;
        size_t room = into_pend ? s->pend_cap - s->pend_len : sizeof stack;
        ssize_t n = mf_http_exchange_read(ex, dst, room);
        if (n == MF_EAGAIN)
            return MF_WS_WAIT;
        if (n <= 0) { /* the client's end, or the connection's */
            s->eof = true;
            /* a graceful stop reads as an end too: the client hears why */
            if (!s->close_sent)
                mf__ws_send_close(s, ex, MF_WS_CLOSE_GOING_AWAY, "going away");
            continue;
        }
        int r;
        if (into_pend) {
            s->pend_len += (size_t)n;
            r = mf__ws_take(L, s, ex, s->pend, s->pend_len);
        } else
            r = mf__ws_take(L, s, ex, stack, (size_t)n);
        if (r != MF_WS_WAIT)
            return r;
    }
}

/* ---- waiting ------------------------------------------------------------- */

/* The parked coroutine *side goes on with the n values on its thread. */
static void mf__ws_resume(mf_lua_co_t **side, int n)
{
    mf_lua_co_t *co = *side;
    *side = NULL;
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, n);
}

static void mf__ws_on_readable(mf_http_exchange_t *ex, void *arg)
{
    mf_ws_t *s = arg;
    if (!s->rd)
        return;
    int n = mf__ws_run(mf_lua_co_thread(s->rd), s, ex);
    if (n == MF_WS_WAIT) {
        mf_http_exchange_on_readable(ex, mf__ws_on_readable, s);
        return;
    }
    mf_timer_stop(s->loop, &s->timer);
    mf__ws_resume(&s->rd, n);
}

/* Wakes a parked recv with nil, err. */
static void mf__ws_wake_reader(mf_ws_t *s, const char *err)
{
    if (!s->rd)
        return;
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (ex)
        mf_http_exchange_on_readable(ex, NULL, NULL);
    mf_timer_stop(s->loop, &s->timer);
    mf__ws_resume(&s->rd, mf__ws_fail(mf_lua_co_thread(s->rd), err));
}

/* A recv parked in a thread of the handler may outlive the request (the
 * handler returned; its exchange calls nobody back then): it looks this
 * often whether the request still lasts. The handler's own coroutine
 * cannot end while it waits, and needs no look. */
#define MF_WS_THREAD_CHECK_MS 1000

/* Arms the parked recv's timer: its timeout, and the looks of a thread. */
static void mf__ws_arm(mf_ws_t *s)
{
    uint64_t now = mf_loop_now(s->loop), wait = 0;
    if (s->due)
        wait = s->due > now ? s->due - now : 0;
    if (s->rd != s->request->co && (!s->due || wait > MF_WS_THREAD_CHECK_MS))
        wait = MF_WS_THREAD_CHECK_MS;
    else if (!s->due)
        return;
    mf_timer_start(s->loop, &s->timer, wait);
}

/* A recv waited past its timeout (the socket stays usable), or its
 * request ended. */
static void mf__ws_on_timeout(mf_timer_t *timer)
{
    mf_ws_t *s = timer->data;
    if (!mf__ws_live(s))
        mf__ws_wake_reader(s, "closed");
    else if (s->due && mf_loop_now(s->loop) >= s->due)
        mf__ws_wake_reader(s, "timeout");
    else
        mf__ws_arm(s);
}

/* ping_interval: a ping each interval; a peer that sent nothing since the
 * last one (not even its pong) is gone. */
static void mf__ws_on_ping_time(mf_timer_t *timer)
{
    mf_ws_t *s = timer->data;
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (!ex || s->close_sent || s->failed)
        return; /* over: the timer stays stopped */
    if (!s->heard) {
        mf__ws_send_close(s, ex, MF_WS_CLOSE_GOING_AWAY, "ping timeout");
        s->failed = true;
        mf__ws_free_buffers(s);
        mf__ws_wake_reader(s, "closed");
        return;
    }
    s->heard = false;
    if (mf__ws_write(ex, MF_WS_OP_PING, NULL, 0) < 0)
        return;
    mf_timer_start(s->loop, &s->pinger, s->ping_ms);
}

/* A parked coroutine was aborted (handler timeout, shutdown, client gone):
 * nothing may call it back. */
static void mf__ws_cleanup_rd(void *op)
{
    mf_ws_t *s = op;
    s->rd = NULL;
    mf_timer_stop(s->loop, &s->timer);
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (ex)
        mf_http_exchange_on_readable(ex, NULL, NULL);
}

static void mf__ws_cleanup_wr(void *op)
{
    mf_ws_t *s = op;
    s->wr = NULL;
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (ex)
        mf_http_exchange_on_drain(ex, NULL, NULL);
}

static void mf__ws_on_drain(mf_http_exchange_t *ex, void *arg)
{
    mf_ws_t *s = arg;
    (void)ex;
    if (!s->wr)
        return;
    lua_pushboolean(mf_lua_co_thread(s->wr), 1);
    mf__ws_resume(&s->wr, 1);
}

/* ---- methods ------------------------------------------------------------- */

static mf_ws_t *mf__ws_check(lua_State *L, int idx)
{
    return mf_lua_check_udata(L, idx, MF_WS_MT);
}

/* ws:recv(): type, data (close: "close", code, reason), or nil, err;
 * waits for a frame. */
static int mf__ws_recv(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (!ex)
        return mf__ws_fail(L, "closed");
    if (s->rd)
        return mf__ws_fail(L, "socket busy reading");
    int n = mf__ws_run(L, s, ex);
    if (n != MF_WS_WAIT)
        return n;
    s->rd = mf_lua_co_check(L);
    mf_lua_co_park(s->rd, mf__ws_cleanup_rd, s);
    mf_http_exchange_on_readable(ex, mf__ws_on_readable, s);
    s->due = s->timeout_ms ? mf_loop_now(s->loop) + s->timeout_ms : 0;
    mf__ws_arm(s);
    return lua_yield(L, 0);
}

/* Sends one frame for a method: true, or nil, err; waits while the
 * client reads slowly. */
static int mf__ws_send(lua_State *L, mf_ws_t *s, unsigned op, const char *p,
                       size_t n)
{
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (!ex || s->close_sent || s->failed)
        return mf__ws_fail(L, "closed");
    if (s->wr)
        return mf__ws_fail(L, "socket busy writing");
    int rc = op & 0x8 ? mf__ws_write(ex, op, p, n)
                      : mf__ws_write_message(s, ex, op, p, n);
    if (rc < 0)
        return mf__ws_fail(L, "closed");
    s->request->bytes += n;
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    s->wr = mf_lua_co_check(L);
    mf_lua_co_park(s->wr, mf__ws_cleanup_wr, s);
    mf_http_exchange_on_drain(ex, mf__ws_on_drain, s);
    return lua_yield(L, 0);
}

/* ws:send_text(data): data must be UTF-8 (a client fails the connection
 * on anything else, §8.1). */
static int mf__ws_send_text(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    size_t n;
    const char *p = mf_lua_check_lstring(L, 2, &n);
    mf_ws_utf8_t u = {0};
    if (!mf_ws_utf8_feed(&u, (const uint8_t *)p, n) || !mf_ws_utf8_whole(&u))
        return mf_lua_arg_error(L, 2,
                                "UTF-8 text expected (send_binary "
                                "sends bytes)");
    return mf__ws_send(L, s, MF_WS_OP_TEXT, p, n);
}

static int mf__ws_send_binary(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    size_t n;
    const char *p = mf_lua_check_lstring(L, 2, &n);
    return mf__ws_send(L, s, MF_WS_OP_BINARY, p, n);
}

/* ws:ping([data]): at most 125 bytes (§5.5). */
static int mf__ws_ping(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    size_t n;
    const char *p = mf_lua_opt_lstring(L, 2, "", &n);
    if (n > MF_WS_CONTROL_MAX)
        return mf_lua_arg_error(L, 2, "at most 125 bytes expected");
    return mf__ws_send(L, s, MF_WS_OP_PING, p, n);
}

/* ws:close([code [, reason]]): sends the close frame (1000 by default);
 * recv then waits for the client's. */
static int mf__ws_close(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    lua_Integer code = mf_lua_opt_integer(L, 2, MF_WS_CLOSE_NORMAL);
    size_t n;
    const char *reason = mf_lua_opt_lstring(L, 3, "", &n);
    if (code < 0 || !mf_ws_close_code_valid((unsigned)code))
        return mf_lua_arg_error(L, 2,
                                "a close code of 1000-1003, 1007-1014 "
                                "or 3000-4999 expected");
    mf_ws_utf8_t u = {0};
    if (!mf_ws_utf8_feed(&u, (const uint8_t *)reason, n) ||
        !mf_ws_utf8_whole(&u))
        return mf_lua_arg_error(L, 3, "UTF-8 text expected");
    mf_http_exchange_t *ex = mf__ws_live(s);
    if (!ex || s->close_sent || s->failed)
        return mf__ws_fail(L, "closed");
    uint8_t p[MF_WS_CONTROL_MAX];
    size_t len = mf_ws_close_build(p, (unsigned)code, reason, n);
    s->close_sent = true;
    if (mf__ws_write(ex, MF_WS_OP_CLOSE, p, len) < 0)
        return mf__ws_fail(L, "closed");
    lua_pushboolean(L, 1);
    return 1;
}

/* ws.protocol, else the methods (upvalue 1). */
static int mf__ws_index(lua_State *L)
{
    mf_ws_t *s = mf__ws_check(L, 1);
    const char *key = lua_tostring(L, 2);
    if (key && !strcmp(key, "protocol")) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, s->protocol_ref);
        return 1;
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    return 1;
}

static int mf__ws_gc(lua_State *L)
{
    mf_ws_t *s = lua_touserdata(L, 1);
    mf_timer_stop(s->loop, &s->timer);
    mf_timer_stop(s->loop, &s->pinger);
    luaL_unref(L, LUA_REGISTRYINDEX, s->protocol_ref);
    s->protocol_ref = LUA_NOREF;
    mf__ws_free_buffers(s);
    return 0;
}

/* ---- the handshake ------------------------------------------------------- */

typedef struct mf_ws_options {
    uint64_t max_payload;
    uint32_t ping_ms, timeout_ms;
    bool compress;
    int protocols; /* stack index of the table, 0: none */
} mf_ws_options_t;

/* Reads the options table at idx; raises on a key or value it does not
 * take, naming it. */
static void mf__ws_options(lua_State *L, int idx, mf_ws_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_payload = MF_WS_MAX_PAYLOAD_DEFAULT;
    if (lua_isnoneornil(L, idx))
        return;
    mf_lua_check_type(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *key =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        lua_Number v = lua_tonumber(L, -1);
        bool num = lua_type(L, -1) == LUA_TNUMBER;
        if (!strcmp(key, "protocols") && lua_type(L, -1) == LUA_TTABLE)
            o->protocols = idx;
        else if (!strcmp(key, "max_payload") && num && v >= 1 && v <= 1e12)
            o->max_payload = (uint64_t)v;
        else if (!strcmp(key, "ping_interval") && num && v > 0 && v <= 86400)
            o->ping_ms = v * 1000 >= 1 ? (uint32_t)(v * 1000) : 1;
        else if (!strcmp(key, "timeout") && num && v >= 0 && v <= 86400000)
            o->timeout_ms = (uint32_t)v;
        else if (!strcmp(key, "compress") && lua_type(L, -1) == LUA_TBOOLEAN)
            o->compress = lua_toboolean(L, -1);
        else
            luaL_error(L,
                       "req:websocket: bad option %s (protocols: a list "
                       "of names; max_payload: bytes >= 1; ping_interval: "
                       "seconds > 0; timeout: ms >= 0; compress: a boolean)",
                       *key ? key : "(not a name)");
        lua_pop(L, 1);
    }
}

/* The values of every header line called name, one list. */
static bool mf__ws_header_has(const mf_http_request_t *head, const char *name,
                              const char *token)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; i < head->num_headers; i++) {
        const mf_http_header_t *h = &head->headers[i];
        if (h->name_len == nlen && !strncasecmp(h->name, name, nlen) &&
            mf_ws_list_has(h->value, h->value_len, token))
            return true;
    }
    return false;
}

static const char mf__ws_no_upgrade[] = "Upgrade: websocket expected";
static const char mf__ws_no_version[] = "Sec-WebSocket-Version 13 expected";

/* Why head is no WebSocket opening handshake (§4.2.1), with the status
 * to answer (400, or 426 for a version we do not speak); NULL if it is. */
static const char *mf__ws_refusal(const mf_http_request_t *head, int *status)
{
    *status = 400;
    if (head->method_len != 3 || memcmp(head->method, "GET", 3))
        return "a websocket handshake is a GET";
    if (head->minor_version < 1)
        return "a websocket handshake needs HTTP/1.1";
    if (!mf__ws_header_has(head, "Upgrade", "websocket")) {
        *status = 426;
        return mf__ws_no_upgrade;
    }
    if (!mf__ws_header_has(head, "Connection", "upgrade"))
        return "Connection: upgrade expected";
    const mf_http_header_t *v = mf_http_find_header(
        head->headers, head->num_headers, "Sec-WebSocket-Version");
    if (!v || v->value_len != 2 || memcmp(v->value, "13", 2)) {
        *status = 426;
        return mf__ws_no_version;
    }
    const mf_http_header_t *k = mf_http_find_header(
        head->headers, head->num_headers, "Sec-WebSocket-Key");
    if (!k || !mf_ws_key_valid(k->value, k->value_len))
        return "Sec-WebSocket-Key: the base64 of 16 bytes expected";
    return NULL;
}

/* The first of the server's protocols (the list at o->protocols) that
 * the client offered, pushed (nil when none). */
static void mf__ws_pick_protocol(lua_State *L, const mf_http_request_t *head,
                                 const mf_ws_options_t *o)
{
    if (o->protocols) {
        lua_getfield(L, o->protocols, "protocols");
        for (int i = 1;; i++) {
            lua_rawgeti(L, -1, i);
            if (lua_isnil(L, -1))
                break;
            if (lua_type(L, -1) != LUA_TSTRING ||
                !mf_http_field_name_valid(lua_tostring(L, -1),
                                          lua_objlen(L, -1)))
                luaL_error(L,
                           "req:websocket: protocols[%d]: a token "
                           "expected",
                           i);
            if (mf__ws_header_has(head, "Sec-WebSocket-Protocol",
                                  lua_tostring(L, -1))) {
                lua_remove(L, -2);
                return;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 2);
    }
    lua_pushnil(L);
}

/* Adds the 101's own headers: Upgrade, Sec-WebSocket-Accept and the
 * protocol (on top of the stack, or nil). */
static int mf__ws_accept_headers(lua_State *L, mf_http_exchange_t *ex,
                                 const mf_http_request_t *head)
{
    static const char upgrade[] = "Upgrade: websocket\r\n";
    const mf_http_header_t *k = mf_http_find_header(
        head->headers, head->num_headers, "Sec-WebSocket-Key");
    char line[64] = "Sec-WebSocket-Accept: ";
    size_t at = strlen(line);
    mf_ws_accept(line + at, k->value, k->value_len);
    at += MF_WS_ACCEPT_LEN;
    memcpy(line + at, "\r\n", 2);
    mf_http_exchange_add_header_static(ex, upgrade, sizeof upgrade - 1);
    mf_http_exchange_add_header_line(ex, line, at + 2);
    if (lua_isnil(L, -1))
        return 0;
    size_t n;
    const char *p = lua_tolstring(L, -1, &n);
    return mf_http_exchange_add_header(ex, "Sec-WebSocket-Protocol", 22, p, n);
}

/* With compress, the client's first permessage-deflate offer the server
 * takes (RFC 7692 §7.1): its answer added, our window bits returned; 0
 * when there is none. */
static unsigned mf__ws_pick_deflate(mf_http_exchange_t *ex,
                                    const mf_http_request_t *head,
                                    const mf_ws_options_t *o)
{
    static const char name[] = "Sec-WebSocket-Extensions";
    mf_ws_deflate_offer_t offer;
    bool found = false;
    for (size_t i = 0; o->compress && !found && i < head->num_headers; i++) {
        const mf_http_header_t *h = &head->headers[i];
        found = h->name_len == sizeof name - 1 &&
                !strncasecmp(h->name, name, sizeof name - 1) &&
                mf_ws_deflate_pick(h->value, h->value_len, &offer);
    }
    if (!found)
        return 0;
    char line[160];
    int n = snprintf(line, sizeof line,
                     "%s: permessage-deflate; server_no_context_takeover; "
                     "client_no_context_takeover",
                     name);
    if (offer.window_bits_set)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "; server_max_window_bits=%u",
                      offer.server_max_window_bits);
    n += snprintf(line + n, sizeof line - (size_t)n, "\r\n");
    mf_http_exchange_add_header_line(ex, line, (size_t)n);
    return offer.server_max_window_bits;
}

/* Answers a refused handshake: req:websocket returns nil, why. */
static int mf__ws_refuse(lua_State *L, mf_serve_request_t *request, int status,
                         const char *why)
{
    static const char version[] = "Sec-WebSocket-Version: 13\r\n";
    static const char upgrade[] = "Upgrade: websocket\r\n";
    /* 426 says what to upgrade to (RFC 9110 §15.5.22, RFC 6455 §4.4) */
    if (why == mf__ws_no_upgrade)
        mf_http_exchange_add_header_static(request->ex, upgrade,
                                           sizeof upgrade - 1);
    else if (why == mf__ws_no_version)
        mf_http_exchange_add_header_static(request->ex, version,
                                           sizeof version - 1);
    char text[128];
    snprintf(text, sizeof text, "%s\n", why);
    mf_serve_request_refuse(request, status, text);
    return mf__ws_fail(L, why);
}

static void mf__ws_new(lua_State *L, mf_serve_request_t *request,
                       const mf_ws_options_t *o, unsigned deflate_bits)
{
    int protocol = lua_gettop(L);
    mf_ws_t *s = lua_newuserdata(L, sizeof(*s));
    memset(s, 0, sizeof(*s));
    luaL_getmetatable(L, MF_WS_MT);
    lua_setmetatable(L, -2);
    s->req = request->req;
    s->request = request;
    s->serial = request->serial;
    s->loop = request->w->loop;
    s->reader.max_payload = o->max_payload;
    s->reader.deflate = deflate_bits != 0;
    s->deflate_bits = deflate_bits;
    s->z = deflate_bits ? mf_ws_zlib_get(L) : NULL;
    s->timeout_ms = o->timeout_ms;
    s->ping_ms = o->ping_ms;
    s->heard = true;
    lua_pushvalue(L, protocol);
    s->protocol_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    mf_timer_init(&s->timer, mf__ws_on_timeout, s);
    mf_timer_init(&s->pinger, mf__ws_on_ping_time, s);
    /* keepalive alone never holds a stop up (the connection does) */
    mf_timer_set_ref(s->loop, &s->pinger, false);
    if (s->ping_ms)
        mf_timer_start(s->loop, &s->pinger, s->ping_ms);
}

/* req:websocket([options]) — upvalue 1: the request metatable. */
int mf_serve_req_websocket(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    mf_ws_options_t o;
    mf__ws_options(L, 2, &o);
    if (request->sent || request->streaming || !request->ex)
        return mf__ws_fail(L, "the response head was already sent");
    const mf_http_request_t *head = mf_http_exchange_request(request->ex);
    int status;
    const char *why = mf__ws_refusal(head, &status);
    if (why)
        return mf__ws_refuse(L, request, status, why);
    mf__ws_pick_protocol(L, head, &o);
    request->status = 101;
    if (mf_serve_request_set_head(L, request) < 0 ||
        mf__ws_accept_headers(L, request->ex, head) < 0)
        return mf__ws_fail(L, "the response head cannot be sent");
    unsigned deflate_bits = mf__ws_pick_deflate(request->ex, head, &o);
    int rc = mf_http_exchange_upgrade(request->ex);
    if (rc == MF_EBUSY)
        return mf__ws_fail(L, "the request body is not read yet");
    if (rc < 0)
        return mf__ws_fail(L, rc == MF_ECLOSED ? "closed"
                                               : "the response head cannot "
                                                 "be sent");
    request->streaming = true; /* the head is out: the end sends nothing */
    mf__ws_new(L, request, &o, deflate_bits);
    return 1;
}

void mf_serve_websocket_open(mf_serve_worker_t *w)
{
    lua_State *L = mf_lua_host_state(w->host);
    static const luaL_Reg methods[] = {
        {"recv ws:recv()", mf__ws_recv},
        {"send_text ws:send_text(data)", mf__ws_send_text},
        {"send_binary ws:send_binary(data)", mf__ws_send_binary},
        {"ping ws:ping([data])", mf__ws_ping},
        {"close ws:close([code [, reason]])", mf__ws_close},
        {NULL, NULL}};
    luaL_newmetatable(L, MF_WS_MT);
    lua_newtable(L);
    mf_lua_register(L, methods);
    lua_pushcclosure(L, mf__ws_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, mf__ws_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
