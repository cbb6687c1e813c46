/*
 * lua/util/mf_lua_re.c — the module moonflow.re behind mf.re: PCRE2 regular
 * expressions (8-bit, JIT-compiled), ngx.re's shape.
 *
 *   mf.re.match(s, re [, opts [, init]])  captures or nil: m[0] the whole
 *       match, m[1].. the groups (false when a group took no part), m.name
 *       for named groups
 *   mf.re.find(s, re [, opts [, init [, nth]]])  from, to (1-based,
 *       inclusive) of the match or of group nth, or nil
 *   mf.re.gmatch(s, re [, opts])  an iterator of captures tables
 *   mf.re.sub(s, re, repl [, opts]) / mf.re.gsub(...)  new string and the
 *       number of replacements; repl a template ($0, $1 .. $9, ${12},
 *       ${name}, $$ for a dollar) or a function(m) returning a string
 *
 * opts letters: i (caseless), m (multiline), s (dot matches newline), x
 * (extended), u (UTF-8 pattern and subject), a (anchored), D (duplicate
 * names); j and o are accepted and always in effect (every pattern is
 * JIT-compiled when PCRE2 can, and cached). A pattern that does not
 * compile, a match past PCRE2's limits (catastrophic backtracking stops at
 * MF_RE_MATCH_LIMIT steps) or invalid UTF-8 under "u" return nil and the
 * reason as the last value, as ngx.re does; misuse (wrong types, an
 * unknown option letter) raises.
 *
 * Owns the compiled patterns: userdata "moonflow.regex" (code, match data,
 * match context; __gc frees them), cached per state in a registry table
 * keyed by options and pattern, up to MF_RE_CACHE_MAX patterns (past it,
 * new patterns are compiled per call and left to the collector).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <lauxlib.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

#define MF_RE_MT "moonflow.regex"
#define MF_RE_CACHE_MAX 1024
#define MF_RE_MATCH_LIMIT 1000000
#define MF_RE_DEPTH_LIMIT 10000

static const char mf__re_cache_key = 0;

typedef struct mf__re {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    uint32_t groups; /* capture groups, 0 not counted */
} mf__re_t;

static int mf__re_gc(lua_State *L)
{
    mf__re_t *re = mf_lua_check_udata(L, 1, MF_RE_MT);
    pcre2_match_data_free(re->md);
    pcre2_match_context_free(re->mctx);
    pcre2_code_free(re->code);
    re->md = NULL;
    re->mctx = NULL;
    re->code = NULL;
    return 0;
}

/* PCRE2's words for an error code. */
static void mf__re_push_error(lua_State *L, const char *what, int code)
{
    PCRE2_UCHAR text[256];
    if (pcre2_get_error_message(code, text, sizeof text) < 0)
        strcpy((char *)text, "unknown error");
    lua_pushfstring(L, "regex %s: %s", what, (const char *)text);
}

static uint32_t mf__re_flags(lua_State *L, int idx)
{
    const char *o = mf_lua_opt_string(L, idx, "");
    uint32_t flags = 0;
    for (; *o; o++) {
        switch (*o) {
        case 'i':
            flags |= PCRE2_CASELESS;
            break;
        case 'm':
            flags |= PCRE2_MULTILINE;
            break;
        case 's':
            flags |= PCRE2_DOTALL;
            break;
        case 'x':
            flags |= PCRE2_EXTENDED;
            break;
        case 'u':
            flags |= PCRE2_UTF;
            break;
        case 'a':
            flags |= PCRE2_ANCHORED;
            break;
        case 'D':
            flags |= PCRE2_DUPNAMES;
            break;
        case 'j':
        case 'o':
            break;
        default:
            mf_lua_arg_error(L, idx,
                             lua_pushfstring(L,
                                             "unknown regex option '%c' "
                                             "(imsxuaDjo)",
                                             *o));
        }
    }
    return flags;
}

/* Compiles pattern (with flags) into a new userdata on the stack; on
 * failure pushes nil and the reason instead. */
