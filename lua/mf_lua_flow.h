/*
 * lua/mf_lua_flow.h — internals of explicit flows (mf.series, mf.parallel,
 * mf.task.*): the C tree built from a Lua description, and the leaf kinds.
 *
 * A flow owns its nodes (loop memory) until its root series completes; its
 * Lua side (result tables, callbacks) lives in one registry-anchored state
 * table, released when the waiting coroutine resumes or is aborted.
 */
#ifndef MF_LUA_FLOW_H
#define MF_LUA_FLOW_H

#include <moonflow/parallel.h>

#include "mf_lua_int.h"

typedef enum mf_lua_kind {
    MF_LUA_SERIES,
    MF_LUA_PARALLEL,
    MF_LUA_TIMER,
    MF_LUA_HTTP,
    MF_LUA_GO,
    MF_LUA_REDIS
} mf_lua_kind_t;

typedef struct mf_lua_flow mf_lua_flow_t;
typedef struct mf_lua_node mf_lua_node_t;

struct mf_lua_node {
    mf_list_t link; /* flow->nodes */
    mf_lua_flow_t *flow;
    mf_task_t *task;      /* leaf: until its callback has run */
    mf_series_t *series;  /* series node: until its callback has run */
    mf_lua_node_t *owner; /* the series or parallel node it runs in */
    int slot;             /* its result table: state[1][slot] */
    mf_lua_kind_t kind;
    bool has_cb;
    bool canceled; /* by flow:cancel(): no callback, no more pushes */
    unsigned char redis_flags; /* MF_LUA_REDIS_LIST, MF_LUA_REDIS_STATUS */
    char *ca_file;             /* http: kept until the flow ends */
};

/* The kind named by desc.kind at idx; raises on anything else. */
mf_lua_kind_t mf_lua_desc_kind(lua_State *L, int idx);
/* Raises on a malformed leaf description (before anything is built). */
void mf_lua_leaf_check(lua_State *L, int idx, mf_lua_kind_t kind);
/* Creates the C task of a checked leaf description; cb/user as usual. */
mf_task_t *mf_lua_leaf_create(lua_State *L, int idx, mf_lua_node_t *node,
                              mf_loop_t *loop, mf_task_cb cb);
/* Fills the result table on top of L from a finished leaf task. */
void mf_lua_leaf_result(lua_State *L, mf_lua_node_t *node, mf_task_t *task);
/* Creates the "moonflow.headers" metatable (case-insensitive lookup). */
void mf_lua_headers_init(lua_State *L);

/* go tasks (mf_lua_go.c): a registered C function on the compute pool. */
void mf_lua_go_check(lua_State *L, int idx);
mf_task_t *mf_lua_go_create(lua_State *L, int idx, mf_loop_t *loop,
                            mf_task_cb cb, void *user);
/* Pushes the function's result string (nil when it returned none). */
void mf_lua_go_push_value(lua_State *L, mf_task_t *task);

/* redis tasks (mf_lua_redis.c): {client =, cmds = {{...}, ...}, list =}. */
#define MF_LUA_REDIS_LIST 1u   /* a list of commands: result.values */
#define MF_LUA_REDIS_STATUS 2u /* status replies as {ok = "OK"} */
void mf_lua_redis_leaf_check(lua_State *L, int idx);
mf_task_t *mf_lua_redis_leaf_create(lua_State *L, int idx, mf_task_cb cb,
                                    void *user);
unsigned mf_lua_redis_leaf_flags(lua_State *L, int idx);
/* Sets result.value (one command) or result.values (a list). */
void mf_lua_redis_leaf_result(lua_State *L, mf_task_t *task, unsigned flags);

#endif /* MF_LUA_FLOW_H */
