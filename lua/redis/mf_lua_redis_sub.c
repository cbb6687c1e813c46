/*
 * lua/redis/mf_lua_redis_sub.c — r:subscribe / r:psubscribe / r:ssubscribe
 * (sharded channels) and the subscriber
 * object: messages become Lua tables as they arrive; a coroutine waiting
 * in sub:next() is resumed with one, otherwise they queue (up to the
 * client's max_queued: past it the subscription ends with "queue
 * overflow", as Redis drops a pub/sub client whose output buffer is full,
 * rather than losing messages silently).
 *
 * Owns: the record (loop memory) has two owners, the Lua object (a
 * "moonflow.redis.sub" userdata holding a pointer to it) and the C
 * subscriber (its message callback's user): it is freed by whichever lets
 * go second — the object's __gc or the subscriber's final callback. The
 * queue is a Lua table anchored by one counted registry reference, released
 * by close(), by __gc, or once drained after the subscription ended.
 *
 * r:subscribe and sub:(un)subscribe wait (park) until Redis has confirmed
 * every channel, so a message published after they return is delivered;
 * messages arriving meanwhile are queued. While it waits, the calling
 * coroutine keeps the object anchored (self_ref).
 *
 * A coroutine aborted while it waits in sub:next() or for confirmations
 * (client gone, handler timeout, shutdown) closes the subscription: it was
 * the one reading it.
 */
#include <stdio.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>

#include "host/mf_lua_int.h"
#include "mf_lua_redis.h"

typedef struct mf_lua_sub {
    mf_redis_subscriber_t *sub; /* NULL once the final callback ran */
    mf_loop_t *loop;
    mf_lua_host_t *host; /* NULL once the Lua object is collected */
    mf_lua_co_t *waiter; /* parked in sub:next */
    mf_timer_t timer;    /* sub:next's timeout */
    int queue_ref;       /* LUA_NOREF when there is no queue */
    int head, tail;      /* queued messages: queue[head .. tail - 1] */
    unsigned max_queued;
    int error; /* why the subscription ended */
    /* and in words, when Redis said why: "permission denied: NOPERM ..." */
    char why[sizeof "permission denied: " + 256];
    bool ended;
    bool closed;   /* by close(), an abort or __gc: no more messages */
    bool overflow; /* the queue was full: ended after what is queued */
    bool stopping; /* mf_redis_subscriber_close was called */
    /* waiting for confirmations: the waiter is resumed when `pending`
     * reaches 0 */
    bool confirming;
    int pending;
    /* what the confirmations say is subscribed (Redis counts channels and
     * patterns together; each confirmation's change tells which) */
    long long total;
    int nchannels, npatterns;
    int self_ref; /* the object, returned by r:subscribe once confirmed */
} mf_lua_sub_t;

static mf_lua_sub_t *mf_lua__sub_check(lua_State *L)
{
    mf_lua_sub_t **ud = mf_lua_check_udata(L, 1, MF_LUA_REDIS_SUB);
    return *ud;
}

static void mf_lua__queue_release(mf_lua_sub_t *s)
{
    mf_lua_unref(s->host, s->queue_ref);
    s->queue_ref = LUA_NOREF;
    s->head = s->tail = 1;
}

/* The C subscriber stops reading and ends with its final callback. */
static void mf_lua__sub_stop(mf_lua_sub_t *s)
{
    if (s->sub && !s->stopping) {
        s->stopping = true;
        mf_redis_subscriber_close(s->sub);
    }
}

static void mf_lua__sub_close(mf_lua_sub_t *s)
{
    if (s->closed)
        return;
    s->closed = true;
    mf_lua__queue_release(s);
    mf_lua__sub_stop(s);
}

static const char *mf_lua__sub_errstr(const mf_lua_sub_t *s)
{
    if (s->overflow)
        return "queue overflow";
    return s->why[0] ? s->why : mf_lua_redis_errstr(s->error);
}