static bool mf__re_compile(lua_State *L, const char *pattern, size_t len,
                           uint32_t flags)
{
    int err;
    PCRE2_SIZE at;
    mf__re_t *re = lua_newuserdata(L, sizeof *re);
    memset(re, 0, sizeof *re);
    luaL_getmetatable(L, MF_RE_MT);
    lua_setmetatable(L, -2);
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, flags, &err, &at, NULL);
    if (!re->code) {
        lua_pop(L, 1);
        lua_pushnil(L);
        PCRE2_UCHAR text[256];
        pcre2_get_error_message(err, text, sizeof text);
        lua_pushfstring(L, "regex \"%s\": %s at offset %d", pattern,
                        (const char *)text, (int)at);
        return false;
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* else interpreted */
    pcre2_pattern_info(re->code, PCRE2_INFO_CAPTURECOUNT, &re->groups);
    re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    re->mctx = pcre2_match_context_create(NULL);
    if (!re->md || !re->mctx)
        luaL_error(L, "not enough memory");
    pcre2_set_match_limit(re->mctx, MF_RE_MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, MF_RE_DEPTH_LIMIT);
    return true;
}

/* The compiled pattern of argument idx with the options of argument
 * opts, from the state's cache or compiled now; NULL after pushing nil and
 * the reason. The userdata stays on the stack (one slot). */
static mf__re_t *mf__re_get(lua_State *L, int idx, int opts)
{
    size_t len;
    const char *pattern = mf_lua_check_lstring(L, idx, &len);
    uint32_t flags = mf__re_flags(L, opts);
    lua_pushlightuserdata(L, (void *)&mf__re_cache_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    int cache = lua_gettop(L);
    lua_pushfstring(L, "%d/", (int)flags);
    lua_pushvalue(L, idx);
    lua_concat(L, 2);
    lua_pushvalue(L, -1);
    lua_rawget(L, cache);
    if (!lua_isnil(L, -1)) {
        lua_replace(L, cache);
        lua_settop(L, cache);
        return lua_touserdata(L, -1);
    }
    lua_pop(L, 1);
    if (!mf__re_compile(L, pattern, len, flags)) {
        lua_remove(L, cache + 1); /* the key */
        lua_remove(L, cache);     /* nil, reason remain */
        return NULL;
    }
    lua_rawgeti(L, cache, 0); /* the count of cached patterns */
    lua_Integer n = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (n < MF_RE_CACHE_MAX) {
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        lua_rawset(L, cache);
        lua_pushinteger(L, n + 1);
        lua_rawseti(L, cache, 0);
    }
    lua_replace(L, cache);
    lua_settop(L, cache);
    return lua_touserdata(L, -1);
}

/* pcre2_match from byte offset at; >0 matched, 0 no match, <0 after
 * pushing nil and the reason. */
static int mf__re_exec(lua_State *L, mf__re_t *re, const char *s, size_t n,
                       size_t at, uint32_t options)
{
    int rc =
        pcre2_match(re->code, (PCRE2_SPTR)s, n, at, options, re->md, re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        lua_pushnil(L);
        mf__re_push_error(L, "match", rc);
        return -1;
    }
    return 1;
}

/* The captures table of the last match: [0], [1].., names. */
static void mf__re_push_captures(lua_State *L, mf__re_t *re, const char *s)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    lua_createtable(L, (int)re->groups, 1);
    for (uint32_t i = 0; i <= re->groups; i++) {
        if (ov[2 * i] == PCRE2_UNSET)
            lua_pushboolean(L, 0);
        else
            lua_pushlstring(L, s + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
        lua_rawseti(L, -2, (int)i);
    }
    uint32_t count, size;
    PCRE2_SPTR table;
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMECOUNT, &count);
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMEENTRYSIZE, &size);
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMETABLE, &table);
    for (uint32_t i = 0; i < count; i++, table += size) {
        int group = table[0] << 8 | table[1];
        lua_rawgeti(L, -1, group);
        lua_setfield(L, -2, (const char *)table + 2);
    }
}

