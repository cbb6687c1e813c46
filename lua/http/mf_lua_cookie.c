/*
 * lua/http/mf_lua_cookie.c — the module moonflow.cookie behind req.cookies and
 * resp:set_cookie:
 *
 *   cookie.parse(s)        {name = value} of a Cookie header's value (the
 *                          first of a repeated name wins, RFC 6265 §5.4)
 *   cookie.format(name, value [, opts])  a Set-Cookie header's value
 *   (cookie.set_line(resp, name, value [, opts]) the same for
 *   resp:set_cookie, whose argument errors name it);
 *       opts: path, domain (strings), expires (seconds since the epoch, or
 *       an HTTP date as a string), max_age (seconds), secure, httponly
 *       (booleans), samesite ("Strict", "Lax" or "None": None needs
 *       secure, as browsers do). A name that is not a token, a value with a
 *       byte RFC 6265 forbids (space, '"', ',', ';', '\\', control bytes:
 *       encode such values first, e.g. mf.uri.escape), a path or domain
 *       with ';' or a control byte, or an unknown option raises, naming it.
 *
 * Owns nothing past a call. May call: the HTTP layer's cookie parser and
 * checks (moonflow/http_parser.h).
 */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <moonflow/lua_arg.h>
#include <moonflow/http_parser.h>
#include <moonflow/lua_uri.h>

#include "host/mf_lua_int.h"
#include "mf_lua_http.h"

void mf_lua_cookies_add(lua_State *L, int t, const char *s, size_t n)
{
    const char *pos = s;
    mf_http_cookie_t c;
    while (mf_http_cookie_next(&pos, s + n, &c)) {
        lua_pushlstring(L, c.name, c.name_len);
        lua_rawget(L, t);
        bool seen = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (seen)
            continue;
        lua_pushlstring(L, c.name, c.name_len);
        lua_pushlstring(L, c.value, c.value_len);
        lua_rawset(L, t);
    }
}

static int mf__cookie_parse(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    lua_newtable(L);
    mf_lua_cookies_add(L, lua_gettop(L), s, n);
    return 1;
}

