/*
 * mysql_harness.h — what the MySQL client's C tests share: a real mariadbd
 * in a temporary folder (mariadb-install-db, then mariadbd on a free
 * loopback port and its own unix socket; as root it runs as nobody on a
 * folder it owns; optionally with TLS from a self-signed certificate),
 * started once per test binary at the first setup() and stopped and
 * removed at exit, also after a failed assertion; SQL run as root with the
 * `mariadb` client (admin()); a client on the test's loop; tasks whose
 * results are rendered as text; loop runs bounded in time.
 *
 * The server has a database `test` and a user app / secret with all rights
 * on it (and PROCESS, to see its own connections in the process list).
 */
#ifndef MF_TEST_MYSQL_HARNESS_H
#define MF_TEST_MYSQL_HARNESS_H

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/moonflow.h>
#include <moonflow/mysql.h>

#include "test.h"
#include "test_cert.h"
#include "test_port.h"

extern char **environ;

static mf_loop_t *loop;

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the server ---------------------------------------------------------- */

typedef struct db_server {
    pid_t pid;
    uint16_t port;
    bool tls;
    bool installed;
    char dir[64]; /* dir/data, dir/sock, dir/err.log */
    char sock[96];
    mf_test_cert_t cert; /* tls: the server's certificate, also its CA */
} db_server_t;

static db_server_t main_server;
static db_server_t *db_started[4];
static int db_nstarted;

static inline const char *db_find(const char *name)
{
    static char path[64];
    const char *dirs[] = {"/usr/sbin", "/usr/bin", "/usr/local/bin", NULL};
    for (int i = 0; dirs[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dirs[i], name);
        if (access(path, X_OK) == 0)
            return path;
    }
    MF_TEST_FAIL("%s is not installed (make installs mariadb-server)", name);
    return NULL;
}

/* Runs a shell command made with printf's format. */
__attribute__((format(printf, 1, 2))) static inline int db_sh(const char *fmt,
                                                              ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* The user the server runs as: nobody when the tests run as root. */
static inline const char *db_user(void)
{
    return geteuid() == 0 ? "nobody" : NULL;
}

static inline void db_install(db_server_t *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/mf-mysql-XXXXXX");
    ASSERT(mkdtemp(s->dir) != NULL);
    ASSERT_EQ(chmod(s->dir, 0755), 0);
    snprintf(s->sock, sizeof s->sock, "%s/sock", s->dir);
    const char *user = db_user();
    /* Its own tmpdir: bootstraps running at once in /tmp have collided on
     * temporary table names. */
    ASSERT_EQ(db_sh("mkdir %s/tmp", s->dir), 0);
    if (user)
        ASSERT_EQ(db_sh("chown -R %s %s", user, s->dir), 0);
    if (s->tls) {
        mf_test_cert_make(&s->cert);
        ASSERT_EQ(db_sh("chmod 755 %s && chmod 644 %s %s", s->cert.dir,
                        s->cert.cert, s->cert.key),
                  0);
    }
    /* A loaded machine has failed a bootstrap now and then: try again in
     * a fresh data folder before giving up with its log. */
    int rc = -1;
    for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
        if (attempt)
            db_sh("rm -rf %s/data", s->dir);
        rc = db_sh("%s --no-defaults --auth-root-authentication-method=normal"
                   " --datadir=%s/data --tmpdir=%s/tmp --skip-test-db %s%s"
                   " >%s/install.log 2>&1",
                   db_find("mariadb-install-db"), s->dir, s->dir,
                   user ? "--user=" : "", user ? user : "", s->dir);
    }
    if (rc != 0) {
        db_sh("cat %s/install.log >&2", s->dir);
        MF_TEST_FAIL("mariadb-install-db failed");
    }
    s->installed = true;
}

