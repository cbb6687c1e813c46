/*
 * lua/redis/mf_lua_redis.h — internals of the Redis binding shared by
 * mf_lua_redis.c (clients, r:call, r:pipeline, conversions),
 * mf_lua_redis_sub.c (r:subscribe and the subscriber object) and
 * mf_lua_task_redis.c (the "redis" task kind).
 *
 * Owns nothing itself. A client object ("moonflow.redis" userdata) points
 * to the loop's mf_redis_client_t, which belongs to the loop and outlives
 * the host (the host is destroyed first: moonflow run and serve close it
 * before the loop, and a loop's extensions are destroyed Lua first).
 */
#ifndef MF_LUA_REDIS_H
#define MF_LUA_REDIS_H

#include <stddef.h>

#include <lua.h>

#include <moonflow/lua_co.h>
#include <moonflow/redis.h>

#define MF_LUA_REDIS "moonflow.redis"
#define MF_LUA_REDIS_SUB "moonflow.redis.sub"

/* How replies reach Lua. */
#define MF_LUA_REDIS_LIST 1u   /* a list of commands: all replies, a table */
#define MF_LUA_REDIS_STATUS 2u /* status replies as {ok = "OK"} */

/* The Lua client object. */
typedef struct mf_lua_redis {
    mf_redis_client_t *client;
    unsigned max_queued; /* subscribers: messages kept while nobody waits */
    unsigned flags;      /* MF_LUA_REDIS_STATUS (option status_table) */
} mf_lua_redis_t;

/* One command's argument vector, built from Lua values at a range of stack
 * slots or from a table. Strings are pointed to (the caller keeps them
 * alive until the vector is used); numbers are formatted into the vector.
 * Small vectors live inline (no malloc); bigger ones grow on the heap.
 * Always mf_lua_redis_argv_close it. */
#define MF_LUA_REDIS_INLINE_ARGS 16
typedef struct mf_lua_redis_chunk {
    struct mf_lua_redis_chunk *next;
    char data[4096];
} mf_lua_redis_chunk_t;

typedef struct mf_lua_redis_argv {
    int argc;
    int cap;
    const char **argv;
    size_t *lens;
    const char *argv_inline[MF_LUA_REDIS_INLINE_ARGS];
    size_t lens_inline[MF_LUA_REDIS_INLINE_ARGS];
    mf_lua_redis_chunk_t *chunks; /* number text past the inline buffer */
    char *numbuf;                 /* nums or the newest chunk's data */
    size_t numlen, numcap;
    char nums[MF_LUA_REDIS_INLINE_ARGS * 24];
} mf_lua_redis_argv_t;

void mf_lua_redis_argv_init(mf_lua_redis_argv_t *a);
void mf_lua_redis_argv_close(mf_lua_redis_argv_t *a);
/* Raises unless every value at first..last is a string or a number. */
void mf_lua_redis_check_args(lua_State *L, int first, int last,
                             const char *what);
/* Appends the (checked) value at idx. */
void mf_lua_redis_argv_push(lua_State *L, mf_lua_redis_argv_t *a, int idx);

/* Appends the command held by the array table at idx to task. */
void mf_lua_redis_add_table(lua_State *L, mf_task_t *task, int idx);
/* Raises unless the table at idx is a list of commands (non-empty arrays
 * of strings and numbers); what names the caller. Returns how many. */
int mf_lua_redis_check_cmds(lua_State *L, int idx, const char *what);
/* Pushes a reply as a Lua value (see mf_lua_redis.c). */
void mf_lua_redis_push_reply(lua_State *L, const mf_redis_reply_t *r,
                             unsigned flags);
/* Pushes the replies of a finished task as an array table. */
void mf_lua_redis_push_replies(lua_State *L, const mf_task_t *task,
                               unsigned flags);

/* Appends the command made of the (checked) values at first..last. */
void mf_lua_redis_add_range(lua_State *L, mf_task_t *task, int first, int last);
/* The callback of an r:call-like task (one reply; an error reply becomes
 * nil, message) for the client's reply flags. */
mf_task_cb mf_lua_redis_call_cb(unsigned flags);
/* Starts task with co parked on it (task->user); its callback resumes co.
 * Returns lua_yield's value. */
int mf_lua_redis_park(lua_State *L, mf_lua_co_t *co, mf_task_t *task);

/* The client object at idx; raises on anything else. */
mf_lua_redis_t *mf_lua_redis_check(lua_State *L, int idx);

/* The stable lowercase string of an error code that comes without a task
 * state (a subscriber's end). */
const char *mf_lua_redis_errstr(int error);

/* Subscriber methods and metatable (mf_lua_redis_sub.c). */
int mf_lua_redis_subscribe(lua_State *L);
int mf_lua_redis_psubscribe(lua_State *L);
int mf_lua_redis_ssubscribe(lua_State *L);
void mf_lua_redis_sub_init(lua_State *L);

/* Pushes r:session, the function (mf_lua_redis_session.c); makes the
 * session object's metatable. */
void mf_lua_redis_session_push(lua_State *L);

/* moonflow.redis: client, null (mf_lua_redis.c). */
int mf_lua_open_redis(lua_State *L);

#endif /* MF_LUA_REDIS_H */
