/*
 * lua/util/mf_lua_metrics.c — user metrics from Lua (moonflow.metrics, behind
 * mf.metrics), in lua-resty-prometheus's shape:
 *
 *   local c = mf.metrics.counter(name, help [, label_names])
 *   local g = mf.metrics.gauge(name, help [, label_names])
 *   local h = mf.metrics.histogram(name, help [, label_names [, buckets]])
 *   c:inc([n [, label_values]])   g:set(v [, lv])  g:inc([n [, lv]])
 *   g:dec([n [, lv]])  h:observe(v [, lv])  m:value([lv])  mf.metrics.text()
 *
 * The metrics live in the host's registry (moonflow/metrics.h): the
 * process's one, given by the server (every worker writes its own shard,
 * worker_id; a scrape adds them up), or one of the host's own. Declaring a
 * metric again in the same state gives the same object; in another worker
 * the same family. A series is looked up through nested tables of the
 * label values (no string is built per call); a new tuple asks the
 * registry once.
 *
 * Misuse raises, naming the method and the argument (a wrong number of
 * label values, a value that is not a string or a number, a negative
 * counter step, a bad name or a family of that name with another shape);
 * a series the registry cannot make (its family is full: a label with
 * unbounded values; no memory) answers nil and the reason.
 *
 * Owns: per state, the metric objects (cached by name in an upvalue
 * table) and their series caches. May call: the registry and the Lua API.
 */
#include <lauxlib.h>
#include <math.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/error.h>
#include <moonflow/metrics.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

static const char mf__metric_mt[] = "moonflow.metric";

typedef struct mf_lua_metric {
    mf_metric_family_t *family;
    mf_metric_type_t type;
    unsigned shard;
    size_t nlabels;
    mf_metric_t *plain; /* the series of a family without labels */
    int cache;          /* registry ref: values → ... → series */
} mf_lua_metric_t;

/* The host's registry: the process's, or its own made on first use. */
static mf_metrics_t *mf__registry(lua_State *L, unsigned *shard)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (!host)
        luaL_error(L, "mf.metrics: no moonflow host");
    if (!host->metrics) {
        host->metrics = mf_metrics_create(1);
        if (!host->metrics)
            luaL_error(L, "mf.metrics: not enough memory");
        host->own_metrics = true;
    }
    *shard = host->own_metrics ? 0 : host->worker_id;
    return host->metrics;
}

/* ---- declaring --------------------------------------------------------- */

/* The strings of the list at idx (nil: none) into out (at most max). */
static size_t mf__strings(lua_State *L, int idx, const char *what,
                          const char **out, size_t max)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    mf_lua_check_type(L, idx, LUA_TTABLE);
    size_t n = lua_objlen(L, idx);
    if (n > max)
        luaL_error(L, "mf.metrics: %s: at most %d expected, got %d", what,
                   (int)max, (int)n);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "mf.metrics: %s[%d]: a string expected, got %s", what,
                       (int)i + 1, luaL_typename(L, -1));
        out[i] = lua_tostring(L, -1); /* anchored by the table */
        lua_pop(L, 1);
    }
    return n;
}

static size_t mf__buckets(lua_State *L, int idx, double *out)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    mf_lua_check_type(L, idx, LUA_TTABLE);
    size_t n = lua_objlen(L, idx);
    if (n == 0 || n > MF_METRIC_MAX_BUCKETS)
        luaL_error(L, "mf.metrics: buckets: 1 to %d bounds expected, got %d",
                   MF_METRIC_MAX_BUCKETS, (int)n);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "mf.metrics: buckets[%d]: a number expected, got %s",
                       (int)i + 1, luaL_typename(L, -1));
        out[i] = lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
    return n;
}

static mf_lua_metric_t *mf__new_object(lua_State *L, mf_metric_family_t *f,
                                       unsigned shard)
{
    mf_lua_metric_t *m = lua_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    m->family = f;
    m->type = mf_metric_family_type(f);
    m->shard = shard;
    m->nlabels = mf_metric_family_labels(f);
    m->cache = LUA_NOREF;
    luaL_getmetatable(L, mf__metric_mt);
    lua_setmetatable(L, -2);
    if (m->nlabels == 0) {
        if (mf_metric_series(f, NULL, 0, &m->plain) != 0)
            luaL_error(L, "mf.metrics: not enough memory");
    } else {
        lua_newtable(L);
        m->cache = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    return m;
}

/* mf.metrics.TYPE(name, help [, labels [, buckets]]); upvalue 1: this
 * state's objects by name. */
static int mf__declare(lua_State *L, mf_metric_type_t type)
{
    const char *labels[MF_METRIC_MAX_LABELS];
    double buckets[MF_METRIC_MAX_BUCKETS];
    mf_metric_spec_t spec = {mf_lua_check_string(L, 1),
                             mf_lua_opt_string(L, 2, ""),
                             type,
                             labels,
                             0,
                             NULL,
                             0};
    spec.nlabels =
        mf__strings(L, 3, "label names", labels, MF_METRIC_MAX_LABELS);
    if (type == MF_METRIC_HISTOGRAM) {
        spec.nbuckets = mf__buckets(L, 4, buckets);
        spec.buckets = spec.nbuckets ? buckets : NULL;
    }
    unsigned shard;
    mf_metrics_t *registry = mf__registry(L, &shard);
    mf_metric_family_t *f;
    char why[256];
    int rc = mf_metrics_family(registry, &spec, &f, why, sizeof why);
    if (rc == MF_ENOMEM)
        return luaL_error(L, "mf.metrics: not enough memory");
    if (rc)
        return luaL_error(L, "mf.metrics: %s", why);
    lua_pushvalue(L, 1);
    lua_rawget(L, lua_upvalueindex(1));
    if (lua_touserdata(L, -1))
        return 1; /* the registry said the shape is the same */
    lua_pop(L, 1);
    mf__new_object(L, f, shard);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, lua_upvalueindex(1));
    return 1;
}

