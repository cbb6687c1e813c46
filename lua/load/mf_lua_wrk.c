/*
 * lua/load/mf_lua_wrk.c — wrk's Lua API (moonflow/lua_wrk.h): the `wrk` table
 * and its functions, address, thread and statistics userdata, and the copy of
 * values between states that thread:get/set make.
 *
 * wrk.format and the thread's init sequence are a short Lua chunk (they
 * only build strings from the table the script edits); lookups, connects,
 * userdata and copies are C. Owns only its userdata; the thread records
 * and histograms are the caller's (lua/bench/bench_http.c).
 *
 * May call: the engine's public headers (dns.h for mf_sockaddr_t, hdr.h)
 * and libc's resolver. Blocking calls here are for the setup phase only.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_wrk.h>

#define ADDR_MT "moonflow.wrk.addr"
#define THREAD_MT "moonflow.wrk.thread"
#define STATS_MT "moonflow.wrk.stats"
#define COPY_MAX_DEPTH 32
#define CONNECT_TIMEOUT_MS 1000

/* wrk.format merges its arguments with the table (Host from wrk.headers,
 * Content-Length from the body); the thread's init sets Host, calls
 * init(args) and freezes the default request. Returns (wrk, thread_init). */
static const char wrk_chunk[] =
    "local concat, insert, pairs, tostring = table.concat, table.insert,\n"
    "  pairs, tostring\n"
    "local wrk = { scheme = 'http', host = 'localhost', port = nil,\n"
    "  method = 'GET', path = '/', headers = {}, body = nil, thread = nil }\n"
    "function wrk.format(method, path, headers, body)\n"
    "  method = method or wrk.method\n"
    "  path = path or wrk.path\n"
    "  headers = headers or wrk.headers\n"
    "  body = body or wrk.body\n"
    "  local out = { method .. ' ' .. path .. ' HTTP/1.1' }\n"
    "  local host = wrk.headers['Host']\n"
    "  for name, value in pairs(headers) do\n"
    "    if name == 'Host' then host = value\n"
    "    elseif name ~= 'Content-Length' then\n"
    "      out[#out + 1] = name .. ': ' .. tostring(value)\n"
    "    end\n"
    "  end\n"
    "  if host then insert(out, 2, 'Host: ' .. tostring(host)) end\n"
    "  if body then out[#out + 1] = 'Content-Length: ' .. #body end\n"
    "  out[#out + 1] = ''\n"
    "  out[#out + 1] = body or ''\n"
    "  return concat(out, '\\r\\n')\n"
    "end\n"
    "function wrk.request() return wrk.format() end\n"
    "local function thread_init(args)\n"
    "  if not wrk.headers['Host'] then\n"
    "    local host = wrk.host\n"
    "    if host:find(':', 1, true) then host = '[' .. host .. ']' end\n"
    "    if wrk.port then host = host .. ':' .. wrk.port end\n"
    "    wrk.headers['Host'] = host\n"
    "  end\n"
    "  if type(init) == 'function' then init(args) end\n"
    "  local req = wrk.format()\n"
    "  wrk.request = function() return req end\n"
    "end\n"
    "return wrk, thread_init\n";

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

int mf_lua_wrk_call(lua_State *L, const char *name, int nargs, int nresults)
{
    lua_getglobal(L, name);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, nargs + 1);
        return 1;
    }
    lua_insert(L, -nargs - 1);
    lua_pushcfunction(L, traceback);
    lua_insert(L, -nargs - 2);
    int base = lua_gettop(L) - nargs - 1;
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return rc ? -1 : 0;
}

static void register_metatables(lua_State *L);

/* Gives the userdata on top its metatable name, registering the module's
 * metatables first in a state that has none yet (a state given statistics
 * objects without mf_lua_wrk_open still gets working ones). */
static void set_metatable(lua_State *L, const char *name)
{
    luaL_getmetatable(L, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        register_metatables(L);
        luaL_getmetatable(L, name);
    }
    lua_setmetatable(L, -2);
}

/* ---- addresses ------------------------------------------------------- */

void mf_lua_wrk_push_addr(lua_State *L, const mf_sockaddr_t *addr)
{
    mf_sockaddr_t *a = lua_newuserdata(L, sizeof *a);
    *a = *addr;
    set_metatable(L, ADDR_MT);
}

static int addr_tostring(lua_State *L)
{
    const mf_sockaddr_t *a = mf_lua_check_udata(L, 1, ADDR_MT);
    char buf[80];
    lua_pushstring(L, mf_sockaddr_format(a, buf, sizeof buf));
    return 1;
}

static socklen_t addr_len(const mf_sockaddr_t *a)
{
    return a->sa.sa_family == AF_INET6 ? sizeof a->in6 : sizeof a->in4;
}

