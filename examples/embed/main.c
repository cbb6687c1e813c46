/*
 * examples/embed — moonflow embedded in a C program: a loop with a compute
 * pool of two threads, a Lua host, C functions of our own for mf.go (on
 * the pool: "reverse", and "sort" and "matmul", which examples/sort and
 * examples/matrix_multiply call) and a task kind of our own
 * that Lua composes like any other ("add": {a =, b =, ms =} completes
 * after ms on the loop, result.sum).
 *
 *   embed [SCRIPT.lua [ARGS...]]
 *
 * Runs SCRIPT's main chunk (or the script below) in a host coroutine, runs
 * the loop until nothing is left, prints the values the chunk returned, one
 * per line, and exits 0; 1 (with the traceback) if it raised.
 *
 * Builds against the installed library alone:
 *   cc main.c $(pkg-config --cflags --libs moonflow)
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_go.h>
#include <moonflow/lua_host.h>
#include <moonflow/lua_kind.h>
#include <moonflow/moonflow.h>

static const char default_script[] =
    "local mf = require 'moonflow'\n"
    "local rev = mf.go('reverse', 'moonflow')\n"
    "local one = mf.task.add{ a = 2, b = 40 }:wait()\n"
    "local both = mf.parallel{\n"
    "    mf.task.add{ a = 1, b = 2, ms = 20 },\n"
    "    mf.series{ mf.task.add{ a = 3, b = 4 }, mf.task.timer(1) },\n"
    "}:wait()\n"
    "local late = mf.task.add{ a = 0, b = 0, ms = 5000, timeout = 10 }:wait()\n"
    "return 'reverse: ' .. rev, 'add: ' .. one.sum,\n"
    "    ('parallel: %d %d'):format(both[1].sum, both[2][1].sum),\n"
    "    'timeout: ' .. late.state\n";

/* ---- mf.go("reverse", s): runs on a pool thread, touches no Lua ------- */

static int reverse(const mf_lua_go_args_t *args, char **out, size_t *out_len)
{
    if (args->n != 1)
        return MF_EINVAL;
    size_t n = args->len[0];
    *out = mf_xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = args->v[0][n - 1 - i];
    (*out)[n] = '\0';
    *out_len = n;
    return 0;
}

/* ---- mf.go("sort", "5 -3 12 ...") and mf.go("matmul", A, B) ---------
 * The integers ascending, one space between them; A x B, a matrix written
 * row by row, rows separated by ';', numbers by spaces ("1 2; 3 4"). Text
 * that is not that (a word that is not a number, rows of different
 * lengths, A's columns not B's rows) is MF_EINVAL: mf.go answers nil,
 * "invalid argument". Each call owns what it allocates. */

/* A NUL-terminated copy of an argument, for strtoll/strtod. */
static char *arg_copy(const mf_lua_go_args_t *args, size_t i)
{
    char *s = mf_xmalloc(args->len[i] + 1);
    memcpy(s, args->v[i], args->len[i]);
    s[args->len[i]] = '\0';
    return s;
}

static int compare_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The integers of text (at most len / 2 + 1 of them): their count, or -1
 * for a word that is not one. */
static long parse_integers(char *text, size_t len, int64_t *v)
{
    long n = 0;
    char *p = text, *end = text + len;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t'))
            p++;
        if (p == end)
            return n;
        char *next;
        errno = 0;
        long long x = strtoll(p, &next, 10);
        if (next == p || errno == ERANGE ||
            (next < end && *next != ' ' && *next != '\n' && *next != '\t'))
            return -1;
        v[n++] = x;
        p = next;
    }
}

