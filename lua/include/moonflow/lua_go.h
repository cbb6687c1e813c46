/*
 * moonflow/lua_go.h — C functions callable from Lua on the compute pool:
 * mf.go(name, ...) and mf.task.go(name, ...).
 *
 * A function receives copies of its Lua arguments (strings; numbers are
 * converted) and runs on a pool thread: it must not touch Lua or loop
 * objects. It returns 0 and may set *out to a buffer from mf_xmalloc (the
 * Lua result string; the host frees it), or a negative MF_E* code (the task
 * ends MF_STATE_TASK_ERROR with that code).
 *
 * The table is process-wide and takes no lock: register before starting
 * hosts (names and functions are kept as given: string literals). Built
 * in: "sha256" (hex digest of its argument) and "sleep_ms" (blocks the
 * pool thread for N ms, returns N).
 */
#ifndef MOONFLOW_LUA_GO_H
#define MOONFLOW_LUA_GO_H

#include <stddef.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

#define MF_LUA_GO_MAX_ARGS 16

typedef struct mf_lua_go_args {
    size_t n;
    const char *v[MF_LUA_GO_MAX_ARGS];
    size_t len[MF_LUA_GO_MAX_ARGS];
} mf_lua_go_args_t;

typedef int (*mf_lua_go_fn)(const mf_lua_go_args_t *args, char **out,
                            size_t *out_len);

/* Returns 0, MF_EEXIST for a taken name, MF_ENOSPC when the table is full. */
MF_API int mf_lua_go_register(const char *name, mf_lua_go_fn fn);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_GO_H */
