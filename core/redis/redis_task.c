/*
 * redis_task.c — the redis task kind: commands (copied in protocol form),
 * which of them need a connection of their own, dispatch, completion,
 * timeout/cancel, and the replies.
 *
 * It talks down only (client: routing, the pool; connection: close, busy);
 * its connection reaches it through the hooks each task carries.
 *
 * Ownership: the task owns its command bytes and its reply memory (an
 * arena released in destroy, after the callback). While its replies are
 * due it sits on a connection's queue; the connection completes it. A task
 * that gives up on a shared connection stays queued, its replies discarded
 * as they arrive, and completes (freeing itself) after the last one.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "redis_int.h"

/* ---- which commands need a connection of their own --------------------- */

enum {
    MF__CMD_BLOCKING = 1, /* dedicated */
    MF__CMD_STATE = 2,    /* dedicated; the connection is closed after */
    MF__CMD_MULTI = 3,
    MF__CMD_EXEC = 4, /* EXEC, DISCARD */
    MF__CMD_WATCH = 5,
    MF__CMD_UNWATCH = 6,
    MF__CMD_XREAD = 7,  /* blocking with a BLOCK argument */
    MF__CMD_SELECT = 8, /* state; a session puts its database back */
    MF__CMD_STREAM = 9  /* state; pushed replies follow: no session reuse */
};

#define MF__CMD(name, kind)          \
    {                                \
        name, sizeof(name) - 1, kind \
    }
static const struct {
    const char *name;
    size_t len;
    int kind;
} mf__cmd_table[] = {
    MF__CMD("BLPOP", MF__CMD_BLOCKING),
    MF__CMD("BRPOP", MF__CMD_BLOCKING),
    MF__CMD("BRPOPLPUSH", MF__CMD_BLOCKING),
    MF__CMD("BLMOVE", MF__CMD_BLOCKING),
    MF__CMD("BLMPOP", MF__CMD_BLOCKING),
    MF__CMD("BZPOPMIN", MF__CMD_BLOCKING),
    MF__CMD("BZPOPMAX", MF__CMD_BLOCKING),
    MF__CMD("BZMPOP", MF__CMD_BLOCKING),
    MF__CMD("WAIT", MF__CMD_BLOCKING),
    MF__CMD("WAITAOF", MF__CMD_BLOCKING),
    MF__CMD("XREAD", MF__CMD_XREAD),
    MF__CMD("XREADGROUP", MF__CMD_XREAD),
    MF__CMD("MULTI", MF__CMD_MULTI),
    MF__CMD("EXEC", MF__CMD_EXEC),
    MF__CMD("DISCARD", MF__CMD_EXEC),
    MF__CMD("WATCH", MF__CMD_WATCH),
    MF__CMD("UNWATCH", MF__CMD_UNWATCH),
    MF__CMD("SELECT", MF__CMD_SELECT),
    MF__CMD("CLIENT", MF__CMD_STATE),
    MF__CMD("SUBSCRIBE", MF__CMD_STREAM),
    MF__CMD("PSUBSCRIBE", MF__CMD_STREAM),
    MF__CMD("SSUBSCRIBE", MF__CMD_STREAM),
    MF__CMD("UNSUBSCRIBE", MF__CMD_STATE),
    MF__CMD("PUNSUBSCRIBE", MF__CMD_STATE),
    MF__CMD("SUNSUBSCRIBE", MF__CMD_STATE),
    MF__CMD("MONITOR", MF__CMD_STREAM),
    MF__CMD("AUTH", MF__CMD_STATE),
    MF__CMD("HELLO", MF__CMD_STATE),
    MF__CMD("RESET", MF__CMD_STATE),
    MF__CMD("QUIT", MF__CMD_STATE),
    MF__CMD("READONLY", MF__CMD_STATE),
    MF__CMD("READWRITE", MF__CMD_STATE),
    MF__CMD("SYNC", MF__CMD_STREAM),
    MF__CMD("PSYNC", MF__CMD_STREAM),
};

static bool mf__word_is(const char *s, size_t n, const char *word)
{
    return strlen(word) == n && strncasecmp(s, word, n) == 0;
}

/* Every command passes here: one length compare rejects most entries. */
static int mf__cmd_kind(const char *name, size_t n)
{
    if (n < 4 || n > 12)
        return 0; /* GET, SET, DEL, INCR... are never special */
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf__cmd_table); i++)
        if (mf__cmd_table[i].len == n &&
            strncasecmp(name, mf__cmd_table[i].name, n) == 0)
            return mf__cmd_table[i].kind;
    return 0;
}

/* What a command means for the connection it runs on (an MF__CMD_* kind;
 * XREAD counts as blocking only with a BLOCK argument). */
