/*
 * lua/bench/bench_scenario.h — the scenario mode's Lua helpers
 * (bench_scenario_lua.c), used by bench_scenario.c: reading a flow's
 * description to name its steps, reading its results for failures, and
 * telling what a script defines without running it.
 */
#ifndef MF_BENCH_SCENARIO_H
#define MF_BENCH_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include <moonflow/lua_kind.h>

/* Pushes t[key] of the table at idx, or nil when idx is not a table. */
void bench_scen_field(lua_State *L, int idx, const char *key);
/* Pushes the short detail of the task description at d, as its kind
 * describes it (lua_kind.h: the Redis command, the HTTP method, the MySQL
 * statement, the Kafka topic), or nil (no kind, no describe, no string). */
void bench_scen_push_detail(lua_State *L, int d, const mf_lua_kind_t *kind);
/* "2 redis GET" into name: the index, the kind's name, the detail as the
 * kind labels it (lua_kind.h; as is without a label). kind may be NULL. */
void bench_scen_step_name(char *name, size_t len, unsigned index,
                          const char *kind_name, const mf_lua_kind_t *kind,
                          const char *detail);
/* Whether the result at idx (a task's table, or an array of them for a
 * series or parallel) holds no failed task: state "success", no Redis
 * error reply ({err = }) in value or values, no HTTP status >= 400.
 * *timeout is set when a task timed out. */
bool bench_scen_result_ok(lua_State *L, int idx, int depth, bool *timeout);
/* Why the result at idx failed (its first failed task), in buf; "" when
 * nothing failed. */
void bench_scen_result_why(lua_State *L, int idx, int depth, char *buf,
                           size_t n);
/* Whether the script at path defines the global function name: `function
 * name(` or `name = function`, outside comments. */
bool bench_scen_script_defines(const char *path, const char *name);

#endif /* MF_BENCH_SCENARIO_H */
