/*
 * lua/host/mf_lua_leaf.h — the kind-agnostic side of a task description (a
 * leaf of a flow, or a task waited on alone): which step a description
 * is, the host's registry of kinds, and the calls that reach a kind's ops
 * (moonflow/lua_kind.h) with the fields every kind shares (timeout,
 * callback) handled once.
 *
 * Owns: the registry table of kinds (a Lua table in the registry, name →
 * kind). The per-task data belongs to the record that allocated it (a
 * flow node, a parked task), which calls mf_lua_leaf_release once.
 */
#ifndef MF_LUA_LEAF_H
#define MF_LUA_LEAF_H

#include <moonflow/lua_kind.h>

#include "mf_lua_int.h"

/* Per-task data of a kind, after its record's fixed fields. */
#define MF_LUA_LEAF_DATA _Alignas(max_align_t) unsigned char data[]

typedef enum mf_lua_step {
    MF_LUA_STEP_SERIES,
    MF_LUA_STEP_PARALLEL,
    MF_LUA_STEP_GRAPH,
    MF_LUA_STEP_TASK
} mf_lua_step_t;

/* What desc.kind at idx names; for a task, *kind is its kind. Raises on
 * anything else. */
mf_lua_step_t mf_lua_desc_step(lua_State *L, int idx,
                               const mf_lua_kind_t **kind);
/* Raises on a malformed task description (before anything is built);
 * returns whether it has a callback. */
bool mf_lua_leaf_check(lua_State *L, int idx, const mf_lua_kind_t *kind);
/* The C task of a checked description, with its timeout set. */
mf_task_t *mf_lua_leaf_create(lua_State *L, int idx, const mf_lua_kind_t *kind,
                              void *data, mf_loop_t *loop, mf_task_cb cb,
                              void *user);
/* Fills the result table on top of L from a finished task. */
void mf_lua_leaf_result(lua_State *L, const mf_lua_kind_t *kind,
                        mf_task_t *task, void *data);
/* Whether a waiter with lean results gets true for the finished task (it
 * succeeded and its answer reports no failure) instead of its result. */
bool mf_lua_leaf_lean(const mf_lua_kind_t *kind, const mf_task_t *task,
                      void *data);
void mf_lua_leaf_release(const mf_lua_kind_t *kind, void *data);

/* Parks co on the task of the checked description at idx, alone
 * (mf_lua_park.c): returns lua_yield's value; the coroutine resumes with
 * the result table. An abort cancels the task. */
int mf_lua_park_task(lua_State *L, mf_lua_co_t *co, int idx,
                     const mf_lua_kind_t *kind);

/* The built-in task kinds, ended by NULL (lua/builtin/mf_lua_builtin.c,
 * like mf_lua_builtin_modules). */
extern const mf_lua_kind_t *const mf_lua_builtin_kinds[];
/* The registry of kinds, made at host creation with the built-in kinds in
 * it. */
void mf_lua_kinds_init(mf_lua_host_t *host);
/* has_kind(name) -> whether a task kind of that name is registered. */
int mf_lua_has_kind(lua_State *L);

/* Helpers for kinds' check and create. desc[field] must be absent or of
 * type t (raises naming the field otherwise); returns its type. */
int mf_lua_desc_opt_field(lua_State *L, int idx, const char *field, int t);
/* desc[field] as a number, fallback when it is not one. */
lua_Number mf_lua_desc_number(lua_State *L, int idx, const char *field,
                              lua_Number fallback);

#endif /* MF_LUA_LEAF_H */