/* init (1-based, default 1) as a byte offset; may be past the end. */
static size_t mf__re_init(lua_State *L, int idx, size_t n)
{
    lua_Integer init = mf_lua_opt_integer(L, idx, 1);
    if (init < 1)
        mf_lua_arg_error(L, idx, "a position from 1 expected");
    return (size_t)init - 1 > n ? n + 1 : (size_t)init - 1;
}

static int mf__re_match(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    size_t at = mf__re_init(L, 4, n);
    mf__re_t *re = mf__re_get(L, 2, 3);
    if (!re)
        return 2;
    if (at > n)
        return 0;
    int rc = mf__re_exec(L, re, s, n, at, 0);
    if (rc <= 0)
        return rc < 0 ? 2 : 0;
    mf__re_push_captures(L, re, s);
    return 1;
}

static int mf__re_find(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    size_t at = mf__re_init(L, 4, n);
    lua_Integer nth = mf_lua_opt_integer(L, 5, 0);
    mf__re_t *re = mf__re_get(L, 2, 3);
    if (!re)
        return 2;
    if (nth < 0 || (uint32_t)nth > re->groups)
        return mf_lua_arg_error(L, 5, "no such group");
    if (at > n)
        return 0;
    int rc = mf__re_exec(L, re, s, n, at, 0);
    if (rc <= 0)
        return rc < 0 ? 2 : 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    if (ov[2 * nth] == PCRE2_UNSET)
        return 0;
    lua_pushinteger(L, (lua_Integer)ov[2 * nth] + 1);
    lua_pushinteger(L, (lua_Integer)ov[2 * nth + 1]);
    return 2;
}

/* Where the search after a match at ov[0..1] goes on: past an empty
 * match by one character, so an empty pattern cannot loop. */
static size_t mf__re_next(const PCRE2_SIZE *ov)
{
    return ov[1] > ov[0] ? ov[1] : ov[1] + 1;
}

/* gmatch's iterator: upvalues subject, regex, position. */
static int mf__re_gmatch_next(lua_State *L)
{
    size_t n;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &n);
    mf__re_t *re = lua_touserdata(L, lua_upvalueindex(2));
    size_t at = (size_t)lua_tointeger(L, lua_upvalueindex(3));
    if (at > n)
        return 0;
    int rc = mf__re_exec(L, re, s, n, at, 0);
    if (rc <= 0) {
        lua_pushinteger(L, (lua_Integer)n + 1); /* done */
        lua_replace(L, lua_upvalueindex(3));
        return rc < 0 ? luaL_error(L, "%s", lua_tostring(L, -1)) : 0;
    }
    lua_pushinteger(
        L, (lua_Integer)mf__re_next(pcre2_get_ovector_pointer(re->md)));
    lua_replace(L, lua_upvalueindex(3));
    mf__re_push_captures(L, re, s);
    return 1;
}

static int mf__re_gmatch(lua_State *L)
{
    mf_lua_check_string(L, 1);
    if (!mf__re_get(L, 2, 3))
        return 2;
    lua_pushvalue(L, 1);
    lua_insert(L, -2);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, mf__re_gmatch_next, 3);
    return 1;
}

static void mf__re_add_group(lua_State *L, luaL_Buffer *b, mf__re_t *re,
                             const char *s, int group)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    if (group < 0 || (uint32_t)group > re->groups)
        luaL_error(L,
                   "mf.re: the replacement names group %d; the pattern "
                   "has %d",
                   group, (int)re->groups);
    if (ov[2 * group] != PCRE2_UNSET)
        luaL_addlstring(b, s + ov[2 * group],
                        ov[2 * group + 1] - ov[2 * group]);
}