static int compute_sort(const mf_lua_go_args_t *args, char **out,
                        size_t *out_len)
{
    if (args->n != 1)
        return MF_EINVAL;
    char *text = arg_copy(args, 0);
    int64_t *v = mf_xmalloc((args->len[0] / 2 + 1) * sizeof *v);
    long n = parse_integers(text, args->len[0], v);
    mf_free(text);
    if (n < 0) {
        mf_free(v);
        return MF_EINVAL;
    }
    qsort(v, (size_t)n, sizeof *v, compare_int64);
    char *buf = mf_xmalloc((size_t)n * 21 + 1); /* "-9223372036854775808 " */
    size_t used = 0;
    for (long i = 0; i < n; i++)
        used += (size_t)sprintf(buf + used, i ? " %" PRId64 : "%" PRId64, v[i]);
    buf[used] = '\0';
    mf_free(v);
    *out = buf;
    *out_len = used;
    return 0;
}

/* A matrix: rows x cols numbers, row by row. */
typedef struct matrix {
    size_t rows, cols;
    double *v;
} matrix_t;

/* Reads "1 2; 3 4" into m; -1 for a word that is not a number or rows of
 * different lengths. */
static int parse_matrix(char *text, matrix_t *m)
{
    size_t cap = 16, n = 0;
    m->v = mf_xmalloc(cap * sizeof *m->v);
    m->rows = m->cols = 0;
    for (char *row = text; row; m->rows++) {
        char *semi = strchr(row, ';');
        if (semi)
            *semi = '\0';
        size_t cols = 0;
        char *p = row, *next;
        for (double x = strtod(p, &next); next != p; x = strtod(p, &next)) {
            if (n == cap)
                m->v = mf_xrealloc(m->v, (cap *= 2) * sizeof *m->v);
            m->v[n++] = x;
            cols++;
            p = next;
        }
        p += strspn(p, " \t\n");
        if (*p != '\0' || cols == 0 || (m->rows && cols != m->cols))
            return -1;
        m->cols = cols;
        row = semi ? semi + 1 : NULL;
    }
    return 0;
}

static int read_matrix(const mf_lua_go_args_t *args, size_t i, matrix_t *m)
{
    char *text = arg_copy(args, i);
    int rc = parse_matrix(text, m);
    mf_free(text);
    return rc;
}

/* a x b, written as the arguments are. */
static char *format_product(const matrix_t *a, const matrix_t *b, size_t *len)
{
    size_t cap = a->rows * b->cols * 26 + 1, used = 0;
    char *buf = mf_xmalloc(cap);
    for (size_t i = 0; i < a->rows; i++) {
        for (size_t j = 0; j < b->cols; j++) {
            double sum = 0;
            for (size_t k = 0; k < a->cols; k++)
                sum += a->v[i * a->cols + k] * b->v[k * b->cols + j];
            used += (size_t)snprintf(buf + used, cap - used, "%s%.17g",
                                     j ? " " : (i ? "; " : ""), sum);
        }
    }
    *len = used;
    return buf;
}

static int compute_matmul(const mf_lua_go_args_t *args, char **out,
                          size_t *out_len)
{
    if (args->n != 2)
        return MF_EINVAL;
    matrix_t a = {0}, b = {0};
    int rc = read_matrix(args, 0, &a) < 0 || read_matrix(args, 1, &b) < 0 ||
                     a.cols != b.rows
                 ? MF_EINVAL
                 : 0;
    if (rc == 0)
        *out = format_product(&a, &b, out_len);
    mf_free(a.v);
    mf_free(b.v);
    return rc;
}

/* ---- the "add" task: a C task kind of our own (mf_task_ops_t) -------- */

typedef struct add_task {
    mf_task_t base;
    mf_timer_t timer;
    double a, b, sum;
    uint64_t ms;
} add_task_t;

static void add_fired(mf_timer_t *timer)
{
    add_task_t *t = timer->data;
    t->sum = t->a + t->b;
    mf_task_complete(&t->base, MF_STATE_SUCCESS, 0);
}

static void add_dispatch(mf_task_t *task)
{
    add_task_t *t = (add_task_t *)task;
    mf_timer_start(mf_task_loop(task), &t->timer, t->ms);
}