static inline void db_spawn(db_server_t *s)
{
    char a[14][160];
    char *argv[24];
    int n = 0;
    argv[n++] = "mariadbd";
    argv[n++] = "--no-defaults";
#define DB_ARG(...) \
    (snprintf(a[n - 2], sizeof a[0], __VA_ARGS__), argv[n] = a[n - 2], n++)
    DB_ARG("--datadir=%s/data", s->dir);
    DB_ARG("--tmpdir=%s/tmp", s->dir);
    DB_ARG("--socket=%s", s->sock);
    DB_ARG("--port=%u", s->port);
    DB_ARG("--log-error=%s/err.log", s->dir);
    DB_ARG("--pid-file=%s/pid", s->dir);
    DB_ARG("--user=%s", db_user() ? db_user() : "");
    if (!db_user())
        n--;
    if (s->tls) {
        DB_ARG("--ssl-cert=%s", s->cert.cert);
        DB_ARG("--ssl-key=%s", s->cert.key);
        DB_ARG("--ssl-ca=%s", s->cert.cert);
    }
#undef DB_ARG
    argv[n++] = "--bind-address=127.0.0.1";
    argv[n++] = "--skip-name-resolve";
    argv[n++] = "--innodb-buffer-pool-size=16M";
    argv[n++] = "--max-connections=300";
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ASSERT(posix_spawn(&s->pid, db_find("mariadbd"), &fa, NULL, argv,
                       environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
}

/* Waits until the server answers on its port (at most 60 s: a loaded
 * machine starts InnoDB slowly). */
static inline void db_wait_ready(db_server_t *s)
{
    for (int i = 0; i < 1200; i++) {
        if (mf_test_port_open(s->port))
            return;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            db_sh("cat %s/err.log >&2", s->dir);
            MF_TEST_FAIL("mariadbd exited");
        }
        usleep(50000);
    }
    MF_TEST_FAIL("mariadbd did not start");
}

/* Stops the server (SIGKILL: the tests need no clean shutdown). */
static inline void db_kill(db_server_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

static inline void db_stop(db_server_t *s)
{
    db_kill(s);
    if (s->dir[0] && db_sh("rm -rf %s", s->dir) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
    if (s->tls && s->cert.dir[0] && !mf_test_cert_remove(&s->cert))
        fprintf(stderr, "could not remove %s\n", s->cert.dir);
    s->cert.dir[0] = '\0';
    s->installed = false;
    s->dir[0] = '\0';
}

static inline void db_stop_all(void)
{
    for (int i = 0; i < db_nstarted; i++)
        db_stop(db_started[i]);
}

/* Runs SQL as root over the unix socket; returns its output (tab-separated
 * rows, no headers; the last newline dropped) in a static buffer. */
static inline const char *db_admin_on(db_server_t *s, const char *sql)
{
    static char out[4096];
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s --no-defaults -uroot -S %s -N -B -e \"%s\" 2>&1",
             db_find("mariadb"), s->sock, sql);
    FILE *p = popen(cmd, "r");
    ASSERT(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    if (n && out[n - 1] == '\n')
        out[n - 1] = '\0';
    if (rc != 0)
        MF_TEST_FAIL("mariadb -e \"%s\": %s", sql, out);
    return out;
}

static inline void db_start(db_server_t *s, bool tls)
{
    s->tls = tls;
    db_started[db_nstarted++] = s; /* removed at exit, even half made */
    db_install(s);
    s->port = mf_test_free_port();
    db_spawn(s);
    db_wait_ready(s);
    db_admin_on(s, "CREATE DATABASE test;"
                   " CREATE USER app@'%' IDENTIFIED BY 'secret';"
                   " GRANT ALL ON test.* TO app@'%';"
                   " GRANT PROCESS ON *.* TO app@'%';");
}

/* Starts a stopped server again, same data and port. */
static inline void db_restart(db_server_t *s)
{
    db_spawn(s);
    db_wait_ready(s);
}

static inline const char *admin(const char *sql)
{
    return db_admin_on(&main_server, sql);
}

/* "mysql://app:secret@127.0.0.1:PORT/test" + extra ("?ssl=..."). */
static inline const char *url_with(const db_server_t *s, const char *userinfo,
                                   const char *db, const char *extra)
{
    static char url[512];
    snprintf(url, sizeof url, "mysql://%s@127.0.0.1:%u/%s%s", userinfo, s->port,
             db, extra ? extra : "");
    return url;
}

static inline const char *main_url(void)
{
    return url_with(&main_server, "app:secret", "test", NULL);
}

/* The loop's client for url with the default options; asserts it parsed. */
static inline mf_mysql_client_t *client_at(const char *url)
{
    int err = -1;
    mf_mysql_client_t *c = mf_mysql_client(loop, url, NULL, &err);
    if (!c)
        MF_TEST_FAIL("refused %s", url);
    ASSERT_EQ(err, 0);
    return c;
}

/* The main server (started once; tls: with a certificate) and the loop. */
static inline mf_mysql_client_t *setup_server(bool tls,
                                              const mf_mysql_opts_t *opts)
{
    signal(SIGPIPE, SIG_IGN);
    if (!main_server.installed) {
        atexit(db_stop_all);
        db_start(&main_server, tls);
    }
    if (!loop)
        loop = mf_loop_create();
    int err = -1;
    mf_mysql_client_t *c = mf_mysql_client(loop, main_url(), opts, &err);
    ASSERT(c != NULL);
    ASSERT_EQ(err, 0);
    return c;
}

static inline mf_mysql_client_t *setup_with(const mf_mysql_opts_t *opts)
{
    return setup_server(false, opts);
}

static inline mf_mysql_client_t *setup(void)
{
    return setup_with(NULL);
}

static inline void teardown(void)
{
    mf_loop_destroy(loop);
    loop = NULL;
}

/* ---- tasks and their results --------------------------------------------- */

typedef struct result {
    int done;
    int state;
    int error;
    unsigned code;
    char sqlstate[6];
    char message[600];
    size_t nsets;
    mf_mysql_result_t first; /* the first set's counts */
    char text[8192];
} result_t;

static inline void put(result_t *r, const char *s, size_t n)
{
    mf_test_append(r->text, sizeof r->text, s, n);
}

/* One value: NULL, i:-1, u:1, d:1.5, or the text (NUL as \0). */
static inline void render_value(result_t *r, const mf_mysql_value_t *v)
{
    char num[64];
    switch (v->type) {
    case MF_MYSQL_NULL:
        put(r, "NULL", 4);
        return;
    case MF_MYSQL_INT:
        snprintf(num, sizeof num, "i:%lld", (long long)v->i);
        break;
    case MF_MYSQL_UINT:
        snprintf(num, sizeof num, "u:%llu", (unsigned long long)v->u);
        break;
    case MF_MYSQL_DOUBLE:
        snprintf(num, sizeof num, "d:%.17g", v->d);
        break;
    default:
        ASSERT(v->s[v->len] == '\0');
        mf_test_append_bytes(r->text, sizeof r->text, v->s, v->len);
        return;
    }
    put(r, num, strlen(num));
}

/* Sets as "a,b;c,d" rows, sets separated by " | "; a set without rows as
 * "ok" (or "empty" when it has fields). */
static inline void render_set(result_t *r, const mf_mysql_result_t *set)
{
    if (!set->nfields) {
        put(r, "ok", 2);
        return;
    }
    if (!set->nrows)
        put(r, "empty", 5);
    for (size_t i = 0; i < set->nrows; i++) {
        if (i)
            put(r, ";", 1);
        for (unsigned c = 0; c < set->nfields; c++) {
            if (c)
                put(r, ",", 1);
            render_value(r, &set->rows[i][c]);
        }
    }
}

static inline void on_done(mf_task_t *task)
{
    result_t *r = task->user;
    r->done++;
    r->state = mf_task_state(task);
    r->error = mf_task_error(task);
    const mf_mysql_error_t *e = mf_task_mysql_error(task);
    r->code = e->code;
    snprintf(r->sqlstate, sizeof r->sqlstate, "%s", e->sqlstate);
    snprintf(r->message, sizeof r->message, "%s", e->message ? e->message : "");
    r->nsets = mf_task_mysql_nresults(task);
    r->text[0] = 0;
    for (size_t i = 0; i < r->nsets; i++) {
        if (i)
            put(r, " | ", 3);
        render_set(r, mf_task_mysql_result(task, i));
    }
    if (r->nsets)
        r->first = *mf_task_mysql_result(task, 0);
}

static inline mf_task_t *query_task(mf_mysql_client_t *c, result_t *r,
                                    const char *sql)
{
    mf_task_t *t = mf_task_mysql_create(c, on_done, r);
    ASSERT_EQ(mf_task_mysql_set_query(t, sql, 0), 0);
    return t;
}

/* Runs the loop until *count reaches want: bounded in time. */
static inline void run_until_for(const int *count, int want, uint64_t ms)
{
    uint64_t end = now_ms() + ms;
    while (*count < want && now_ms() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    if (*count < want)
        MF_TEST_FAIL("only %d of %d done", *count, want);
}

static inline void run_until(const int *count, int want)
{
    run_until_for(count, want, 30000);
}

/* Lets the loop handle what is pending for about ms (idle watchers ...). */
static inline void spin(uint64_t ms)
{
    uint64_t end = now_ms() + ms;
    while (now_ms() < end) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(1000);
    }
}

static inline void run(mf_mysql_client_t *c, result_t *r, const char *sql)
{
    memset(r, 0, sizeof *r);
    mf_task_start(query_task(c, r, sql));
    run_until(&r->done, 1);
}

#define EXPECT_STATE(r, st, err)                                           \
    do {                                                                   \
        if ((r).state != (st) || (r).error != (err))                       \
            MF_TEST_FAIL("state %s error %s (%u %s %s)",                   \
                         mf_state_name((r).state), mf_err_name((r).error), \
                         (r).code, (r).sqlstate, (r).message);             \
    } while (0)

static inline void expect(mf_mysql_client_t *c, const char *sql,
                          const char *want)
{
    result_t r;
    run(c, &r, sql);
    EXPECT_STATE(r, MF_STATE_SUCCESS, 0);
    if (strcmp(r.text, want) != 0)
        MF_TEST_FAIL("%s: got \"%s\", want \"%s\"", sql, r.text, want);
}

/* Connections of user on the server (its process list). */
static inline int server_connections(const char *user)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
             " WHERE USER='%s'",
             user);
    return atoi(admin(sql));
}

#endif /* MF_TEST_MYSQL_HARNESS_H */
