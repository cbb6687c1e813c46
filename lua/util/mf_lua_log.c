/*
 * lua/util/mf_lua_log.c — the module moonflow.log behind mf.log and mf.worker:
 *
 *   mf.log(level, ...)   one line on the host's log (the server's error
 *                        log, stderr): "2026/12/02 10:00:00 [warn]
 *                        GET /route: the arguments", each
 *                        argument as tostring writes it, joined without
 *                        separators (as ngx.log); levels are nginx's
 *                        ("debug" ... "emerg"); lines below the host's
 *                        log_level are skipped before anything is built
 *   mf.worker.id / .count  which worker this is (0-based), of how many
 *
 * A line never spans lines: control bytes in the message are written as
 * \xNN; one longer than MF_LOG_LINE_MAX is cut and says so. The label
 * ("GET /route") comes from the coroutine's describer (lua_host.h), set by
 * the server for a handler's coroutine.
 *
 * Owns nothing past a call. May call: the host (its log callback and
 * current coroutine).
 */
#include <lauxlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

#define MF_LOG_LINE_MAX 4000

/* Room kept at the end of a line for the note of a cut. */
#define MF_LOG_CUT_NOTE 48

/* Appends s escaped while it fits; false once the line is full. */
static bool mf__log_append(char *line, size_t *len, size_t room, const char *s,
                           size_t n)
{
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        bool escape = c < 0x20 || c == 0x7f;
        if (*len + (escape ? 4 : 1) > room)
            return false;
        if (escape)
            *len += (size_t)snprintf(line + *len, 5, "\\x%02x", c);
        else
            line[(*len)++] = (char)c;
    }
    return true;
}

/* Appends the message's arguments (from index 2) to line (cap bytes, len
 * used), each through tostring; a message too long is cut and says so. */
static void mf__log_message(lua_State *L, char *line, size_t len, size_t cap)
{
    int top = lua_gettop(L);
    size_t total = 0, room = cap - MF_LOG_CUT_NOTE;
    bool whole = true;
    for (int i = 2; i <= top; i++) {
        lua_getglobal(L, "tostring");
        lua_pushvalue(L, i);
        lua_call(L, 1, 1);
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        if (!s)
            luaL_error(L, "mf.log: tostring gave no string for argument %d", i);
        total += n;
        whole = whole && mf__log_append(line, &len, room, s, n);
        lua_pop(L, 1);
    }
    if (!whole)
        len += (size_t)snprintf(line + len, cap - len,
                                " ... (cut: the message had %zu bytes)", total);
    line[len] = '\0';
}

/* "2026/12/02 10:00:00 [warn] LABEL: " */
static size_t mf__log_prefix(mf_lua_host_t *host, int level, char *line,
                             size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t len = strftime(line, cap, "%Y/%m/%d %H:%M:%S", &tm);
    len += (size_t)snprintf(line + len, cap - len, " [%s] ",
                            mf_lua_log_level_name(level));
    mf_lua_co_t *co = host->current;
    if (co && co->hooks.describe) {
        char label[256];
        label[0] = '\0';
        co->hooks.describe(co->hooks.describe_ud, label, sizeof label);
        if (label[0])
            len += (size_t)snprintf(line + len, cap - len, "%s: ", label);
    }
    return len;
}

static int mf__log(lua_State *L)
{
    const char *name = mf_lua_check_string(L, 1);
    int level = mf_lua_log_level(name);
    if (!level)
        return mf_lua_arg_error(L, 1,
                                "a level expected (\"debug\", \"info\", "
                                "\"notice\", \"warn\", \"error\", "
                                "\"crit\", \"alert\" or \"emerg\")");
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (!host || level > host->log_level)
        return 0;
    char line[MF_LOG_LINE_MAX + 64];
    size_t len = mf__log_prefix(host, level, line, sizeof line);
    mf__log_message(L, line, len, sizeof line);
    host->log(host->log_ud, line);
    return 0;
}

int mf_lua_open_log(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    lua_createtable(L, 0, 2);
    mf_lua_push_named(L, mf__log, "mf.log(level, ...)");
    lua_setfield(L, -2, "log");
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, host ? (lua_Integer)host->worker_id : 0);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, host ? (lua_Integer)host->worker_count : 1);
    lua_setfield(L, -2, "count");
    lua_setfield(L, -2, "worker");
    return 1;
}