/* ---- messages arriving ------------------------------------------------ */

/* {kind, channel, payload [, pattern]} from the array Redis sent, pushed
 * on L; false (nothing pushed) for anything else. */
static bool mf_lua__push_message(lua_State *L, const mf_redis_reply_t *msg)
{
    if (msg->type != MF_REDIS_ARRAY || !msg->elements || msg->len < 3)
        return false;
    for (size_t i = 0; i < msg->len; i++)
        if (msg->elements[i].type != MF_REDIS_STRING)
            return false;
    const mf_redis_reply_t *e = msg->elements;
    bool pmessage = msg->len >= 4;
    lua_createtable(L, 0, pmessage ? 4 : 3);
    lua_pushlstring(L, e[0].str, e[0].len);
    lua_setfield(L, -2, "kind");
    if (pmessage) {
        lua_pushlstring(L, e[1].str, e[1].len);
        lua_setfield(L, -2, "pattern");
        e++;
    }
    lua_pushlstring(L, e[1].str, e[1].len);
    lua_setfield(L, -2, "channel");
    lua_pushlstring(L, e[2].str, e[2].len);
    lua_setfield(L, -2, "payload");
    return true;
}

static void mf_lua__wake(mf_lua_sub_t *s, int nargs)
{
    mf_lua_co_t *co = s->waiter;
    s->waiter = NULL;
    mf_timer_stop(s->loop, &s->timer);
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, nargs); /* may end s: touch nothing after */
}

/* No one waits: the message (on top of L) joins the queue, or ends the
 * subscription when the queue is full. */
static void mf_lua__enqueue(mf_lua_sub_t *s, lua_State *L)
{
    if ((unsigned)(s->tail - s->head) >= s->max_queued) {
        lua_pop(L, 1);
        s->overflow = true;
        mf_lua__sub_stop(s);
        return;
    }
    if (s->queue_ref == LUA_NOREF) {
        lua_newtable(L);
        s->queue_ref = mf_lua_ref(s->host, L);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->queue_ref);
    lua_insert(L, -2);
    lua_rawseti(L, -2, s->tail++);
    lua_pop(L, 1);
}

/* What a waiting r:subscribe or sub:(un)subscribe returns: the object, or
 * true. */
static void mf_lua__push_confirmed(mf_lua_sub_t *s, lua_State *L)
{
    if (s->self_ref != LUA_NOREF)
        lua_rawgeti(L, LUA_REGISTRYINDEX, s->self_ref);
    else
        lua_pushboolean(L, 1);
}

static void mf_lua__confirming_done(mf_lua_sub_t *s)
{
    s->confirming = false;
    lua_State *L = mf_lua_co_thread(s->waiter);
    mf_lua__push_confirmed(s, L);
    mf_lua_unref(s->host, s->self_ref);
    s->self_ref = LUA_NOREF;
    mf_lua__wake(s, 1);
}

/* A confirmation ("subscribe", channel, count): keeps the counts, and
 * counts down for a waiter. */
static void mf_lua__on_confirmation(mf_lua_sub_t *s, const mf_redis_reply_t *c)
{
    long long now = c->elements[2].integer;
    int delta = (int)(now - s->total);
    s->total = now;
    if (c->elements[0].len && c->elements[0].str[0] == 'p')
        s->npatterns += delta;
    else
        s->nchannels += delta;
    if (s->confirming && s->waiter && --s->pending <= 0)
        mf_lua__confirming_done(s);
}

static bool mf_lua__is_confirmation(const mf_redis_reply_t *msg)
{
    return msg->type == MF_REDIS_ARRAY && msg->elements && msg->len == 3 &&
           msg->elements[2].type == MF_REDIS_INTEGER;
}

