/*
 * lua/host/mf_lua_arg.c — argument checks that name the function
 * (moonflow/lua_arg.h). The usages live in a weak-keyed registry table,
 * function value → usage string, filled at registration; a check reads it
 * only when it fails.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/lua_arg.h>

static const char usages_key = 'u';

/* Pushes the table of usages, made on first use. */
static void push_usages(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&usages_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_istable(L, -1))
        return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L); /* its metatable: weak keys, a function may go */
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&usages_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
}

/* Names the function on top of the stack (left there). */
static void name_top(lua_State *L, const char *usage, size_t n)
{
    push_usages(L);
    lua_pushvalue(L, -2);
    lua_pushlstring(L, usage, n);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

void mf_lua_name(lua_State *L, const char *usage)
{
    name_top(L, usage, strlen(usage));
}

void mf_lua_push_named(lua_State *L, lua_CFunction fn, const char *usage)
{
    lua_pushcfunction(L, fn);
    name_top(L, usage, strlen(usage));
}

void mf_lua_register_up(lua_State *L, const luaL_Reg *regs, int nup)
{
    for (; regs->name; regs++) {
        const char *space = strchr(regs->name, ' ');
        size_t field =
            space ? (size_t)(space - regs->name) : strlen(regs->name);
        for (int i = 0; i < nup; i++)
            lua_pushvalue(L, -nup);
        lua_pushcclosure(L, regs->func, nup);
        if (space)
            name_top(L, space + 1, strlen(space + 1));
        lua_pushlstring(L, regs->name, field);
        lua_insert(L, -2);
        lua_rawset(L, -(nup + 3));
    }
    lua_pop(L, nup);
}

void mf_lua_register(lua_State *L, const luaL_Reg *regs)
{
    mf_lua_register_up(L, regs, 0);
}

const char *mf_lua_usage(lua_State *L)
{
    lua_Debug ar;
    if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar))
        return NULL;
    push_usages(L);
    lua_insert(L, -2);
    lua_rawget(L, -2);
    /* the string stays alive in the table, which the registry holds */
    const char *usage = lua_tostring(L, -1);
    lua_pop(L, 2);
    return usage;
}

/* The name of parameter i (0-based, self excluded) in usage's list, into
 * out; "" when the list has one parameter and i is it (the usage says
 * enough), "argument #N" past the names or at "...". */
static void param_name(const char *usage, int i, char *out, size_t cap)
{
    const char *p = strpbrk(usage, "({");
    int count = 0, at = -1;
    const char *names[16] = {0};
    size_t lens[16] = {0};
    while (p && *p && *p != ')' && *p != '}' && count < 16) {
        p++;
        while (*p == ' ' || *p == '[' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ')' && *p != '}' && *p != '[' &&
               *p != ']')
            p++;
        size_t n = (size_t)(p - start);
        while (n && start[n - 1] == ' ')
            n--;
        if (n) {
            names[count] = start;
            lens[count++] = n;
        }
        while (*p == ']' || *p == ' ')
            p++;
    }
    if (i < count && !(lens[i] == 3 && !memcmp(names[i], "...", 3)))
        at = i;
    if (at < 0) {
        snprintf(out, cap, "argument #%d: ", i + 1);
    } else if (count == 1) {
        out[0] = '\0';
    } else {
        snprintf(out, cap, "%.*s: ", (int)lens[at], names[at]);
    }
}

int mf_lua_arg_error(lua_State *L, int arg, const char *msg)
{
    const char *usage = mf_lua_usage(L);
    if (!usage)
        return luaL_argerror(L, arg, msg);
    const char *paren = strpbrk(usage, "({");
    size_t head = paren ? (size_t)(paren - usage) : strlen(usage);
    bool method = memchr(usage, ':', head) != NULL;
    char param[64];
    if (method && arg == 1)
        snprintf(param, sizeof param, "self: ");
    else
        param_name(usage, arg - 1 - (method ? 1 : 0), param, sizeof param);
    return luaL_error(L, "%s: %s%s", usage, param, msg);
}

int mf_lua_type_error(lua_State *L, int arg, const char *expected)
{
    const char *article =
        strchr("aeiou", tolower((unsigned char)*expected)) ? "an" : "a";
    const char *msg = lua_pushfstring(L, "%s %s expected, got %s", article,
                                      expected, luaL_typename(L, arg));
    return mf_lua_arg_error(L, arg, msg);
}

lua_Number mf_lua_check_number(lua_State *L, int arg)
{
    lua_Number n = lua_tonumber(L, arg);
    if (n == 0 && !lua_isnumber(L, arg))
        mf_lua_type_error(L, arg, "number");
    return n;
}

lua_Integer mf_lua_check_integer(lua_State *L, int arg)
{
    lua_Integer n = lua_tointeger(L, arg);
    if (n == 0 && !lua_isnumber(L, arg))
        mf_lua_type_error(L, arg, "number");
    return n;
}

const char *mf_lua_check_lstring(lua_State *L, int arg, size_t *len)
{
    const char *s = lua_tolstring(L, arg, len);
    if (!s)
        mf_lua_type_error(L, arg, "string");
    return s;
}

lua_Number mf_lua_opt_number(lua_State *L, int arg, lua_Number def)
{
    return lua_isnoneornil(L, arg) ? def : mf_lua_check_number(L, arg);
}

lua_Integer mf_lua_opt_integer(lua_State *L, int arg, lua_Integer def)
{
    return lua_isnoneornil(L, arg) ? def : mf_lua_check_integer(L, arg);
}

const char *mf_lua_opt_lstring(lua_State *L, int arg, const char *def,
                               size_t *len)
{
    if (!lua_isnoneornil(L, arg))
        return mf_lua_check_lstring(L, arg, len);
    if (len)
        *len = def ? strlen(def) : 0;
    return def;
}

void mf_lua_check_type(lua_State *L, int arg, int type)
{
    if (lua_type(L, arg) != type)
        mf_lua_type_error(L, arg, lua_typename(L, type));
}

void mf_lua_check_any(lua_State *L, int arg)
{
    if (lua_type(L, arg) == LUA_TNONE)
        mf_lua_arg_error(L, arg, "a value expected");
}

void *mf_lua_check_udata(lua_State *L, int arg, const char *tname)
{
    void *p = lua_touserdata(L, arg);
    if (p && lua_getmetatable(L, arg)) {
        luaL_getmetatable(L, tname);
        bool same = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (same)
            return p;
    }
    mf_lua_type_error(L, arg, tname);
    return NULL;
}