static int mf__counter(lua_State *L)
{
    return mf__declare(L, MF_METRIC_COUNTER);
}
static int mf__gauge(lua_State *L)
{
    return mf__declare(L, MF_METRIC_GAUGE);
}
static int mf__histogram(lua_State *L)
{
    return mf__declare(L, MF_METRIC_HISTOGRAM);
}

/* mf.metrics.text(): the exposition of the host's registry. */
static int mf__text(lua_State *L)
{
    unsigned shard;
    size_t len;
    char *text = mf_metrics_text(mf__registry(L, &shard), &len);
    if (!text)
        return luaL_error(L, "mf.metrics.text: not enough memory");
    lua_pushlstring(L, text, len);
    mf_free(text);
    return 1;
}

/* ---- series ------------------------------------------------------------ */

static mf_lua_metric_t *mf__check(lua_State *L, const char *method)
{
    mf_lua_metric_t *m = luaL_testudata(L, 1, mf__metric_mt);
    if (!m)
        luaL_error(L, "metric:%s: call it with ':' on a metric", method);
    return m;
}

/* The label values at idx as strings, checked: count and types. */
static void mf__check_values(lua_State *L, const mf_lua_metric_t *m, int idx,
                             const char *method, const char **values)
{
    if (lua_type(L, idx) != LUA_TTABLE || lua_objlen(L, idx) != m->nlabels)
        luaL_error(L, "metric:%s: %d label values expected (a list), got %s",
                   method, (int)m->nlabels,
                   lua_type(L, idx) == LUA_TTABLE ? "another count"
                                                  : luaL_typename(L, idx));
    for (size_t i = 0; i < m->nlabels; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        int t = lua_type(L, -1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_error(L,
                       "metric:%s: label value %d: a string or a number "
                       "expected, got %s",
                       method, (int)i + 1, luaL_typename(L, -1));
        values[i] = lua_tostring(L, -1); /* kept on the stack */
    }
}

/* Walks (and with make, builds) the cache's nested tables down to the
 * last value: leaves cache[v1]..[vn-1] on the stack top. */
static void mf__cache_walk(lua_State *L, const mf_lua_metric_t *m, int idx,
                           bool make)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, m->cache);
    for (size_t i = 0; i + 1 < m->nlabels; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        lua_rawget(L, -2);
        if (lua_istable(L, -1) || !make) {
            lua_replace(L, -2);
            if (!lua_istable(L, -1))
                return;
            continue;
        }
        lua_pop(L, 1);
        lua_newtable(L);
        lua_rawgeti(L, idx, (int)i + 1);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
        lua_replace(L, -2);
    }
}

/* The series for the label values at idx; NULL with nil, err pushed when
 * the registry cannot make it. */
static mf_metric_t *mf__series(lua_State *L, mf_lua_metric_t *m, int idx,
                               const char *method)
{
    if (m->nlabels == 0) {
        if (!lua_isnoneornil(L, idx))
            luaL_error(L, "metric:%s: this metric has no labels", method);
        return m->plain;
    }
    int top = lua_gettop(L);
    if (lua_type(L, idx) == LUA_TTABLE) {
        mf__cache_walk(L, m, idx, false);
        if (lua_istable(L, -1)) {
            lua_rawgeti(L, idx, (int)m->nlabels);
            lua_rawget(L, -2);
            mf_metric_t *s = lua_touserdata(L, -1);
            lua_settop(L, top);
            if (s)
                return s;
        }
        lua_settop(L, top);
    }
    const char *values[MF_METRIC_MAX_LABELS];
    mf__check_values(L, m, idx, method, values);
    mf_metric_t *s;
    int rc = mf_metric_series(m->family, values, m->nlabels, &s);
    lua_settop(L, top);
    if (rc) {
        lua_pushnil(L);
        lua_pushstring(L, rc == MF_ENOSPC
                              ? "too many series (a label with unbounded "
                                "values?)"
                              : mf_strerror(rc));
        return NULL;
    }
    mf__cache_walk(L, m, idx, true);
    lua_rawgeti(L, idx, (int)m->nlabels);
    lua_pushlightuserdata(L, s);
    lua_rawset(L, -3);
    lua_settop(L, top);
    return s;
}