static void mf_lua__on_message(mf_lua_sub_t *s, const mf_redis_reply_t *msg)
{
    if (!s->host || s->closed || s->overflow)
        return;
    if (mf_lua__is_confirmation(msg)) {
        mf_lua__on_confirmation(s, msg);
        return;
    }
    bool deliver = s->waiter && !s->confirming;
    lua_State *L =
        deliver ? mf_lua_co_thread(s->waiter) : mf_lua_host_state(s->host);
    if (!mf_lua__push_message(L, msg))
        return;
    if (deliver)
        mf_lua__wake(s, 1);
    else
        mf_lua__enqueue(s, L);
}

/* refusal: Redis's error reply that ended the subscriber, or NULL. */
static void mf_lua__on_end(mf_lua_sub_t *s, int error, const char *refusal)
{
    s->sub = NULL;
    s->ended = true;
    s->error = error;
    if (refusal)
        snprintf(s->why, sizeof s->why, "%s: %s", mf_lua_redis_errstr(error),
                 refusal);
    if (!s->host) { /* the Lua object is gone: the last owner frees */
        mf_loop_free(s->loop, s, sizeof(*s));
        return;
    }
    if (s->head == s->tail)
        mf_lua__queue_release(s);
    if (s->waiter) {
        s->confirming = false;
        mf_lua_unref(s->host, s->self_ref);
        s->self_ref = LUA_NOREF;
        lua_State *L = mf_lua_co_thread(s->waiter);
        lua_pushnil(L);
        lua_pushstring(L, mf_lua__sub_errstr(s));
        mf_lua__wake(s, 2);
    }
}

static void mf_lua__sub_cb(mf_redis_subscriber_t *sub,
                           const mf_redis_reply_t *msg, int error, void *user)
{
    if (msg)
        mf_lua__on_message(user, msg);
    else
        mf_lua__on_end(user, error, mf_redis_subscriber_error_message(sub));
}

/* sub:next's timeout. */
static void mf_lua__next_timeout(mf_timer_t *timer)
{
    mf_lua_sub_t *s = timer->data;
    lua_State *L = mf_lua_co_thread(s->waiter);
    lua_pushnil(L);
    lua_pushliteral(L, "timeout");
    mf_lua__wake(s, 2);
}

static void mf_lua__next_abort(void *op);

/* Parks co until n confirmations have arrived. */
static int mf_lua__confirm_wait(lua_State *L, mf_lua_sub_t *s, mf_lua_co_t *co,
                                int n)
{
    s->waiter = co;
    s->confirming = true;
    s->pending = n;
    mf_lua_co_park(co, mf_lua__next_abort, s);
    return lua_yield(L, 0);
}

/* ---- r:subscribe(channel, ...) / r:psubscribe(pattern, ...) ------------ */

/* The channels at 2..top as one vector; numbers count as their string. */
static void mf_lua__channels(lua_State *L, mf_lua_redis_argv_t *a,
                             const char *what)
{
    int top = lua_gettop(L);
    if (top < 2)
        luaL_error(L, "%s: a channel expected", what);
    mf_lua_redis_check_args(L, 2, top, what);
    mf_lua_redis_argv_init(a);
    for (int i = 2; i <= top; i++)
        mf_lua_redis_argv_push(L, a, i);
}

