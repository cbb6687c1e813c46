/*
 * lua/redis/mf_lua_redis.c — moonflow.redis, the C side of mf.redis: client
 * objects, r:call and r:pipeline (a Redis task started straight from C:
 * the coroutine parks on it and its callback resumes it with the converted
 * replies; no flow, no table beyond the result), and the conversions the
 * "redis" task kind (mf_lua_task_redis.c) shares: commands from tables,
 * replies to Lua values.
 *
 * Owns: nothing past a call. A started task belongs to its own series; the
 * parked coroutine is named by task->user, which the coroutine's cleanup
 * hook (abort, shutdown) clears before canceling the task, so a late
 * completion touches no Lua.
 *
 * Replies to Lua: status and bulk strings → strings (binary-safe), integer
 * → number, nil and nil array → mf.null (a NULL light userdata, equal to
 * cjson.null), array → array table, error → {err = "ERR ..."} (r:call
 * returns nil, "ERR ..." for an error at the top). A client made with
 * status_table = true gives status replies as {ok = "OK"}, the convention
 * of Redis's own Lua scripting, for tools that must tell them from bulk
 * strings (redis-cli prints them differently).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/url.h>
#include <moonflow/common.h>

#include "host/mf_lua_int.h"
#include "mf_lua_redis.h"

/* ---- argument vectors ----------------------------------------------- */

void mf_lua_redis_argv_init(mf_lua_redis_argv_t *a)
{
    a->argc = 0;
    a->cap = MF_LUA_REDIS_INLINE_ARGS;
    a->argv = a->argv_inline;
    a->lens = a->lens_inline;
    a->chunks = NULL;
    a->numbuf = a->nums;
    a->numlen = 0;
    a->numcap = sizeof a->nums;
}

void mf_lua_redis_argv_close(mf_lua_redis_argv_t *a)
{
    if (a->argv != a->argv_inline) {
        mf_free(a->argv);
        mf_free(a->lens);
    }
    while (a->chunks) {
        mf_lua_redis_chunk_t *next = a->chunks->next;
        mf_free(a->chunks);
        a->chunks = next;
    }
    mf_lua_redis_argv_init(a);
}

static void mf_lua__argv_grow(mf_lua_redis_argv_t *a)
{
    int cap = a->cap * 2;
    const char **argv = mf_xmalloc((size_t)cap * sizeof(*argv));
    size_t *lens = mf_xmalloc((size_t)cap * sizeof(*lens));
    memcpy(argv, a->argv, (size_t)a->argc * sizeof(*argv));
    memcpy(lens, a->lens, (size_t)a->argc * sizeof(*lens));
    if (a->argv != a->argv_inline) {
        mf_free(a->argv);
        mf_free(a->lens);
    }
    a->argv = argv;
    a->lens = lens;
    a->cap = cap;
}

/* Room for len bytes of formatted numbers. Chunks never move, so the
 * pointers already in argv stay valid. */
static char *mf_lua__argv_numspace(mf_lua_redis_argv_t *a, size_t len)
{
    if (a->numlen + len > a->numcap) {
        mf_lua_redis_chunk_t *c = mf_xmalloc(sizeof(*c));
        c->next = a->chunks;
        a->chunks = c;
        a->numbuf = c->data;
        a->numlen = 0;
        a->numcap = sizeof c->data;
    }
    char *p = a->numbuf + a->numlen;
    a->numlen += len;
    return p;
}

static bool mf_lua__is_arg(lua_State *L, int idx)
{
    int t = lua_type(L, idx);
    return t == LUA_TSTRING || t == LUA_TNUMBER;
}

static void mf_lua__bad_arg(lua_State *L, int idx, int n, const char *what)
{
    luaL_error(L, "%s: argument %d must be a string or a number, got %s", what,
               n, luaL_typename(L, idx));
}

void mf_lua_redis_check_args(lua_State *L, int first, int last,
                             const char *what)
{
    if (first > last)
        luaL_error(L, "%s: a command expected", what);
    for (int i = first; i <= last; i++)
        if (!mf_lua__is_arg(L, i))
            mf_lua__bad_arg(L, i, i - first + 1, what);
}

/* Integral numbers print exactly ("%.14g" would turn 10^15 into 1e+15);
 * others as Lua's tostring does. */
static int mf_lua__format_number(char *out, size_t size, lua_Number d)
{
    if (d == floor(d) && fabs(d) < 9.2e18)
        return snprintf(out, size, "%lld", (long long)d);
    return snprintf(out, size, "%.14g", d);
}

