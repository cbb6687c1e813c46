/*
 * lua/main/main.c — the moonflow binary: `moonflow run FILE.lua`, `moonflow
 * test [DIR]`, `moonflow serve` (lua/serve/serve.c), `moonflow bench`,
 * `moonflow trace FILE` (moonflow/trace.lua), `moonflow kafka-mock`
 * (lua/kafka_mock), `moonflow help [COMMAND]` and `moonflow --version`.
 *
 * Owns the process: one loop, a small compute pool for mf.go, one Lua host.
 * The script's main chunk (or busted's runner) runs in a host coroutine; the
 * loop runs until nothing is left (timers, flows); then the host is closed,
 * the loop drained, and the exit code decided here only.
 */
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include <moonflow/moonflow.h>

#include <moonflow/lua_host.h>
#include <moonflow/lua_shared.h>
#include "bench/bench_main.h"
#include "kafka_mock/kafka_mock_main.h"
#include "serve/serve_main.h"

static const char usage_main[] =
    "usage: moonflow COMMAND [ARGS]\n"
    "\n"
    "  run FILE.lua [ARGS...]   run a Lua workflow script once\n"
    "  test [DIR] [BUSTED...]   run the busted specs (*_spec.lua) in DIR\n"
    "  serve [DIR] [OPTIONS]    serve the Lua handlers in DIR over HTTP\n"
    "  bench [OPTIONS] URL...   load-test URLs (wrk's flags and scripts)\n"
    "  trace FILE [ID...]       draw serve's request traces as waterfalls\n"
    "  kafka-mock [OPTIONS]     a local mock Kafka cluster to try clients on\n"
    "  help [COMMAND]           show this help, or a command's\n"
    "\n"
    "moonflow COMMAND --help shows a command's help too;\n"
    "moonflow --version prints the version.\n";

static const char usage_run[] =
    "usage: moonflow run FILE.lua [ARGS...]\n"
    "\n"
    "Runs FILE's main chunk in a coroutine on an event loop, so it may call\n"
    "mf.sleep, mf.http.*, mf.go and wait on flows. ARGS are in the global\n"
    "`arg` (arg[0] is FILE) and in `...`; modules beside FILE can be\n"
    "required. Exits when the chunk and its timers are done, with the status\n"
    "the chunk returned (`return 2`: an integer 0 to 255, another number\n"
    "gives 1; none: 0), or 1 with a traceback if a coroutine raised.\n";

static const char usage_test[] =
    "usage: moonflow test [DIR] [BUSTED OPTIONS...]\n"
    "\n"
    "Runs the busted specs (*_spec.lua) under DIR (default: spec; or one\n"
    "spec file) inside the host, so specs may wait on moonflow calls and\n"
    "require modules in DIR. Options after DIR go to busted (e.g.\n"
    "--filter=PATTERN, -o TAP).\n"
    "The last line reads \"N passed, N failed\" (on stderr when -o names an\n"
    "output handler); the exit code is 1 if any failed.\n";

typedef struct run {
    mf_loop_t *loop;
    mf_pool_t *pool;
    mf_lua_host_t *host;
    bool test;      /* moonflow test: the main returns the failure count */
    bool looping;   /* inside mf_loop_run */
    int failed;     /* the main coroutine raised or was aborted */
    int status;     /* moonflow run: the number the main chunk returned */
    int test_fails; /* moonflow test: failures + errors */
} host_run_t;

static int wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
    return 0;
}

static int run_open(host_run_t *r)
{
    signal(SIGPIPE, SIG_IGN);
    r->loop = mf_loop_create();
    r->pool = r->loop ? mf_pool_create(2) : NULL;
    if (!r->pool)
        return -1;
    mf_loop_set_pool(r->loop, r->pool);
    r->host = mf_lua_host_create(r->loop, NULL); /* system module paths */
    return r->host ? 0 : -1;
}

