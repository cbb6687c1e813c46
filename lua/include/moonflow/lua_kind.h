/*
 * moonflow/lua_kind.h — task kinds for Lua: a C task that Lua describes
 * with a plain table {kind = "name", fields...}, composes into flows
 * (mf.series, mf.parallel) and waits on (step:wait()), as core task kinds
 * plug into the engine through mf_task_ops_t.
 *
 * A kind is a small table of functions registered on a host:
 *
 *   static const mf_lua_kind_t add_kind = {
 *       .name = "add", .check = add_check, .create = add_create,
 *       .result = add_result};
 *   mf_lua_kind_register(host, &add_kind);
 *   -- in Lua:
 *   local r = mf.task.add{a = 1, b = 2}:wait()   -- r.state, r.sum
 *
 * - check(L, idx): raise (luaL_error) on a malformed description at idx.
 *   Runs before anything of a flow is built, so a bad step costs nothing.
 *   The host checks the fields every kind shares first: timeout (a number
 *   of ms: the task's timeout) and callback (a function, for flows).
 * - create(L, idx, data, loop, cb, user): the C task of a checked
 *   description, created (not started) on loop with cb and user passed on
 *   to mf_task_init or the task's factory. Copy from the description what
 *   the task needs: the table is not kept.
 * - result(L, task, data) (may be NULL): the task succeeded; add the kind's
 *   fields to the result table on top of L (state and error are set
 *   already). Runs in the task's callback, on the loop.
 * - error_detail(task, data) (may be NULL): the task failed; a detail the
 *   result's error string gets after its stable words, as
 *   "permission denied: WRONGPASS ..." (the redis kind gives Redis's own
 *   refusal), or NULL for none. The string must live until the callback
 *   returns.
 * - error(task, data, buf, len) (may be NULL): the task failed; the whole
 *   error string, written to buf (len bytes) and returned, in place of the
 *   stable words and error_detail: for a kind whose errors have a form of
 *   their own ("kafka _MSG_TIMED_OUT: ..."). NULL: the default form.
 * - answer_failed(task, data) (may be NULL: never): the task succeeded;
 *   whether its answer reports a failure of what was asked (a Redis error
 *   reply, an HTTP status >= 400). A waiter with lean results
 *   (mf_lua_co_hooks_t's lean) gets the whole result of such a task,
 *   true for any other that succeeded.
 * - describe(L, idx) (may be NULL: nothing to tell): for reports (moonflow
 *   bench names a scenario's steps by it): pushes exactly one value, a
 *   short string telling a task of this kind apart from the others of its
 *   kind (the Redis command, the HTTP method, the SQL statement, the Kafka
 *   topic), or nil. It reads the description at idx as given (unchecked:
 *   raise nothing). Equal strings are the same step for a report.
 * - label(detail, buf, len) (may be NULL: the detail as it is): the words
 *   of describe's string that name the step in a report, written to buf
 *   (len bytes, NUL-terminated): mf_lua_kind_label_verb keeps the first
 *   word in capitals ("GET", "SELECT").
 * - data_size / release (optional): the kind's own data per task:
 *   data_size bytes, zeroed, suitably aligned, allocated by the host with
 *   the task's record and given to create and result. release(data) frees
 *   what create put there, after the task's callback has run (in a flow:
 *   when the whole flow ends).
 *
 * In Lua, mf.task.NAME{fields} builds a description of any registered kind
 * (timer, go and redis have constructors of their own). A result is a
 * table {state = "success" | "timeout" | ..., error = "..." (when it
 * failed), kind fields}.
 *
 * Ownership: the kind struct is the caller's and must outlive the host (a
 * static const). A created task belongs to the host, which starts it or
 * pushes it onto a flow's series. Threads: the loop's thread.
 */
#ifndef MOONFLOW_LUA_KIND_H
#define MOONFLOW_LUA_KIND_H

#include <stddef.h>

#include <moonflow/common.h>
#include <moonflow/lua_host.h>
#include <moonflow/task.h>

MF_EXTERN_C_BEGIN

typedef struct mf_lua_kind {
    const char *name; /* desc.kind; mf.task.<name> */
    size_t data_size; /* bytes of per-task data; 0: none */
    void (*check)(lua_State *L, int idx);
    mf_task_t *(*create)(lua_State *L, int idx, void *data, mf_loop_t *loop,
                         mf_task_cb cb, void *user);
    void (*result)(lua_State *L, mf_task_t *task, void *data);
    void (*release)(void *data);
    const char *(*error_detail)(const mf_task_t *task, void *data);
    const char *(*error)(const mf_task_t *task, void *data, char *buf,
                         size_t len);
    bool (*answer_failed)(const mf_task_t *task, void *data);
    void (*describe)(lua_State *L, int idx);
    void (*label)(const char *detail, char *buf, size_t len);
} mf_lua_kind_t;

/* Makes kind usable by the host's Lua code. Returns 0, MF_EEXIST for a
 * name taken (the built-in kinds, "series" and "parallel" included), or
 * MF_EINVAL for a kind without name, check or create. */
MF_API int mf_lua_kind_register(mf_lua_host_t *host, const mf_lua_kind_t *kind);
/* The kind registered under name on the host of L (any of its threads), or
 * NULL ("series", "parallel" and "graph" are structures, not kinds). */
MF_API const mf_lua_kind_t *mf_lua_kind_find(lua_State *L, const char *name);
/* A label (the kinds' label): the first word of detail (up to a space), in
 * capitals, into buf (len bytes, NUL-terminated): "SELECT" for "select id
 * FROM t", "GET" for "get". */
MF_API void mf_lua_kind_label_verb(const char *detail, char *buf, size_t len);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_KIND_H */