/* A connect bounded by CONNECT_TIMEOUT_MS: wrk.connect's answer. */
static int try_connect(const mf_sockaddr_t *a)
{
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, &a->sa, addr_len(a)) == 0 ? 0 : -errno;
    if (rc == -EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (poll(&p, 1, CONNECT_TIMEOUT_MS) != 1)
            rc = -ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            rc = -errno;
        else
            rc = -soerr;
    }
    close(fd);
    return rc;
}

static int wrk_connect(lua_State *L)
{
    const mf_sockaddr_t *a = mf_lua_check_udata(L, 1, ADDR_MT);
    lua_pushboolean(L, try_connect(a) == 0);
    return 1;
}

static int lookup(const char *host, const char *service, struct addrinfo **out,
                  char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(host, service, &hints, out);
    if (rc != 0) {
        snprintf(err, errlen, "unable to resolve %s:%s %s", host, service,
                 gai_strerror(rc));
        return -1;
    }
    return 0;
}

static bool addr_copy(const struct addrinfo *ai, mf_sockaddr_t *a)
{
    if (ai->ai_addrlen > sizeof *a)
        return false;
    memset(a, 0, sizeof *a);
    memcpy(a, ai->ai_addr, ai->ai_addrlen);
    return true;
}

static int wrk_lookup(lua_State *L)
{
    const char *host = mf_lua_check_string(L, 1);
    const char *service = mf_lua_check_string(L, 2);
    struct addrinfo *list;
    char err[256];
    if (lookup(host, service, &list, err, sizeof err) < 0)
        return luaL_error(L, "%s", err);
    lua_newtable(L);
    int n = 0;
    for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
        mf_sockaddr_t a;
        if (!addr_copy(ai, &a))
            continue;
        mf_lua_wrk_push_addr(L, &a);
        lua_rawseti(L, -2, ++n);
    }
    freeaddrinfo(list);
    return 1;
}

int mf_lua_wrk_resolve(const char *host, const char *service,
                       mf_sockaddr_t *out, size_t max, char *err, size_t errlen)
{
    struct addrinfo *list;
    if (lookup(host, service, &list, err, errlen) < 0)
        return -1;
    size_t n = 0;
    int last = -ECONNREFUSED;
    for (struct addrinfo *ai = list; ai && n < max; ai = ai->ai_next) {
        if (!addr_copy(ai, &out[n]))
            continue;
        int rc = try_connect(&out[n]);
        if (rc == 0)
            n++;
        else
            last = rc;
    }
    freeaddrinfo(list);
    if (n == 0) {
        snprintf(err, errlen, "unable to connect to %s:%s %s", host, service,
                 strerror(-last));
        return -1;
    }
    return (int)n;
}

/* ---- copies between states -------------------------------------------- */

static int copy_value(lua_State *from, int idx, lua_State *to, int depth,
                      char *err, size_t errlen);

static int copy_table(lua_State *from, int idx, lua_State *to, int depth,
                      char *err, size_t errlen)
{
    if (depth >= COPY_MAX_DEPTH) {
        snprintf(err, errlen, "cannot transfer a table nested deeper than %d",
                 COPY_MAX_DEPTH);
        return -1;
    }
    if (idx < 0)
        idx = lua_gettop(from) + idx + 1;
    lua_newtable(to);
    lua_pushnil(from);
    while (lua_next(from, idx)) {
        if (copy_value(from, -2, to, depth + 1, err, errlen) < 0 ||
            copy_value(from, -1, to, depth + 1, err, errlen) < 0) {
            lua_pop(from, 2);
            return -1;
        }
        lua_rawset(to, -3);
        lua_pop(from, 1);
    }
    return 0;
}

static int copy_value(lua_State *from, int idx, lua_State *to, int depth,
                      char *err, size_t errlen)
{
    size_t len;
    const char *s;
    switch (lua_type(from, idx)) {
    case LUA_TNIL:
        lua_pushnil(to);
        return 0;
    case LUA_TBOOLEAN:
        lua_pushboolean(to, lua_toboolean(from, idx));
        return 0;
    case LUA_TNUMBER:
        lua_pushnumber(to, lua_tonumber(from, idx));
        return 0;
    case LUA_TSTRING:
        s = lua_tolstring(from, idx, &len);
        lua_pushlstring(to, s, len);
        return 0;
    case LUA_TTABLE:
        if (copy_table(from, idx, to, depth, err, errlen) == 0)
            return 0;
        lua_pop(to, 1);
        return -1;
    default:
        snprintf(err, errlen, "cannot transfer '%s' to thread",
                 luaL_typename(from, idx));
        return -1;
    }
}