/* Closes the host, lets canceled tasks finish, frees everything. */
static void run_close(host_run_t *r)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(r->host, &c);
    if (c.errors && !r->test)
        r->failed = 1; /* a background coroutine raised (logged) */
    mf_lua_host_destroy(r->host);
    mf_loop_run(r->loop, MF_RUN_DEFAULT);
    mf_pool_destroy(r->pool);
    mf_loop_destroy(r->loop);
    mf_lua_shared_destroy_all(); /* mf.shared_dict's, once no host is left */
}

static void run_loop(host_run_t *r)
{
    if (r->failed)
        return;
    r->looping = true;
    mf_loop_run(r->loop, MF_RUN_DEFAULT);
    r->looping = false;
}

/* A script's returned number as a process status: a usage error can end
 * with `return 2` after the host's cleanup, where os.exit would skip it. */
static int exit_status(lua_Number n)
{
    return n >= 0 && n <= 255 && n == (int)n ? (int)n : 1;
}

static void on_main_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                         void *data)
{
    host_run_t *r = data;
    (void)co;
    if (ex->status == MF_LUA_CO_DONE) {
        if (r->test && ex->nret >= 1 && lua_isnumber(ex->L, -1))
            r->test_fails = (int)lua_tointeger(ex->L, -1);
        else if (!r->test && ex->nret >= 1 &&
                 lua_type(ex->L, -ex->nret) == LUA_TNUMBER)
            r->status = exit_status(lua_tonumber(ex->L, -ex->nret));
        return;
    }
    fprintf(stderr, "moonflow: %s\n", ex->message);
    r->failed = 1;
    if (r->looping) /* the rest (timers, flows) is aborted at close */
        mf_loop_stop(r->loop);
}

/* package.path = DIR/?.lua;DIR/?/init.lua;... (dirlen bytes of dir). */
static void add_module_dir(lua_State *L, const char *dir, size_t dirlen)
{
    lua_getglobal(L, "package");
    lua_pushlstring(L, dir, dirlen);
    const char *d = lua_tostring(L, -1);
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", d, d);
    lua_getfield(L, -3, "path");
    lua_concat(L, 2);
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

/* Modules beside the script are found wherever it is run from. */
static void add_script_dir(lua_State *L, const char *script)
{
    const char *slash = strrchr(script, '/');
    add_module_dir(L, slash ? script : ".",
                   slash ? (size_t)(slash - script) : 1);
}

/* The specs' folder (a spec file's own, when one is given) is on the
 * module path, as a script's is for `run`: by its absolute path, which
 * busted's --directory cannot change. */
static void add_spec_dir(lua_State *L, const char *dir)
{
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(dir, abs)) {
        add_module_dir(L, dir, strlen(dir));
        return;
    }
    char *slash = strrchr(abs, '/');
    if (stat(abs, &st) == 0 && !S_ISDIR(st.st_mode) && slash)
        *slash = '\0'; /* a spec file: its folder */
    add_module_dir(L, abs, strlen(abs));
}

