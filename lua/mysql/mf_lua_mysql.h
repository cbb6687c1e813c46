/*
 * lua/mysql/mf_lua_mysql.h — internals of the MySQL binding shared by
 * mf_lua_mysql.c (client objects, db:query, db:quote, values, parameters,
 * results and errors), mf_lua_mysql_rows.c (db:rows, streaming),
 * mf_lua_mysql_pin.c (db:transaction and db:session: a pinned connection
 * and the coroutine running the caller's function) and
 * mf_lua_task_mysql.c (the "mysql" task kind).
 *
 * Owns nothing itself. A client object ("moonflow.mysql" userdata) points
 * to the loop's mf_mysql_client_t, which belongs to the loop and outlives
 * the host. A pinned object ("moonflow.mysql.pinned", the tx or s given to
 * the caller's function) points to its pin record until the function
 * returns; then it is dead and its methods raise.
 */
#ifndef MF_LUA_MYSQL_H
#define MF_LUA_MYSQL_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include <moonflow/mysql.h>

#define MF_LUA_MYSQL "moonflow.mysql"
#define MF_LUA_MYSQL_PINNED "moonflow.mysql.pinned"
#define MF_LUA_MYSQL_ROWS "moonflow.mysql.rows"

/* How rows reach Lua (option rows). */
typedef enum mf_lua_mysql_mode {
    MF_LUA_MYSQL_BY_NAME = 1, /* {col = v} */
    MF_LUA_MYSQL_BY_INDEX = 2 /* {v1, v2} */
} mf_lua_mysql_mode_t;        /* "both": the two bits */

/* The Lua client object. */
typedef struct mf_lua_mysql {
    mf_mysql_client_t *client;
    unsigned mode; /* mf_lua_mysql_mode_t bits */
} mf_lua_mysql_t;

typedef struct mf_lua_mysql_pin mf_lua_mysql_pin_t;
typedef struct mf_lua_mysql_stream mf_lua_mysql_stream_t;

/* The Lua object of a pinned connection (tx, s). */
typedef struct mf_lua_mysql_pinned {
    mf_lua_mysql_pin_t *pin; /* NULL once the function returned */
    mf_mysql_client_t *client;
    unsigned mode;
    bool transaction;
} mf_lua_mysql_pinned_t;

/* Where a query runs: the client's pool, or a pinned connection. */
typedef struct mf_lua_mysql_target {
    mf_mysql_client_t *client;
    mf_lua_mysql_pin_t *pin; /* NULL: any pooled connection */
    unsigned mode;
} mf_lua_mysql_target_t;

/* The object at idx (a client or a live pinned object) as a target; raises
 * on anything else and on a pinned object whose function has returned. */
mf_lua_mysql_target_t mf_lua_mysql_target(lua_State *L, int idx);
/* "name", "array" or "both" at idx → mode bits; raises naming what. */
unsigned mf_lua_mysql_check_mode(lua_State *L, int idx, const char *what);

/* ---- parameters --------------------------------------------------------- */

/* The values at first..last as parameters (strings are pointed to: the
 * stack keeps them alive until the task copied them). Up to 16 inline,
 * more in a userdata pushed on the stack (a raise leaves it to the GC).
 * Raises on a value of another type. Always mf_lua_mysql_params_close,
 * with nothing pushed above since. */
#define MF_LUA_MYSQL_INLINE_PARAMS 16
typedef struct mf_lua_mysql_params {
    size_t n;
    mf_mysql_param_t *v;
    mf_mysql_param_t inline_v[MF_LUA_MYSQL_INLINE_PARAMS];
} mf_lua_mysql_params_t;

void mf_lua_mysql_params_from_stack(lua_State *L, mf_lua_mysql_params_t *p,
                                    int first, int last);
/* The same from t[1..n] of the table at idx. */
void mf_lua_mysql_params_from_table(lua_State *L, mf_lua_mysql_params_t *p,
                                    int idx, size_t n);
void mf_lua_mysql_params_close(lua_State *L, mf_lua_mysql_params_t *p);