static int mf__cmd_code(int argc, const char *const *argv, const size_t *lens)
{
    int kind = mf__cmd_kind(argv[0], MF__REDIS_ARGLEN(lens, argv, 0));
    if (kind != MF__CMD_XREAD)
        return kind;
    for (int i = 1; i < argc; i++)
        if (mf__word_is(argv[i], MF__REDIS_ARGLEN(lens, argv, i), "BLOCK"))
            return MF__CMD_BLOCKING;
    return 0;
}

/* What a session's connection holds after one more command of that code,
 * for the cleanup at its end. */
static void mf__redis_pin_track(mf_redis_pin_t *p, int code)
{
    switch (code) {
    case MF__CMD_SELECT:
        p->selected = true;
        break;
    case MF__CMD_STATE:
        p->dirty = true;
        break;
    case MF__CMD_STREAM:
        p->streaming = true;
        break;
    case MF__CMD_MULTI:
        p->in_multi = true;
        break;
    case MF__CMD_EXEC:
        p->in_multi = p->watching = false;
        break;
    case MF__CMD_WATCH:
        p->watching = true;
        break;
    case MF__CMD_UNWATCH:
        p->watching = false;
        break;
    default:
        break;
    }
}

/* The task's connection needs after one more command of that code. */
static void mf__redis_task_classify(mf_redis_task_t *t, int code)
{
    if (t->pin)
        mf__redis_pin_track(t->pin, code);
    switch (code) {
    case MF__CMD_BLOCKING:
        t->dedicated = t->blocking = true;
        break;
    case MF__CMD_STATE:
    case MF__CMD_SELECT:
    case MF__CMD_STREAM:
        t->dedicated = t->dirty = true;
        break;
    case MF__CMD_MULTI:
        t->in_multi = true;
        break;
    case MF__CMD_EXEC:
        t->in_multi = t->watching = false;
        break;
    case MF__CMD_WATCH:
        t->dedicated = t->watching = true;
        break;
    case MF__CMD_UNWATCH:
        t->watching = false;
        break;
    default:
        break;
    }
}

/* ---- the kind ------------------------------------------------------------
 */

static mf_redis_task_t *mf__redis_task_of(const mf_task_t *task)
{
    return (mf_redis_task_t *)(void *)task;
}

/* The task leaves its connection with (state, error): it completes, and
 * the connection goes back (dedicated) or idles when nothing else waits on
 * it (shared). */
void mf__redis_task_end(mf_redis_task_t *t, int state, int error)
{
    mf_redis_conn_t *conn = t->conn;
    bool reuse = state == MF_STATE_SUCCESS && !t->dirty;
    if (conn) {
        mf_list_remove(&t->link);
        t->conn = NULL;
    }
    if (conn && t->pin) {
        /* A session's: the connection stays the session's, quiet until
         * its next command; settled before the callback, which may close
         * the session and hand the connection back. */
        if (mf_list_empty(&conn->queue))
            mf__redis_conn_set_busy(conn, false);
        conn = NULL;
    }
    t->phase = MF_RT_DONE;
    mf_task_complete(&t->base, state, error); /* may free t (abandoned) */
    if (!conn)
        return;
    if (conn->kind == MF_RCONN_POOLED)
        mf__redis_client_release(conn, reuse);
    else if (mf_list_empty(&conn->queue))
        mf__redis_conn_set_busy(conn, false);
}

void mf__redis_task_leave(mf_redis_task_t *t, bool reuse)
{
    mf_redis_conn_t *conn = t->conn;
    if (!conn)
        return;
    mf_list_remove(&t->link);
    t->conn = NULL;
    if (conn->kind == MF_RCONN_POOLED)
        mf__redis_client_release(conn, reuse);
    else if (mf_list_empty(&conn->queue))
        mf__redis_conn_set_busy(conn, false);
}

int mf__redis_task_alloc_replies(mf_redis_task_t *t)
{
    t->replies = mf__redis_arena_alloc(t->base._loop, &t->arena,
                                       t->ncmds * sizeof(*t->replies));
    if (!t->replies)
        return MF_EMSGSIZE;
    memset(t->replies, 0, t->ncmds * sizeof(*t->replies));
    return 0;
}

/* Keeps (a bounded copy of) the error reply that refused the connection's
 * AUTH or SELECT, for mf_task_redis_error_message. */
void mf__redis_task_keep_refusal(mf_redis_task_t *t,
                                 const mf_redis_reply_t *reply)
{
    size_t len =
        reply->len < MF_REDIS_REFUSAL_MAX ? reply->len : MF_REDIS_REFUSAL_MAX;
    char *copy = mf__redis_arena_alloc(t->base._loop, &t->arena, len + 1);
    if (!copy)
        return; /* over the task's max_reply: "permission denied" alone */
    memcpy(copy, reply->str, len);
    copy[len] = '\0';
    t->refusal = copy;
}