/* The global `arg`: arg[0] = argv[0], arg[i] = argv[i]; pushes argv[1..]. */
static int push_args(lua_State *L, int argc, char **argv)
{
    lua_createtable(L, argc, 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");
    luaL_checkstack(L, argc, "too many arguments");
    for (int i = 1; i < argc; i++)
        lua_pushstring(L, argv[i]);
    return argc - 1;
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 1 || wants_help(1, argv)) {
        fputs(usage_run, argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    host_run_t r = {0};
    if (run_open(&r) < 0) {
        fprintf(stderr, "moonflow: cannot start the loop or Lua\n");
        return 1;
    }
    lua_State *L = mf_lua_host_state(r.host);
    if (mf_lua_load_file(L, argv[0]) != 0) {
        fprintf(stderr, "moonflow: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        r.failed = 1;
    } else {
        add_script_dir(L, argv[0]);
        int nargs = push_args(L, argc, argv);
        mf_lua_host_spawn(r.host, nargs, on_main_exit, &r);
        run_loop(&r);
    }
    run_close(&r);
    return r.failed ? 1 : r.status;
}

/* Opens the run and pushes require(module)[field] (the module itself when
 * field is NULL): an embedded command's main. -1: no loop or Lua. */
static int run_open_module(host_run_t *r, const char *module, const char *field)
{
    if (run_open(r) < 0) {
        fprintf(stderr, "moonflow: cannot start the loop or Lua\n");
        return -1;
    }
    lua_State *L = mf_lua_host_state(r->host);
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    if (field) {
        lua_getfield(L, -1, field);
        lua_remove(L, -2);
    }
    return 0;
}

/* Runs the main below its argument table (on top) to its end. */
static void run_module_main(host_run_t *r)
{
    mf_lua_host_spawn(r->host, 1, on_main_exit, r);
    run_loop(r);
    run_close(r);
}

static int cmd_test(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs(usage_test, stdout);
        return 0;
    }
    host_run_t r = {.test = true};
    if (run_open_module(&r, "moonflow.test", NULL) < 0)
        return 1;
    lua_State *L = mf_lua_host_state(r.host);
    lua_createtable(L, argc + 1, 0);
    int first_is_dir = argc > 0 && argv[0][0] != '-';
    const char *dir = first_is_dir ? argv[0] : "spec";
    add_spec_dir(L, dir);
    lua_pushstring(L, dir);
    lua_rawseti(L, -2, 1);
    for (int i = first_is_dir; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    }
    run_module_main(&r);
    return r.failed || r.test_fails ? 1 : 0;
}

static const char usage_trace[] =
    "usage: moonflow trace FILE [REQUEST_ID...]\n"
    "\n"
    "Draws the request traces `moonflow serve` wrote to FILE (its config's\n"
    "trace.file: one OTLP JSON object a line) as text waterfalls: each task\n"
    "under its parent, with its start, its duration, its state and a bar.\n"
    "REQUEST_IDs (or trace ids) pick traces; none: every one. Exit status 1\n"
    "when FILE cannot be read, a line is no trace or an ID has no trace in\n"
    "FILE (named on stderr).\n";

/* moonflow trace: moonflow/trace.lua's main in the host. */
static int cmd_trace(int argc, char **argv)
{
    if (argc < 1 || wants_help(argc, argv)) {
        fputs(usage_trace, argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    host_run_t r = {.test = true}; /* the main's number is the status */
    if (run_open_module(&r, "moonflow.trace", "main") < 0)
        return 1;
    lua_State *L = mf_lua_host_state(r.host);
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    run_module_main(&r);
    return r.failed ? 1 : r.test_fails;
}

static int cmd_serve(int argc, char **argv)
{
    return mf_serve_main(argc, argv);
}

static int cmd_bench(int argc, char **argv)
{
    return mf_bench_main(argc, argv);
}

static int cmd_kafka_mock(int argc, char **argv)
{
    return mf_kafka_mock_main(argc, argv);
}

/* The commands; each takes the arguments after its name. */
typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} command_t;

static const command_t commands[] = {
    {"run", cmd_run},     {"test", cmd_test},   {"serve", cmd_serve},
    {"bench", cmd_bench}, {"trace", cmd_trace}, {"kafka-mock", cmd_kafka_mock}};

static const command_t *find_command(const char *name)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(commands); i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static int unknown_command(const char *name)
{
    fprintf(stderr, "moonflow: unknown %s '%s'\n\n%s",
            name[0] == '-' ? "option" : "command", name, usage_main);
    return 2;
}

/* moonflow help [COMMAND]: the same as --help and COMMAND --help. */
static int cmd_help(int argc, char **argv)
{
    if (argc < 1) {
        fputs(usage_main, stdout);
        return 0;
    }
    const command_t *cmd = find_command(argv[0]);
    if (!cmd)
        return unknown_command(argv[0]);
    char help[] = "--help";
    char *args[] = {help, NULL};
    return cmd->run(1, args);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h"))
        return cmd_help(0, NULL);
    if (!strcmp(name, "--version")) {
        printf("moonflow %s\n", MOONFLOW_VERSION);
        return 0;
    }
    if (!strcmp(name, "help"))
        return cmd_help(argc - 2, argv + 2);
    const command_t *cmd = find_command(name);
    return cmd ? cmd->run(argc - 2, argv + 2) : unknown_command(name);
}