/* A task for target running sql (a string at that index) with the
 * parameters p (none: the text protocol), created, not started; on a pin,
 * set to run on its session. Raises on empty SQL. */
mf_task_t *mf_lua_mysql_task(lua_State *L, const mf_lua_mysql_target_t *t,
                             int sql, const mf_lua_mysql_params_t *p,
                             mf_task_cb cb, void *user);

/* ---- values and results ------------------------------------------------- */

void mf_lua_mysql_push_value(lua_State *L, const mf_mysql_value_t *v);
/* Pushes an array of the field names of r (the keys of rows by name). */
void mf_lua_mysql_push_names(lua_State *L, const mf_mysql_result_t *r);
/* Pushes row i of r as a table; names is the index of r's names table
 * (0: none, the names are pushed from r's fields; unused in
 * MF_LUA_MYSQL_BY_INDEX mode). */
void mf_lua_mysql_push_row(lua_State *L, const mf_mysql_result_t *r, size_t i,
                           unsigned mode, int names);
/* Fills the table at idx with the task's results: rows (also at [i]),
 * fields, affected_rows, insert_id, warnings, server_status, and sets
 * when there is more than one. */
void mf_lua_mysql_fill(lua_State *L, int idx, const mf_task_t *task,
                       unsigned mode);

/* ---- errors ------------------------------------------------------------- */

/* The words of a failed task: "mysql CODE SQLSTATE: message" when the
 * server or the connector explained (a timeout excepted: it is ours), else
 * "STATE: error" ("timeout: timed out"). NULL for a success. Written to
 * buf. */
#define MF_LUA_MYSQL_ERR_MAX 640
const char *mf_lua_mysql_error(const mf_task_t *task, char *buf, size_t len);
/* Only the server's or connector's explanation, or NULL. */
const char *mf_lua_mysql_explanation(const mf_task_t *task, char *buf,
                                     size_t len);

/* ---- pins (mf_lua_mysql_pin.c) ------------------------------------------ */

/* The pin's session (NULL once closed). */
mf_mysql_session_t *mf_lua_mysql_pin_session(const mf_lua_mysql_pin_t *pin);
/* A task is about to run on the pin: a stream the caller left open there
 * (broken out of) is discarded first, so the new task is not stuck behind
 * it. */
void mf_lua_mysql_pin_before_task(mf_lua_mysql_pin_t *pin);
/* A task or a stream in flight on the pin keeps its record alive (the
 * function may have returned meanwhile): hold when it starts, release in
 * its callback. */
void mf_lua_mysql_pin_hold(mf_lua_mysql_pin_t *pin);
void mf_lua_mysql_pin_release(mf_lua_mysql_pin_t *pin);
/* The pin's open stream: s started there (open) or ended (not open; a
 * later stream may have taken its place: then nothing changes). */
void mf_lua_mysql_pin_set_stream(mf_lua_mysql_pin_t *pin,
                                 mf_lua_mysql_stream_t *s, bool open);
/* A task on the pin failed with these words: kept as the reason a COMMIT
 * is refused once the connection broke. */
void mf_lua_mysql_pin_failed(mf_lua_mysql_pin_t *pin, const char *why);
int mf_lua_mysql_transaction(lua_State *L);
int mf_lua_mysql_session(lua_State *L);
void mf_lua_mysql_pin_init(lua_State *L);

/* ---- streams (mf_lua_mysql_rows.c) -------------------------------------- */

int mf_lua_mysql_rows(lua_State *L);
int mf_lua_mysql_rows_next(lua_State *L);
/* Nobody will read the rest of the stream: drain it (its connection stays
 * usable: a session goes on) or cancel it (its connection is closed). */
void mf_lua_mysql_stream_discard(mf_lua_mysql_stream_t *s, bool drain);
void mf_lua_mysql_rows_init(lua_State *L);

/* moonflow.mysql: client, rows ... (mf_lua_mysql.c). */
int mf_lua_open_mysql(lua_State *L);

#endif /* MF_LUA_MYSQL_H */