void mf_lua_redis_argv_push(lua_State *L, mf_lua_redis_argv_t *a, int idx)
{
    if (a->argc == a->cap)
        mf_lua__argv_grow(a);
    const char *s;
    size_t len;
    if (lua_type(L, idx) == LUA_TSTRING) {
        s = lua_tolstring(L, idx, &len);
    } else {
        char tmp[32];
        len = (size_t)mf_lua__format_number(tmp, sizeof tmp,
                                            lua_tonumber(L, idx));
        s = memcpy(mf_lua__argv_numspace(a, len), tmp, len);
    }
    a->argv[a->argc] = s;
    a->lens[a->argc] = len;
    a->argc++;
}

void mf_lua_redis_add_range(lua_State *L, mf_task_t *task, int first, int last)
{
    mf_lua_redis_argv_t a;
    mf_lua_redis_argv_init(&a);
    for (int i = first; i <= last; i++)
        mf_lua_redis_argv_push(L, &a, i);
    mf_task_redis_add_command(task, a.argc, a.argv, a.lens);
    mf_lua_redis_argv_close(&a);
}

/* Appends the command held by the array table at idx. */
void mf_lua_redis_add_table(lua_State *L, mf_task_t *task, int idx)
{
    mf_lua_redis_argv_t a;
    mf_lua_redis_argv_init(&a);
    int n = (int)lua_objlen(L, idx);
    luaL_checkstack(L, 2, "redis command");
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i); /* the table keeps a string alive */
        mf_lua_redis_argv_push(L, &a, -1);
        lua_pop(L, 1);
    }
    mf_task_redis_add_command(task, a.argc, a.argv, a.lens);
    mf_lua_redis_argv_close(&a);
}

/* Raises unless the table at cmd is a non-empty array of strings and
 * numbers; i is its place in the list. */
static void mf_lua__check_cmd(lua_State *L, int cmd, int i, const char *what)
{
    if (!lua_istable(L, cmd))
        luaL_error(L, "%s: command %d must be a table", what, i);
    int argc = (int)lua_objlen(L, cmd);
    if (argc == 0)
        luaL_error(L, "%s: command %d is empty", what, i);
    for (int k = 1; k <= argc; k++) {
        lua_rawgeti(L, cmd, k);
        if (!mf_lua__is_arg(L, -1))
            mf_lua__bad_arg(L, -1, k, what);
        lua_pop(L, 1);
    }
}

int mf_lua_redis_check_cmds(lua_State *L, int idx, const char *what)
{
    luaL_checkstack(L, 4, "redis command");
    int n = (int)lua_objlen(L, idx);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        mf_lua__check_cmd(L, lua_gettop(L), i, what);
        lua_pop(L, 1);
    }
    return n;
}

/* ---- replies ----------------------------------------------------------- */