static int mf_lua__subscribe(lua_State *L, bool pattern, bool sharded)
{
    const char *what = sharded   ? "r:ssubscribe"
                       : pattern ? "r:psubscribe"
                                 : "r:subscribe";
    mf_lua_redis_t *r = mf_lua_redis_check(L, 1);
    mf_lua_co_t *co = mf_lua_co_check(L); /* it waits for confirmations */
    mf_lua_redis_argv_t a;
    mf_lua__channels(L, &a, what);
    mf_lua_sub_t **ud = lua_newuserdata(L, sizeof(*ud));
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_loop_t *loop = mf_lua_host_loop(host);
    mf_lua_sub_t *s = mf_loop_alloc(loop, sizeof(*s));
    *s = (mf_lua_sub_t){.loop = loop,
                        .host = host,
                        .queue_ref = LUA_NOREF,
                        .self_ref = LUA_NOREF,
                        .head = 1,
                        .tail = 1,
                        .max_queued = r->max_queued ? r->max_queued : 1};
    mf_timer_init(&s->timer, mf_lua__next_timeout, s);
    *ud = s;
    luaL_getmetatable(L, MF_LUA_REDIS_SUB);
    lua_setmetatable(L, -2);
    int n = a.argc;
    mf_redis_subscriber_t *sub =
        sharded ? mf_redis_ssubscribe(r->client, n, a.argv, a.lens,
                                      mf_lua__sub_cb, s)
                : mf_redis_subscribe(r->client, n, a.argv, a.lens, pattern,
                                     mf_lua__sub_cb, s);
    if (!s->ended) /* a final callback never comes from inside the call */
        s->sub = sub;
    mf_lua_redis_argv_close(&a);
    lua_pushvalue(L, -1);
    s->self_ref = mf_lua_ref(host, L);
    return mf_lua__confirm_wait(L, s, co, n);
}

int mf_lua_redis_subscribe(lua_State *L)
{
    return mf_lua__subscribe(L, false, false);
}

int mf_lua_redis_psubscribe(lua_State *L)
{
    return mf_lua__subscribe(L, true, false);
}

int mf_lua_redis_ssubscribe(lua_State *L)
{
    return mf_lua__subscribe(L, false, true);
}

/* sub:subscribe / unsubscribe / psubscribe / punsubscribe(channel, ...)
 * -> true | nil, err once the subscription has ended. */
static int mf_lua__update(lua_State *L, bool subscribe, bool pattern)
{
    mf_lua_sub_t *s = mf_lua__sub_check(L);
    mf_lua_redis_argv_t a;
    bool all = !subscribe && lua_gettop(L) < 2; /* unsubscribe everything */
    if (all)
        mf_lua_redis_argv_init(&a);
    else
        mf_lua__channels(L, &a,
                         subscribe
                             ? pattern ? "sub:psubscribe" : "sub:subscribe"
                         : pattern ? "sub:punsubscribe"
                                   : "sub:unsubscribe");
    if (!s->sub || s->closed || s->overflow) {
        mf_lua_redis_argv_close(&a);
        lua_pushnil(L);
        lua_pushstring(L, s->closed ? "closed" : mf_lua__sub_errstr(s));
        return 2;
    }
    mf_lua_co_t *co = mf_lua_co_check(L);
    if (s->waiter) {
        mf_lua_redis_argv_close(&a);
        return luaL_error(L, "another coroutine waits on this subscriber");
    }
    /* Dropping everything confirms each channel dropped, or once (a nil
     * channel) when there was none. */
    int n = all ? (pattern ? s->npatterns : s->nchannels) : a.argc;
    mf_redis_subscriber_update(s->sub, subscribe, a.argc, a.argv, a.lens,
                               pattern);
    mf_lua_redis_argv_close(&a);
    return mf_lua__confirm_wait(L, s, co, n > 0 ? n : 1);
}

static int mf_lua__sub_subscribe(lua_State *L)
{
    return mf_lua__update(L, true, false);
}

static int mf_lua__sub_unsubscribe(lua_State *L)
{
    return mf_lua__update(L, false, false);
}

static int mf_lua__sub_psubscribe(lua_State *L)
{
    return mf_lua__update(L, true, true);
}

static int mf_lua__sub_punsubscribe(lua_State *L)
{
    return mf_lua__update(L, false, true);
}

/* ---- sub:next([timeout_ms]) ------------------------------------------- */

/* Cleanup hook of the waiting coroutine (abort, shutdown). */
static void mf_lua__next_abort(void *op)
{
    mf_lua_sub_t *s = op;
    s->waiter = NULL;
    s->confirming = false;
    mf_lua_unref(s->host, s->self_ref);
    s->self_ref = LUA_NOREF;
    mf_timer_stop(s->loop, &s->timer);
    mf_lua__sub_close(s);
}

