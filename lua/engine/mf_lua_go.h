/*
 * lua/engine/mf_lua_go.h — the table of C functions mf.go can call
 * (mf_lua_go.c), as the "go" task kind (mf_lua_task_go.c) looks them up.
 * Internal to lua/engine.
 */
#ifndef MF_LUA_GO_H
#define MF_LUA_GO_H

#include <moonflow/lua_go.h>

/* The C function mf.go knows by name (built-ins first), or NULL. */
mf_lua_go_fn mf_lua_go_find(const char *name);

#endif /* MF_LUA_GO_H */