static double mf__number(lua_State *L, int idx, double dflt, const char *method)
{
    if (lua_isnoneornil(L, idx))
        return dflt;
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "metric:%s: a number expected, got %s", method,
                   luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

static void mf__must_be(lua_State *L, const mf_lua_metric_t *m,
                        mf_metric_type_t type, const char *method)
{
    static const char *const names[] = {"counter", "gauge", "histogram"};
    if (m->type != type)
        luaL_error(L, "metric:%s: not for a %s", method, names[m->type]);
}

/* c:inc([n [, lv]]) and g:inc / g:dec: true, or nil and the reason. */
static int mf__add(lua_State *L, const char *method, double sign)
{
    mf_lua_metric_t *m = mf__check(L, method);
    if (m->type == MF_METRIC_HISTOGRAM)
        return luaL_error(L, "metric:%s: not for a histogram (observe)",
                          method);
    double n = mf__number(L, 2, 1, method);
    if (m->type == MF_METRIC_COUNTER && !(n >= 0))
        return luaL_error(L,
                          "metric:%s: a counter only goes up (a step >= 0 "
                          "expected, got %f)",
                          method, n);
    if (!isfinite(n))
        return luaL_error(L, "metric:%s: a finite number expected", method);
    mf_metric_t *s = mf__series(L, m, 3, method);
    if (!s)
        return 2;
    mf_metric_add(s, m->shard, sign * n);
    lua_pushboolean(L, 1);
    return 1;
}

static int mf__inc(lua_State *L)
{
    return mf__add(L, "inc", 1);
}

static int mf__dec(lua_State *L)
{
    mf_lua_metric_t *m = mf__check(L, "dec");
    mf__must_be(L, m, MF_METRIC_GAUGE, "dec");
    return mf__add(L, "dec", -1);
}

/* g:set(v [, lv]) and h:observe(v [, lv]): one value into the series of
 * a metric of that type; true, or nil and the reason. */
static int mf__record(lua_State *L, const char *method, mf_metric_type_t type,
                      void (*record)(mf_metric_t *, unsigned, double))
{
    mf_lua_metric_t *m = mf__check(L, method);
    mf__must_be(L, m, type, method);
    double v = mf_lua_check_number(L, 2);
    mf_metric_t *s = mf__series(L, m, 3, method);
    if (!s)
        return 2;
    record(s, m->shard, v);
    lua_pushboolean(L, 1);
    return 1;
}

static int mf__set(lua_State *L)
{
    return mf__record(L, "set", MF_METRIC_GAUGE, mf_metric_set);
}

static int mf__observe(lua_State *L)
{
    return mf__record(L, "observe", MF_METRIC_HISTOGRAM, mf_metric_observe);
}

/* m:value([lv]): the sum over the workers (a histogram: its count, and
 * its sum second). */
static int mf__value(lua_State *L)
{
    mf_lua_metric_t *m = mf__check(L, "value");
    mf_metric_t *s = mf__series(L, m, 2, "value");
    if (!s)
        return 2;
    lua_pushnumber(L, mf_metric_value(s));
    if (m->type != MF_METRIC_HISTOGRAM)
        return 1;
    lua_pushnumber(L, mf_metric_sum(s));
    return 2;
}

static int mf__metric_gc(lua_State *L)
{
    mf_lua_metric_t *m = lua_touserdata(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, m->cache);
    m->cache = LUA_NOREF;
    return 0;
}

int mf_lua_open_metrics(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"inc m:inc([n [, label_values]])", mf__inc},
        {"dec g:dec([n [, label_values]])", mf__dec},
        {"set g:set(v [, label_values])", mf__set},
        {"observe h:observe(v [, label_values])", mf__observe},
        {"value m:value([label_values])", mf__value},
        {NULL, NULL}};
    mf_lua_class(L, mf__metric_mt, methods, mf__metric_gc, NULL);
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"counter mf.metrics.counter(name, help [, label_names])", mf__counter},
        {"gauge mf.metrics.gauge(name, help [, label_names])", mf__gauge},
        {"histogram mf.metrics.histogram(name, help [, label_names [, "
         "buckets]])",
         mf__histogram},
        {NULL, NULL}};
    lua_createtable(L, 0, 4);
    lua_newtable(L); /* this state's objects by name */
    mf_lua_register_up(L, fns, 1);
    mf_lua_push_named(L, mf__text, "mf.metrics.text()");
    lua_setfield(L, -2, "text");
    return 1;
}