int mf_lua_wrk_copy(lua_State *from, int idx, lua_State *to, char *err,
                    size_t errlen)
{
    int top = lua_gettop(to);
    if (copy_value(from, idx, to, 0, err, errlen) < 0) {
        lua_settop(to, top);
        return -1;
    }
    return 0;
}

/* ---- threads ------------------------------------------------------------ */

static mf_lua_wrk_thread_t *check_thread(lua_State *L)
{
    return *(mf_lua_wrk_thread_t **)mf_lua_check_udata(L, 1, THREAD_MT);
}

static int thread_get(lua_State *L)
{
    mf_lua_wrk_thread_t *t = check_thread(L);
    const char *name = mf_lua_check_string(L, 2);
    char err[128];
    lua_getglobal(t->L, name);
    int rc = mf_lua_wrk_copy(t->L, -1, L, err, sizeof err);
    lua_pop(t->L, 1);
    if (rc < 0)
        return luaL_error(L, "thread:get('%s'): %s", name, err);
    return 1;
}

static int thread_set(lua_State *L)
{
    mf_lua_wrk_thread_t *t = check_thread(L);
    const char *name = mf_lua_check_string(L, 2);
    lua_settop(L, 3);
    char err[128];
    if (mf_lua_wrk_copy(L, 3, t->L, err, sizeof err) < 0)
        return luaL_error(L, "thread:set('%s'): %s", name, err);
    lua_setglobal(t->L, name);
    return 0;
}

static int thread_stop(lua_State *L)
{
    mf_lua_wrk_thread_t *t = check_thread(L);
    if (!t->stop || t->stop(t) < 0)
        return luaL_error(L, "thread:stop() works only while the thread "
                             "runs (from its request, response or delay)");
    return 0;
}

static int thread_index(lua_State *L)
{
    mf_lua_wrk_thread_t *t = check_thread(L);
    const char *key = mf_lua_check_string(L, 2);
    if (!strcmp(key, "get"))
        mf_lua_push_named(L, thread_get, "thread:get(name)");
    else if (!strcmp(key, "set"))
        mf_lua_push_named(L, thread_set, "thread:set(name, value)");
    else if (!strcmp(key, "stop"))
        mf_lua_push_named(L, thread_stop, "thread:stop()");
    else if (!strcmp(key, "addr"))
        mf_lua_wrk_push_addr(L, &t->addr);
    else
        lua_pushnil(L);
    return 1;
}

static int thread_newindex(lua_State *L)
{
    mf_lua_wrk_thread_t *t = check_thread(L);
    const char *key = mf_lua_check_string(L, 2);
    if (strcmp(key, "addr") != 0)
        return luaL_error(L, "cannot set '%s' on thread", key);
    t->addr = *(const mf_sockaddr_t *)mf_lua_check_udata(L, 3, ADDR_MT);
    return 0;
}

void mf_lua_wrk_push_thread(lua_State *L, mf_lua_wrk_thread_t *t)
{
    mf_lua_wrk_thread_t **p = lua_newuserdata(L, sizeof *p);
    *p = t;
    set_metatable(L, THREAD_MT);
}

/* ---- statistics ------------------------------------------------------- */

typedef struct stats_ud {
    const mf_hdr_t *h;
    double div;
} stats_ud_t;

static stats_ud_t *check_stats(lua_State *L)
{
    return mf_lua_check_udata(L, 1, STATS_MT);
}

/* wrk's statistics are whole units (µs, requests/s). */
static lua_Number whole(const stats_ud_t *s, uint64_t v)
{
    return (lua_Number)(uint64_t)((double)v / s->div);
}

static int stats_percentile(lua_State *L)
{
    stats_ud_t *s = check_stats(L);
    double p = mf_lua_check_number(L, 2);
    mf_lua_arg_check(L, p >= 0 && p <= 100, 2, "percentile must be 0..100");
    lua_pushnumber(L, whole(s, mf_hdr_percentile(s->h, p)));
    return 1;
}

static int stats_index(lua_State *L)
{
    stats_ud_t *s = check_stats(L);
    const char *key = mf_lua_check_string(L, 2);
    if (!strcmp(key, "min"))
        lua_pushnumber(L, whole(s, mf_hdr_min(s->h)));
    else if (!strcmp(key, "max"))
        lua_pushnumber(L, whole(s, mf_hdr_max(s->h)));
    else if (!strcmp(key, "mean"))
        lua_pushnumber(L, mf_hdr_mean(s->h) / s->div);
    else if (!strcmp(key, "stdev"))
        lua_pushnumber(L, mf_hdr_stdev(s->h) / s->div);
    else if (!strcmp(key, "percentile"))
        mf_lua_push_named(L, stats_percentile, "stats:percentile(p)");
    else
        lua_pushnil(L);
    return 1;
}