/* Appends repl's expansion for the last match: $N, ${N}, ${name}, $$. */
static void mf__re_expand(lua_State *L, luaL_Buffer *b, mf__re_t *re,
                          const char *s, const char *t, size_t tn)
{
    for (size_t i = 0; i < tn; i++) {
        if (t[i] != '$' || i + 1 == tn) {
            luaL_addchar(b, t[i]);
            continue;
        }
        char c = t[++i];
        if (c == '$') {
            luaL_addchar(b, '$');
        } else if (c >= '0' && c <= '9') {
            mf__re_add_group(L, b, re, s, c - '0');
        } else if (c == '{') {
            const char *end = memchr(t + i, '}', tn - i);
            if (!end)
                luaL_error(L, "mf.re: an unclosed ${ in the replacement");
            char name[64];
            size_t len = (size_t)(end - t) - i - 1;
            if (len == 0 || len >= sizeof name)
                luaL_error(L, "mf.re: a bad ${...} in the replacement");
            memcpy(name, t + i + 1, len);
            name[len] = '\0';
            int group = name[0] >= '0' && name[0] <= '9'
                            ? atoi(name)
                            : pcre2_substring_number_from_name(
                                  re->code, (PCRE2_SPTR)name);
            mf__re_add_group(L, b, re, s, group);
            i = (size_t)(end - t);
        } else {
            luaL_error(L, "mf.re: a '$' in the replacement must start $N, "
                          "${N}, ${name} or $$");
        }
    }
}

/* Appends the replacement of the last match: repl's expansion, or what
 * the function repl returned for the captures (a string or a number). */
static void mf__re_replace(lua_State *L, luaL_Buffer *b, mf__re_t *re,
                           const char *s, int repl)
{
    if (lua_type(L, repl) == LUA_TSTRING) {
        size_t tn;
        const char *t = lua_tolstring(L, repl, &tn);
        mf__re_expand(L, b, re, s, t, tn);
        return;
    }
    lua_pushvalue(L, repl);
    mf__re_push_captures(L, re, s);
    lua_call(L, 1, 1);
    if (!lua_isstring(L, -1))
        luaL_error(L,
                   "mf.re: the replacement function returned a %s (a "
                   "string expected)",
                   luaL_typename(L, -1));
    luaL_addvalue(b);
}

static int mf__re_substitute(lua_State *L, bool all)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    int t = lua_type(L, 3);
    mf_lua_arg_check(L, t == LUA_TSTRING || t == LUA_TFUNCTION, 3,
                     "a template string or a function expected");
    mf__re_t *re = mf__re_get(L, 2, 4);
    if (!re)
        return 2;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t at = 0, copied = 0;
    lua_Integer count = 0;
    while (at <= n) {
        int rc = mf__re_exec(L, re, s, n, at, 0);
        if (rc < 0)
            return 2; /* nil, reason: the buffer is dropped */
        if (rc == 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
        luaL_addlstring(&b, s + copied, ov[0] - copied);
        mf__re_replace(L, &b, re, s, 3);
        count++;
        copied = ov[1];
        at = mf__re_next(ov);
        if (ov[1] == ov[0] && ov[1] < n) /* an empty match keeps its char */
            luaL_addchar(&b, s[ov[1]]), copied++;
        if (!all)
            break;
    }
    if (copied < n)
        luaL_addlstring(&b, s + copied, n - copied);
    luaL_pushresult(&b);
    lua_pushinteger(L, count);
    return 2;
}

static int mf__re_sub(lua_State *L)
{
    return mf__re_substitute(L, false);
}

static int mf__re_gsub(lua_State *L)
{
    return mf__re_substitute(L, true);
}

int mf_lua_open_re(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"match mf.re.match(s, re [, opts [, init]])", mf__re_match},
        {"find mf.re.find(s, re [, opts [, init [, nth]]])", mf__re_find},
        {"gmatch mf.re.gmatch(s, re [, opts])", mf__re_gmatch},
        {"sub mf.re.sub(s, re, repl [, opts])", mf__re_sub},
        {"gsub mf.re.gsub(s, re, repl [, opts])", mf__re_gsub},
        {NULL, NULL}};
    if (luaL_newmetatable(L, MF_RE_MT)) {
        lua_pushcfunction(L, mf__re_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_pushlightuserdata(L, (void *)&mf__re_cache_key);
    lua_newtable(L);
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