/* The oldest queued message on top of L. */
static void mf_lua__dequeue(mf_lua_sub_t *s, lua_State *L)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->queue_ref);
    lua_rawgeti(L, -1, s->head);
    lua_pushnil(L);
    lua_rawseti(L, -3, s->head++);
    lua_remove(L, -2);
    if (s->head == s->tail) {
        if (s->ended)
            mf_lua__queue_release(s);
        else
            s->head = s->tail = 1; /* keeps the table's array part small */
    }
}

static int mf_lua__next_wait(lua_State *L, mf_lua_sub_t *s, lua_Number ms)
{
    if (ms == 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
    }
    mf_lua_co_t *co = mf_lua_co_check(L);
    if (s->waiter)
        return luaL_error(L, "sub:next: another coroutine waits on this "
                             "subscriber");
    s->waiter = co;
    if (ms > 0) {
        mf_timer_start(s->loop, &s->timer, (uint64_t)ms);
    }
    mf_lua_co_park(co, mf_lua__next_abort, s);
    return lua_yield(L, 0);
}

/* sub:next([timeout_ms]) -> message | nil, "timeout" | nil, err once the
 * subscription has ended (after the messages still queued). */
static int mf_lua__sub_next(lua_State *L)
{
    mf_lua_sub_t *s = mf_lua__sub_check(L);
    lua_Number ms = mf_lua_opt_number(L, 2, -1);
    if (s->head != s->tail) {
        mf_lua__dequeue(s, L);
        return 1;
    }
    if (s->closed || s->ended || s->overflow) {
        lua_pushnil(L);
        lua_pushstring(L, s->closed ? "closed" : mf_lua__sub_errstr(s));
        return 2;
    }
    return mf_lua__next_wait(L, s, ms < 0 ? -1 : ms);
}

/* The iterator of sub:messages([timeout_ms]): nil ends the loop. */
static int mf_lua__messages_iter(lua_State *L)
{
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    return mf_lua__sub_next(L);
}

/* for msg in sub:messages([timeout_ms]) do ... end */
static int mf_lua__sub_messages(lua_State *L)
{
    mf_lua__sub_check(L);
    lua_settop(L, 2);
    lua_pushcclosure(L, mf_lua__messages_iter, 1);
    lua_pushvalue(L, 1);
    return 2;
}

/* sub:close(): no more messages; a waiter gets nil, "closed". */
static int mf_lua__sub_close_m(lua_State *L)
{
    mf_lua__sub_close(mf_lua__sub_check(L));
    return 0;
}

/* The object is gone: close, and free the record if the C subscriber has
 * let go of it already. A collected object has no waiter (a waiting
 * coroutine holds it on its stack). */
static int mf_lua__sub_gc(lua_State *L)
{
    mf_lua_sub_t *s = *(mf_lua_sub_t **)lua_touserdata(L, 1);
    mf_lua__sub_close(s);
    s->host = NULL;
    if (s->ended)
        mf_loop_free(s->loop, s, sizeof(*s));
    return 0;
}

void mf_lua_redis_sub_init(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"next sub:next([timeout_ms])", mf_lua__sub_next},
        {"messages sub:messages([timeout_ms])", mf_lua__sub_messages},
        {"subscribe sub:subscribe(channel, ...)", mf_lua__sub_subscribe},
        {"unsubscribe sub:unsubscribe([channel, ...])",
         mf_lua__sub_unsubscribe},
        {"psubscribe sub:psubscribe(pattern, ...)", mf_lua__sub_psubscribe},
        {"punsubscribe sub:punsubscribe([pattern, ...])",
         mf_lua__sub_punsubscribe},
        {"close sub:close()", mf_lua__sub_close_m},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_REDIS_SUB, methods, mf_lua__sub_gc, NULL);
    lua_pop(L, 1);
}