/* stats(i): the i-th distinct value recorded and its count (wrk's raw
 * walk); here the i-th non-empty bucket. Nothing past the last. */
static int stats_call(lua_State *L)
{
    stats_ud_t *s = check_stats(L);
    lua_Integer i = mf_lua_check_integer(L, 2);
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    for (lua_Integer k = 0; k < i; k++)
        if (!mf_hdr_next(s->h, &it))
            return 0;
    if (i < 1)
        return 0;
    lua_pushnumber(L, whole(s, it.value));
    lua_pushnumber(L, (lua_Number)it.count);
    return 2;
}

static int stats_len(lua_State *L)
{
    stats_ud_t *s = check_stats(L);
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    lua_Integer n = 0;
    while (mf_hdr_next(s->h, &it))
        n++;
    lua_pushinteger(L, n);
    return 1;
}

void mf_lua_wrk_push_stats(lua_State *L, const mf_hdr_t *h, double div)
{
    stats_ud_t *s = lua_newuserdata(L, sizeof *s);
    s->h = h;
    s->div = div > 0 ? div : 1;
    set_metatable(L, STATS_MT);
}

/* ---- the wrk table ------------------------------------------------------ */

static void register_metatables(lua_State *L)
{
    static const luaL_Reg addr_mt[] = {{"__tostring", addr_tostring},
                                       {NULL, NULL}};
    static const luaL_Reg thread_mt[] = {{"__index", thread_index},
                                         {"__newindex", thread_newindex},
                                         {NULL, NULL}};
    static const luaL_Reg stats_mt[] = {{"__index", stats_index},
                                        {"__call", stats_call},
                                        {"__len", stats_len},
                                        {NULL, NULL}};
    luaL_newmetatable(L, ADDR_MT);
    mf_lua_register(L, addr_mt);
    luaL_newmetatable(L, THREAD_MT);
    mf_lua_register(L, thread_mt);
    luaL_newmetatable(L, STATS_MT);
    mf_lua_register(L, stats_mt);
    lua_pop(L, 3);
}

static void set_string(lua_State *L, const char *key, const char *value)
{
    if (value)
        lua_pushstring(L, value);
    else
        lua_pushnil(L);
    lua_setfield(L, -2, key);
}

/* -H "Name: value" into wrk.headers (the table at the top). */
static void set_headers(lua_State *L, char *const *headers, size_t n)
{
    lua_getfield(L, -1, "headers");
    for (size_t i = 0; i < n; i++) {
        const char *colon = strchr(headers[i], ':');
        if (!colon)
            continue; /* refused by the flag parser already */
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        lua_pushlstring(L, headers[i], (size_t)(colon - headers[i]));
        lua_pushstring(L, v);
        lua_rawset(L, -3);
    }
    lua_pop(L, 1);
}

int mf_lua_wrk_open(lua_State *L, const mf_lua_wrk_url_t *url,
                    char *const *headers, size_t nheaders)
{
    register_metatables(L);
    if (luaL_loadbuffer(L, wrk_chunk, sizeof wrk_chunk - 1, "=wrk") ||
        lua_pcall(L, 0, 2, 0))
        return -1;
    lua_setfield(L, LUA_REGISTRYINDEX, "moonflow.wrk.thread_init");
    set_string(L, "scheme", url->scheme);
    set_string(L, "host", url->host);
    set_string(L, "port", url->port);
    set_string(L, "path", url->path);
    mf_lua_push_named(L, wrk_lookup, "wrk.lookup(host, service)");
    lua_setfield(L, -2, "lookup");
    mf_lua_push_named(L, wrk_connect, "wrk.connect(addr)");
    lua_setfield(L, -2, "connect");
    set_headers(L, headers, nheaders);
    lua_setglobal(L, "wrk");
    return 0;
}

int mf_lua_wrk_thread_init(lua_State *L, mf_lua_wrk_thread_t *t,
                           const char *url, char *const *args, size_t nargs)
{
    lua_getglobal(L, "wrk");
    mf_lua_wrk_push_thread(L, t);
    lua_setfield(L, -2, "thread");
    lua_pop(L, 1);
    lua_pushcfunction(L, traceback);
    lua_getfield(L, LUA_REGISTRYINDEX, "moonflow.wrk.thread_init");
    lua_createtable(L, (int)nargs, 1);
    lua_pushstring(L, url);
    lua_rawseti(L, -2, 0);
    for (size_t i = 0; i < nargs; i++) {
        lua_pushstring(L, args[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    int base = lua_gettop(L) - 2;
    int rc = lua_pcall(L, 1, 0, base);
    lua_remove(L, base);
    return rc ? -1 : 0;
}