/* A timeout or a cancel: stop the timer, complete once. */
static void add_cancel(mf_task_t *task)
{
    add_task_t *t = (add_task_t *)task;
    mf_timer_stop(mf_task_loop(task), &t->timer);
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void add_destroy(mf_task_t *task)
{
    add_task_t *t = (add_task_t *)task;
    mf_timer_stop(mf_task_loop(task), &t->timer);
    mf_loop_free(mf_task_loop(task), t, sizeof(*t));
}

static const mf_task_ops_t add_ops = {"add", add_dispatch, add_cancel,
                                      add_destroy};

/* ---- ... and its Lua side: {kind = "add", a =, b =, ms =} ------------ */

static void add_check(lua_State *L, int idx)
{
    static const char *const numbers[] = {"a", "b", "ms"};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        lua_getfield(L, idx, numbers[i]);
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "add task: %s must be a number", numbers[i]);
        lua_pop(L, 1);
    }
}

static double number_field(lua_State *L, int idx, const char *name)
{
    lua_getfield(L, idx, name);
    double v = lua_tonumber(L, -1); /* 0 when absent */
    lua_pop(L, 1);
    return v;
}

static mf_task_t *add_create(lua_State *L, int idx, void *data, mf_loop_t *loop,
                             mf_task_cb cb, void *user)
{
    (void)data; /* no per-task data: the task keeps what it needs */
    add_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    mf_task_init(&t->base, &add_ops, loop, cb, user);
    mf_timer_init(&t->timer, add_fired, t);
    t->a = number_field(L, idx, "a");
    t->b = number_field(L, idx, "b");
    t->sum = 0;
    t->ms = (uint64_t)number_field(L, idx, "ms");
    return &t->base;
}

static void add_result(lua_State *L, mf_task_t *task, void *data)
{
    (void)data;
    lua_pushnumber(L, ((add_task_t *)task)->sum);
    lua_setfield(L, -2, "sum");
}

static const mf_lua_kind_t add_kind = {
    .name = "add",
    .check = add_check,
    .create = add_create,
    .result = add_result,
};

/* ---- running a script --------------------------------------------------- */

/* The chunk's end: print what it returned, or why it failed. */
static void script_ended(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                         void *data)
{
    int *status = data;
    (void)co;
    if (ex->status != MF_LUA_CO_DONE) {
        fprintf(stderr, "embed: %s\n", ex->message);
        *status = 1;
        return;
    }
    int top = lua_gettop(ex->L);
    for (int i = top - ex->nret + 1; i <= top; i++) {
        const char *s = lua_tostring(ex->L, i);
        printf("%s\n", s ? s : luaL_typename(ex->L, i));
    }
    *status = 0;
}

/* Pushes the chunk (SCRIPT or the default) and its arguments; returns
 * their count, or -1 with the message printed. */
static int push_script(lua_State *L, int argc, char **argv)
{
    int rc = argc > 1 ? luaL_loadfile(L, argv[1])
                      : luaL_loadbuffer(L, default_script,
                                        sizeof default_script - 1, "=embed");
    if (rc != 0) {
        fprintf(stderr, "embed: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    for (int i = 2; i < argc; i++)
        lua_pushstring(L, argv[i]);
    return argc > 2 ? argc - 2 : 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a peer gone: a write's error, not our end */
    if (mf_lua_go_register("reverse", reverse) != 0 ||
        mf_lua_go_register("sort", compute_sort) != 0 ||
        mf_lua_go_register("matmul", compute_matmul) != 0)
        return 1;
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(2);
    mf_loop_set_pool(loop, pool);
    mf_lua_host_t *host = mf_lua_host_create(loop, NULL);
    if (!host || mf_lua_kind_register(host, &add_kind) != 0)
        return 1;
    int status = 1;
    int nargs = push_script(mf_lua_host_state(host), argc, argv);
    if (nargs >= 0)
        mf_lua_host_spawn(host, nargs, script_ended, &status);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* until nothing is left */
    mf_lua_host_destroy(host);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* tasks canceled by the shutdown */
    mf_pool_destroy(pool);
    mf_loop_destroy(loop);
    return status;
}