/* An attribute's text: no ';' and no control byte. */
static const char *mf__cookie_attr(lua_State *L, int opts, const char *key)
{
    lua_getfield(L, opts, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    size_t n;
    const char *v = lua_tolstring(L, -1, &n);
    if (lua_type(L, -1) != LUA_TSTRING || !mf_http_field_value_valid(v, n) ||
        memchr(v, ';', n))
        luaL_error(L,
                   "set_cookie: %s must be a string without ';' or "
                   "control bytes",
                   key);
    lua_pop(L, 1); /* the string stays in opts */
    return v;
}

static bool mf__cookie_flag(lua_State *L, int opts, const char *key)
{
    lua_getfield(L, opts, key);
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        luaL_error(L, "set_cookie: %s must be a boolean", key);
    bool on = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return on;
}

static void mf__cookie_expires(lua_State *L, int opts, luaL_Buffer *b)
{
    lua_getfield(L, opts, "expires");
    if (lua_type(L, -1) == LUA_TNUMBER) {
        time_t when = (time_t)lua_tonumber(L, -1);
        struct tm tm;
        char date[64];
        gmtime_r(&when, &tm);
        strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        lua_pop(L, 1);
        luaL_addstring(b, "; Expires=");
        luaL_addstring(b, date);
        return;
    }
    lua_pop(L, 1);
    const char *date = mf__cookie_attr(L, opts, "expires");
    if (date) {
        luaL_addstring(b, "; Expires=");
        luaL_addstring(b, date);
    }
}

static void mf__cookie_check_keys(lua_State *L, int opts)
{
    static const char *const known[] = {"path",     "domain", "expires",
                                        "max_age",  "secure", "httponly",
                                        "samesite", NULL};
    lua_pushnil(L);
    while (lua_next(L, opts)) {
        lua_pop(L, 1);
        const char *k =
            lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
        int i = 0;
        while (known[i] && strcmp(known[i], k))
            i++;
        if (!known[i])
            luaL_error(L,
                       "set_cookie: unknown option '%s' (path, domain, "
                       "expires, max_age, secure, httponly, samesite)",
                       k);
    }
}

/* The attributes after name=value, in RFC 6265's order. */
static void mf__cookie_attributes(lua_State *L, int opts, luaL_Buffer *b)
{
    mf__cookie_check_keys(L, opts);
    const char *path = mf__cookie_attr(L, opts, "path");
    const char *domain = mf__cookie_attr(L, opts, "domain");
    mf__cookie_expires(L, opts, b);
    lua_getfield(L, opts, "max_age");
    int age_type = lua_type(L, -1);
    lua_Integer age = lua_tointeger(L, -1);
    lua_pop(L, 1); /* the buffer's level again before adding to it */
    if (age_type != LUA_TNIL && age_type != LUA_TNUMBER)
        luaL_error(L, "set_cookie: max_age must be a number of seconds");
    if (age_type == LUA_TNUMBER) {
        char text[40];
        snprintf(text, sizeof text, "; Max-Age=%lld", (long long)age);
        luaL_addstring(b, text);
    }
    if (domain) {
        luaL_addstring(b, "; Domain=");
        luaL_addstring(b, domain);
    }
    if (path) {
        luaL_addstring(b, "; Path=");
        luaL_addstring(b, path);
    }
    bool secure = mf__cookie_flag(L, opts, "secure");
    if (secure)
        luaL_addstring(b, "; Secure");
    if (mf__cookie_flag(L, opts, "httponly"))
        luaL_addstring(b, "; HttpOnly");
    const char *same = mf__cookie_attr(L, opts, "samesite");
    if (same && strcmp(same, "Strict") && strcmp(same, "Lax") &&
        strcmp(same, "None"))
        luaL_error(L, "set_cookie: samesite must be \"Strict\", \"Lax\" or "
                      "\"None\"");
    if (same && !strcmp(same, "None") && !secure)
        luaL_error(L, "set_cookie: samesite \"None\" needs secure = true");
    if (same) {
        luaL_addstring(b, "; SameSite=");
        luaL_addstring(b, same);
    }
}

/* The Set-Cookie value of the arguments name, value [, opts] from index
 * at: 1 for cookie.format, 2 for the response's method (self first), so
 * that an argument error names the parameter the caller wrote. */
static int mf__cookie_format_at(lua_State *L, int at)
{
    size_t nlen, vlen;
    const char *name = mf_lua_check_lstring(L, at, &nlen);
    const char *value = mf_lua_check_lstring(L, at + 1, &vlen);
    if (!lua_isnoneornil(L, at + 2))
        mf_lua_check_type(L, at + 2, LUA_TTABLE);
    if (!mf_http_field_name_valid(name, nlen))
        return mf_lua_arg_error(L, at, "a cookie name (a token) expected");
    if (!mf_http_cookie_value_valid(value, vlen))
        return mf_lua_arg_error(L, at + 1,
                                "a cookie value without spaces, '\"', "
                                "',', ';', '\\' or control bytes "
                                "expected (encode it first)");
    lua_settop(L, at + 2);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, name, nlen);
    luaL_addchar(&b, '=');
    luaL_addlstring(&b, value, vlen);
    if (lua_istable(L, at + 2))
        mf__cookie_attributes(L, at + 2, &b);
    luaL_pushresult(&b);
    return 1;
}

static int mf__cookie_format(lua_State *L)
{
    return mf__cookie_format_at(L, 1);
}

static int mf__cookie_set_line(lua_State *L)
{
    return mf__cookie_format_at(L, 2);
}

int mf_lua_open_cookie(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"parse cookie.parse(s)", mf__cookie_parse},
        {"format cookie.format(name, value [, opts])", mf__cookie_format},
        {"set_line resp:set_cookie(name, value [, opts])",
         mf__cookie_set_line},
        {NULL, NULL}};
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
