/*
 * lua/util/mf_lua_util.h — the openers of the utility modules, each
 * pushing one table (one file each in lua/util). Internal to lua/.
 */
#ifndef MF_LUA_UTIL_H
#define MF_LUA_UTIL_H

#include <lua.h>

int mf_lua_open_json(lua_State *L);   /* moonflow.json: encode, null */
int mf_lua_open_codec(lua_State *L);  /* moonflow.codec: base64, hex */
int mf_lua_open_crypto(lua_State *L); /* moonflow.crypto: digests, hmac */
int mf_lua_open_log(lua_State *L);    /* moonflow.log: log, worker */
int mf_lua_open_re(lua_State *L);     /* moonflow.re: PCRE2 regexes */
/* moonflow.shared: get, create (mf.shared, mf.shared_dict) */
int mf_lua_open_shared(lua_State *L);
/* moonflow.metrics: counter, gauge, histogram, text (mf.metrics) */
int mf_lua_open_metrics(lua_State *L);

#endif /* MF_LUA_UTIL_H */
