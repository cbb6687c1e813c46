/*
 * moonflow/lua_shared.h — the process's named shared dicts, as Lua sees
 * them: mf.shared.NAME in every host of the process (every worker of
 * `moonflow serve`) is the one dict of that name (moonflow/shdict.h).
 *
 * Owns: the registry (up to MF_LUA_SHARED_MAX names) and every dict in it,
 * from mf_lua_shared_create (a server makes its configured dicts before
 * its workers start) or mf.shared_dict(name, bytes) in Lua, until
 * mf_lua_shared_destroy_all. Hosts keep pointers to the dicts, so destroy
 * them only once every host is gone; dicts outlive script reloads.
 * Thread-safe.
 */
#ifndef MOONFLOW_LUA_SHARED_H
#define MOONFLOW_LUA_SHARED_H

#include <stddef.h>

#include <moonflow/common.h>
#include <moonflow/shdict.h>

MF_EXTERN_C_BEGIN

#define MF_LUA_SHARED_MAX 64
#define MF_LUA_SHARED_MAX_NAME 64

/* A dict name is an identifier ([A-Za-z_][A-Za-z0-9_]*, up to 64 bytes). */
MF_API int mf_lua_shared_check_name(const char *name);

/* The dict named name: an existing one as it is (its capacity unchanged),
 * else a new one of capacity bytes. 0, or MF_EINVAL (a bad name or
 * capacity), MF_ENOSPC (MF_LUA_SHARED_MAX dicts already) or MF_ENOMEM. */
MF_API int mf_lua_shared_create(const char *name, size_t capacity,
                                mf_shdict_t **out);
/* NULL when there is none. */
MF_API mf_shdict_t *mf_lua_shared_find(const char *name);
/* Frees every dict of the registry (no host may be left). */
MF_API void mf_lua_shared_destroy_all(void);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_SHARED_H */