static void mf_lua__push_array(lua_State *L, const mf_redis_reply_t *r,
                               unsigned flags)
{
    /* Nesting is bounded by the RESP reader (a few levels). */
    lua_checkstack(L, 4);
    lua_createtable(L, (int)r->len, 0);
    for (size_t i = 0; i < r->len; i++) {
        mf_lua_redis_push_reply(L, &r->elements[i], flags);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* {key = str}: an error reply, or a status with MF_LUA_REDIS_STATUS. */
static void mf_lua__push_marked(lua_State *L, const char *key,
                                const mf_redis_reply_t *r)
{
    lua_createtable(L, 0, 1);
    lua_pushlstring(L, r->str, r->len);
    lua_setfield(L, -2, key);
}

void mf_lua_redis_push_reply(lua_State *L, const mf_redis_reply_t *r,
                             unsigned flags)
{
    switch (r->type) {
    case MF_REDIS_STATUS:
        if (flags & MF_LUA_REDIS_STATUS) {
            mf_lua__push_marked(L, "ok", r);
            return;
        }
        lua_pushlstring(L, r->str, r->len);
        return;
    case MF_REDIS_STRING:
        lua_pushlstring(L, r->str, r->len);
        return;
    case MF_REDIS_INTEGER:
        lua_pushnumber(L, (lua_Number)r->integer);
        return;
    case MF_REDIS_ERROR:
        mf_lua__push_marked(L, "err", r);
        return;
    case MF_REDIS_ARRAY:
        if (r->elements) { /* NULL: a nil array (an empty one has a block) */
            mf_lua__push_array(L, r, flags);
            return;
        }
        break;
    case MF_REDIS_NIL:
        break;
    }
    lua_pushlightuserdata(L, NULL);
}

void mf_lua_redis_push_replies(lua_State *L, const mf_task_t *task,
                               unsigned flags)
{
    size_t n = mf_task_redis_nreplies(task);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        mf_lua_redis_push_reply(L, mf_task_redis_reply(task, i), flags);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* Pushes nil, err for a failed task; returns 2, or 0 on success. A refused
 * AUTH/SELECT reads "permission denied: " and Redis's own reason. */
static int mf_lua__push_failure(lua_State *L, const mf_task_t *task)
{
    int state = mf_task_state(task);
    if (state == MF_STATE_SUCCESS && mf_task_redis_nreplies(task) > 0)
        return 0;
    lua_pushnil(L);
    const char *err = state == MF_STATE_SUCCESS
                          ? "protocol error" /* no reply: never expected */
                          : mf_lua_errstr(state, mf_task_error(task));
    const char *why = mf_task_redis_error_message(task);
    if (why)
        lua_pushfstring(L, "%s: %s", err, why);
    else
        lua_pushstring(L, err);
    return 2;
}

const char *mf_lua_redis_errstr(int error)
{
    switch (error) {
    case 0:
        return "closed";
    case MF_ETIMEDOUT:
        return mf_lua_errstr(MF_STATE_TIMEOUT, error);
    case MF_EDNS:
        return mf_lua_errstr(MF_STATE_DNS_ERROR, error);
    case MF_ETLS:
        return mf_lua_errstr(MF_STATE_TLS_ERROR, error);
    case MF_EPROTO:
        return mf_lua_errstr(MF_STATE_PROTOCOL_ERROR, error);
    case MF_EACCES:
    case MF_EINVAL:
    case MF_EMSGSIZE:
    case MF_ENOMEM:
        return mf_lua_errstr(MF_STATE_TASK_ERROR, error);
    default:
        return mf_lua_errstr(MF_STATE_SYS_ERROR, error);
    }
}

/* ---- r:call and r:pipeline --------------------------------------------- */

/* Cleanup hook of a coroutine parked on a task (abort, shutdown): the
 * task forgets the coroutine, then is canceled; its callback still runs
 * (with nothing to resume) and the engine frees it. */
static void mf_lua__task_detach(void *op)
{
    mf_task_t *task = op;
    task->user = NULL;
    mf_task_cancel(task);
}

/* r:call's result: the reply, or nil, message for an error reply. */
static int mf_lua__push_call_reply(lua_State *L, const mf_redis_reply_t *r,
                                   unsigned flags)
{
    if (r->type != MF_REDIS_ERROR) {
        mf_lua_redis_push_reply(L, r, flags);
        return 1;
    }
    lua_pushnil(L);
    lua_pushlstring(L, r->str, r->len);
    return 2;
}

/* Resumes the coroutine of an r:call (one reply; an error reply becomes
 * nil, message) or an r:pipeline (MF_LUA_REDIS_LIST: all replies). */
static void mf_lua__done(mf_task_t *task, unsigned flags)
{
    mf_lua_co_t *co = task->user;
    if (!co)
        return;
    mf_lua_co_unpark(co);
    lua_State *L = mf_lua_co_thread(co);
    int n = mf_lua__push_failure(L, task);
    if (n == 0 && (flags & MF_LUA_REDIS_LIST)) {
        mf_lua_redis_push_replies(L, task, flags);
        n = 1;
    } else if (n == 0) {
        n = mf_lua__push_call_reply(L, mf_task_redis_reply(task, 0), flags);
    }
    mf_lua_co_resume(co, n);
}

static void mf_lua__call_done(mf_task_t *task)
{
    mf_lua__done(task, 0);
}

static void mf_lua__call_status_done(mf_task_t *task)
{
    mf_lua__done(task, MF_LUA_REDIS_STATUS);
}

static void mf_lua__pipeline_done(mf_task_t *task)
{
    mf_lua__done(task, MF_LUA_REDIS_LIST);
}

static void mf_lua__pipeline_status_done(mf_task_t *task)
{
    mf_lua__done(task, MF_LUA_REDIS_LIST | MF_LUA_REDIS_STATUS);
}

mf_task_cb mf_lua_redis_call_cb(unsigned flags)
{
    return flags & MF_LUA_REDIS_STATUS ? mf_lua__call_status_done
                                       : mf_lua__call_done;
}

int mf_lua_redis_park(lua_State *L, mf_lua_co_t *co, mf_task_t *task)
{
    task->user = co;
    mf_task_start(task);
    mf_lua_co_park(co, mf_lua__task_detach, task);
    return lua_yield(L, 0);
}

/* A transaction cannot span r:call calls: each call is a task of its own,
 * on the shared pipelined connection (other coroutines' commands in between)
 * or on a dedicated one closed after it (MULTI and WATCH leave state), so
 * the EXEC of a later call would find no MULTI. Raises, naming the forms
 * that keep MULTI ... EXEC in one task, and r:session, which holds one
 * connection across calls. */
static void mf_lua__check_not_transaction(lua_State *L, int idx)
{
    static const char *const words[] = {"MULTI", "EXEC", "DISCARD", "WATCH",
                                        "UNWATCH"};
    size_t len = 0;
    const char *cmd = lua_type(L, idx) == LUA_TSTRING
                          ? lua_tolstring(L, idx, &len)
                          : NULL; /* a number: no conversion in place */
    if (len < 4 || len > 7)       /* most commands: this length check only */
        return;
    for (size_t i = 0; i < MF_ARRAY_SIZE(words); i++)
        if (strlen(words[i]) == len && strncasecmp(cmd, words[i], len) == 0)
            luaL_error(L,
                       "r:call(\"%s\"): a transaction cannot span calls (each "
                       "call is a task of its own); send it in one: "
                       "r:pipeline{{\"MULTI\"}, ..., {\"EXEC\"}} or "
                       "mf.task.redis(r, {{\"MULTI\"}, ..., {\"EXEC\"}}), "
                       "or hold one connection: r:session(function(s) "
                       "s:call(\"WATCH\", k) ... s:call(\"MULTI\") ... "
                       "s:call(\"EXEC\") end)",
                       words[i]);
}

/* r:call(cmd, ...) -> reply | nil, err */
static int mf_lua__call(lua_State *L)
{
    mf_lua_redis_t *r = mf_lua_redis_check(L, 1);
    int top = lua_gettop(L);
    mf_lua_redis_check_args(L, 2, top, "r:call");
    mf_lua__check_not_transaction(L, 2);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_task_t *task = mf_task_redis_create(
        r->client, r->flags ? mf_lua__call_status_done : mf_lua__call_done,
        NULL);
    mf_lua_redis_add_range(L, task, 2, top);
    return mf_lua_redis_park(L, co, task);
}

/* r:pipeline{{cmd, ...}, ...} -> {reply, ...} | nil, err */
static int mf_lua__pipeline(lua_State *L)
{
    mf_lua_redis_t *r = mf_lua_redis_check(L, 1);
    mf_lua_check_type(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    int n = mf_lua_redis_check_cmds(L, 2, "r:pipeline");
    mf_lua_co_t *co = mf_lua_co_check(L);
    if (n == 0) {
        lua_newtable(L);
        return 1;
    }
    mf_task_t *task = mf_task_redis_create(
        r->client,
        r->flags ? mf_lua__pipeline_status_done : mf_lua__pipeline_done, NULL);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i);
        mf_lua_redis_add_table(L, task, 3);
        lua_pop(L, 1);
    }
    return mf_lua_redis_park(L, co, task);
}

/* ---- clients ------------------------------------------------------------ */

mf_lua_redis_t *mf_lua_redis_check(lua_State *L, int idx)
{
    return mf_lua_check_udata(L, idx, MF_LUA_REDIS);
}

static const char *const mf_lua__opt_names[] = {
    "connect_timeout", "timeout",      "idle_timeout", "pipeline_connections",
    "max_connections", "max_reply",    "verify",       "ca_file",
    "max_queued",      "status_table", "read_from",    NULL};

/* One option (key at -2, value at -1) into opts. */
static void mf_lua__client_opt(lua_State *L, mf_redis_opts_t *opts,
                               mf_lua_redis_t *r)
{
    const char *name =
        lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "(not a string)";
    int i = 0;
    while (mf_lua__opt_names[i] && strcmp(mf_lua__opt_names[i], name) != 0)
        i++;
    if (!mf_lua__opt_names[i])
        luaL_error(L, "mf.redis: unknown option %s", name);
    int want = i == 6 || i == 9    ? LUA_TBOOLEAN
               : i == 7 || i == 10 ? LUA_TSTRING
                                   : LUA_TNUMBER;
    if (lua_type(L, -1) != want ||
        (want == LUA_TNUMBER && lua_tonumber(L, -1) < 0))
        luaL_error(L, "mf.redis: option %s must be a %s%s",
                   mf_lua__opt_names[i], lua_typename(L, want),
                   want == LUA_TNUMBER ? " >= 0" : "");
    lua_Number v = lua_tonumber(L, -1);
    switch (i) {
    case 0:
        opts->connect_timeout_ms = (uint32_t)v;
        break;
    case 1:
        opts->response_timeout_ms = (uint32_t)v;
        break;
    case 2:
        opts->idle_timeout_ms = (uint32_t)v;
        break;
    case 3:
        opts->pipeline_connections = (unsigned)v;
        break;
    case 4:
        opts->max_connections = (unsigned)v;
        break;
    case 5:
        opts->max_reply = (uint64_t)v;
        break;
    case 6:
        opts->tls_verify = lua_toboolean(L, -1);
        break;
    case 7:
        opts->ca_file = lua_tostring(L, -1);
        break;
    case 8:
        r->max_queued = (unsigned)v;
        break;
    case 9:
        r->flags = lua_toboolean(L, -1) ? MF_LUA_REDIS_STATUS : 0;
        break;
    default:
        if (strcmp(lua_tostring(L, -1), "replica") != 0 &&
            strcmp(lua_tostring(L, -1), "master") != 0)
            luaL_error(L, "mf.redis: option read_from must be \"master\" or "
                          "\"replica\"");
        opts->read_from_replica = strcmp(lua_tostring(L, -1), "replica") == 0;
        break;
    }
}

static bool mf_lua__is_cluster_url(const char *url)
{
    return strncasecmp(url, "redis-cluster://", 16) == 0 ||
           strncasecmp(url, "rediss-cluster://", 17) == 0;
}

/* client(url [, opts]) -> a new client object; raises on a malformed URL
 * or options (mf.redis caches the objects per URL and options). */
static int mf_lua__client(lua_State *L)
{
    const char *url = mf_lua_check_string(L, 1);
    lua_settop(L, 2);
    mf_lua_redis_t *r = lua_newuserdata(L, sizeof(*r));
    r->client = NULL;
    r->max_queued = 10000;
    r->flags = 0;
    mf_redis_opts_t opts;
    mf_redis_opts_init(&opts);
    if (!lua_isnil(L, 2)) {
        mf_lua_check_type(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) { /* ca_file stays alive in opts meanwhile */
            mf_lua__client_opt(L, &opts, r);
            lua_pop(L, 1);
        }
    }
    int err = 0;
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (mf_lua__is_cluster_url(url)) {
        r->client =
            mf_redis_cluster_client(mf_lua_host_loop(host), url, &opts, &err);
        if (!r->client)
            return luaL_error(
                L,
                "%s: malformed URL '%s': want redis-cluster://[[user]:"
                "password@]host[:port][,host[:port]...][/][?read_from="
                "replica]",
                mf_lua_usage(L), url);
    } else {
        r->client = mf_redis_client(mf_lua_host_loop(host), url, &opts, &err);
    }
    if (!r->client && err == MF_EINVAL) {
        static const char *const schemes[] = {"redis", "rediss", NULL};
        char why[320];
        return luaL_error(L, "%s: %s", mf_lua_usage(L),
                          mf_url_problem(url, schemes,
                                         "the user info (a password is "
                                         "needed) or the db number",
                                         why, sizeof why));
    }
    if (!r->client)
        return luaL_error(L, "%s: %s", mf_lua_usage(L), mf_strerror(err));
    luaL_getmetatable(L, MF_LUA_REDIS);
    lua_setmetatable(L, -2);
    return 1;
}

static int mf_lua__client_tostring(lua_State *L)
{
    lua_pushfstring(L, "mf.redis: %p", lua_touserdata(L, 1));
    return 1;
}

static int mf_lua__connects(lua_State *L)
{
    mf_lua_redis_t *r = mf_lua_redis_check(L, 1);
    lua_pushnumber(L, (lua_Number)mf_redis_client_connects(r->client));
    return 1;
}

int mf_lua_open_redis(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"call r:call(cmd, ...)", mf_lua__call},
        {"pipeline r:pipeline(cmds)", mf_lua__pipeline},
        {"subscribe r:subscribe(channel, ...)", mf_lua_redis_subscribe},
        {"psubscribe r:psubscribe(pattern, ...)", mf_lua_redis_psubscribe},
        {"ssubscribe r:ssubscribe(channel, ...)", mf_lua_redis_ssubscribe},
        {"connects r:connects()", mf_lua__connects},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_REDIS, methods, NULL, mf_lua__client_tostring);
    lua_getfield(L, -1, "__index");
    mf_lua_redis_session_push(L);
    lua_setfield(L, -2, "session");
    lua_pop(L, 2);
    mf_lua_redis_sub_init(L);
    lua_newtable(L);
    mf_lua_push_named(L, mf_lua__client, "mf.redis(url [, opts])");
    lua_setfield(L, -2, "client");
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    return 1;
}