/* One reply of the task arrived; it may complete the task. */
void mf__redis_task_on_reply(mf_redis_task_t *t)
{
    const mf_redis_reply_t *r = mf__redis_task_slot(t);
    if (r && r->type == MF_REDIS_ERROR)
        t->nerrors++;
    if (++t->nread < t->ncmds)
        return;
    if (t->overflow)
        mf__redis_task_end(t, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
    else
        mf__redis_task_end(t, MF_STATE_SUCCESS, 0);
}

/* How the task's connection speaks to it. */
static const mf_redis_task_hooks_t mf__redis_task_hooks = {
    mf__redis_task_on_reply, mf__redis_task_end, mf__redis_task_keep_refusal};

/* The state that goes with a route's error: a full line, or the error a
 * session's connection closed with. */
static int mf__redis_state_of(int error)
{
    switch (error) {
    case MF_EBUSY:
    case MF_EACCES:
    case MF_EMSGSIZE:
    case MF_ENOMEM:
        return MF_STATE_TASK_ERROR;
    case MF_ETIMEDOUT:
        return MF_STATE_TIMEOUT;
    case MF_EDNS:
        return MF_STATE_DNS_ERROR;
    case MF_ETLS:
        return MF_STATE_TLS_ERROR;
    case MF_EPROTO:
        return MF_STATE_PROTOCOL_ERROR;
    default:
        return MF_STATE_SYS_ERROR;
    }
}

static void mf__redis_task_dispatch(mf_task_t *task)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    if (!t->ncmds || t->unformatted) {
        t->phase = MF_RT_DONE;
        mf_task_complete(task, MF_STATE_TASK_ERROR,
                         t->unformatted ? MF_ENOMEM : MF_EINVAL);
        return;
    }
    if (t->in_multi || t->watching)
        t->dedicated = t->dirty = true; /* left open: not for the next task */
    t->replies = mf__redis_arena_alloc(task->_loop, &t->arena,
                                       t->ncmds * sizeof(*t->replies));
    if (!t->replies) {
        t->phase = MF_RT_DONE;
        mf_task_complete(task, MF_STATE_TASK_ERROR, MF_EMSGSIZE);
        return;
    }
    memset(t->replies, 0, t->ncmds * sizeof(*t->replies));
    int rc = mf__redis_client_route(t);
    if (rc < 0) {
        t->phase = MF_RT_DONE;
        mf_task_complete(task, mf__redis_state_of(rc), rc);
    }
}

/* Timeout or cancel: stop waiting. On a shared connection whose commands
 * are out, the replies still come and are dropped; a dedicated connection
 * is closed (a blocking command may never answer). */
void mf__redis_task_cancel(mf_task_t *task)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    switch (t->phase) {
    case MF_RT_WAITING:
        mf__redis_client_unwait(t);
        mf__redis_task_end(t, MF_STATE_CANCELED, MF_ECANCELED);
        return;
    case MF_RT_QUEUED:
    case MF_RT_SENT:
        if (t->conn->kind == MF_RCONN_POOLED)
            mf__redis_conn_close(t->conn, MF_STATE_CANCELED, MF_ECANCELED);
        else if (t->phase == MF_RT_QUEUED)
            mf__redis_task_end(t, MF_STATE_CANCELED, MF_ECANCELED);
        else
            t->abandoned = true;
        return;
    default:
        return;
    }
}

void mf__redis_task_destroy(mf_task_t *task)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    mf_loop_t *loop = task->_loop;
    mf__buf_release(loop, &t->cmds);
    mf__redis_arena_reset(loop, &t->arena);
    mf_loop_free(loop, t, sizeof(*t));
}

static const mf_task_ops_t mf__redis_ops = {"redis", mf__redis_task_dispatch,
                                            mf__redis_task_cancel,
                                            mf__redis_task_destroy};

/* ---- public ------------------------------------------------------------
 */

mf_task_t *mf_task_redis_create(mf_redis_client_t *client, mf_task_cb cb,
                                void *user)
{
    mf_redis_task_t *t = mf_loop_alloc(client->loop, sizeof(*t));
    memset(t, 0, offsetof(mf_redis_task_t, waiter)); /* waiter: by route */
    const mf_redis_kind_t *kind = client->kind;      /* NULL: a single node */
    mf_task_init(&t->base, kind ? kind->ops : &mf__redis_ops, client->loop, cb,
                 user);
    t->hooks = kind ? kind->hooks : &mf__redis_task_hooks;
    t->client = client;
    mf__buf_init(&t->cmds);
    mf_list_init(&t->link);
    mf__redis_arena_init(&t->arena, client->opts.max_reply);
    return &t->base;
}

void mf_task_redis_add_command(mf_task_t *task, int argc,
                               const char *const *argv, const size_t *argvlen)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    if (argc <= 0 || !argv)
        return; /* nothing to send; a task left empty fails with EINVAL */
    size_t before = t->cmds.len;
    if (mf__redis_format(task->_loop, &t->cmds, argc, argv, argvlen) < 0) {
        t->cmds.len = before; /* no half command on the wire */
        t->unformatted = true;
        return;
    }
    t->ncmds++;
    mf__redis_task_classify(t, mf__cmd_code(argc, argv, argvlen));
}

/* ---- prepared commands ---------------------------------------------------
 * Encoded once, appended to many tasks with one copy. Plain heap memory (no
 * loop): the caller may keep it as long as it likes, on any thread. */

struct mf_redis_prepared {
    char *data; /* the commands in protocol form */
    size_t len, cap;
    unsigned char *codes; /* one MF__CMD_* code per command */
    size_t ncmds, ncap;
};

/* Grows *p (cap elements of size bytes) to hold need; 0 or MF_ENOMEM. */
static int mf__grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        if ((n *= 2) > SIZE_MAX / size / 2)
            return MF_ENOMEM;
    void *bigger = mf_try_malloc(n * size);
    if (!bigger)
        return MF_ENOMEM;
    if (*p)
        memcpy(bigger, *p, *cap * size);
    mf_free(*p);
    *p = bigger;
    *cap = n;
    return 0;
}

mf_redis_prepared_t *mf_redis_prepared_create(void)
{
    return mf_xcalloc(1, sizeof(mf_redis_prepared_t));
}

void mf_redis_prepared_destroy(mf_redis_prepared_t *p)
{
    if (!p)
        return;
    mf_free(p->data);
    mf_free(p->codes);
    mf_free(p);
}

int mf_redis_prepared_add(mf_redis_prepared_t *p, int argc,
                          const char *const *argv, const size_t *argvlen)
{
    if (argc <= 0 || !argv)
        return MF_EINVAL;
    size_t size = mf__redis_format_size(argc, argv, argvlen);
    if (!size || p->len + size < p->len ||
        mf__grow((void **)&p->data, &p->cap, p->len + size, 1) < 0 ||
        mf__grow((void **)&p->codes, &p->ncap, p->ncmds + 1, 1) < 0)
        return MF_ENOMEM;
    mf__redis_format_at(p->data + p->len, argc, argv, argvlen);
    p->len += size;
    p->codes[p->ncmds++] = (unsigned char)mf__cmd_code(argc, argv, argvlen);
    return 0;
}

size_t mf_redis_prepared_count(const mf_redis_prepared_t *p)
{
    return p->ncmds;
}

void mf_task_redis_add_prepared(mf_task_t *task, const mf_redis_prepared_t *p)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    if (!p->ncmds)
        return; /* nothing to send; a task left empty fails with EINVAL */
    if (mf__buf_append(task->_loop, &t->cmds, p->data, p->len) < 0) {
        t->unformatted = true;
        return;
    }
    t->ncmds += p->ncmds;
    for (size_t i = 0; i < p->ncmds; i++)
        mf__redis_task_classify(t, p->codes[i]);
}

void mf_task_redis_set_dedicated(mf_task_t *task, bool dedicated)
{
    mf_redis_task_t *t = mf__redis_task_of(task);
    t->forced = dedicated;
}

size_t mf_task_redis_nreplies(const mf_task_t *task)
{
    const mf_redis_task_t *t = (const mf_redis_task_t *)(const void *)task;
    return mf_task_state(task) == MF_STATE_SUCCESS ? t->nread : 0;
}

size_t mf_task_redis_error_replies(const mf_task_t *task)
{
    const mf_redis_task_t *t = (const mf_redis_task_t *)(const void *)task;
    return mf_task_redis_nreplies(task) ? t->nerrors : 0;
}

const char *mf_task_redis_error_message(const mf_task_t *task)
{
    const mf_redis_task_t *t = (const mf_redis_task_t *)(const void *)task;
    return mf_task_error(task) == MF_EACCES ? t->refusal : NULL;
}

const mf_redis_reply_t *mf_task_redis_reply(const mf_task_t *task, size_t i)
{
    const mf_redis_task_t *t = (const mf_redis_task_t *)(const void *)task;
    if (i >= mf_task_redis_nreplies(task))
        return NULL;
    return &t->replies[i];
}
