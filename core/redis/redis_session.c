/*
 * redis_session.c — sessions: one dedicated connection of a client's
 * endpoint, held by one caller for a run of tasks (WATCH ... MULTI ...
 * EXEC across calls), then cleaned and handed back.
 *
 * A session waits for a connection as a task does (the endpoint's line),
 * through a waiter of its own. Its tasks are ordinary redis tasks pinned
 * to that connection (mf_redis_pin_t): they queue behind each other, and
 * their commands tell the pin what state they leave (MULTI, WATCH, SELECT,
 * others). At the end that state is undone before the pool has the
 * connection back: DISCARD (in MULTI: it unwatches too) or UNWATCH, and
 * SELECT of the URL's database after a SELECT; after other state (CLIENT,
 * HELLO, AUTH ...) RESET, then the URL's AUTH and SELECT. A connection
 * that may be in pub/sub or MONITOR mode, with commands still due, or
 * whose cleanup fails, is closed instead.
 *
 * Calls down only: the task kind (the cleanup is a task), the client (the
 * pool), the connection (close). Ownership: the caller owns the session
 * until mf_redis_session_close; from then the session frees itself, after
 * its cleanup when there is one. Memory from the loop's free lists: a
 * session still cleaning when the loop ends goes with the loop.
 */
#include <stdio.h>
#include <string.h>

#include "redis_int.h"

struct mf_redis_session {
    mf_redis_client_t *client; /* a cluster's or group's: the keys' node */
    mf_loop_t *loop;
    mf_redis_pin_t pin;
    mf_pwaiter_t waiter;
    mf_post_t ready_post; /* the open callback, never inside a call */
    mf_redis_session_cb cb;
    void *user;
    int error;         /* the open failed: MF_EBUSY ... */
    int slot;          /* a cluster's: the keys' slot */
    bool mapping;      /* a cluster's: waiting for its slot map */
    bool post_pending; /* ready_post is queued */
    bool closed;       /* mf_redis_session_close was called */
};

static void mf__session_free(mf_redis_session_t *s)
{
    mf_loop_free(s->loop, s, sizeof(*s));
}

/* The connection leaves the session (to the pool, or closed). */
static mf_redis_conn_t *mf__session_unpin(mf_redis_session_t *s)
{
    mf_redis_conn_t *conn = s->pin.conn;
    if (conn) {
        conn->pin = NULL;
        s->pin.conn = NULL;
    }
    return conn;
}

/* The cleanup answered: every reply an OK, and the connection is as the
 * pool hands it out; anything else, and it is closed. */
static void mf__session_cleaned(mf_task_t *task)
{
    mf_redis_session_t *s = task->user;
    bool clean = mf_task_state(task) == MF_STATE_SUCCESS &&
                 mf_task_redis_error_replies(task) == 0;
    mf_redis_conn_t *conn = mf__session_unpin(s);
    if (conn)
        mf__redis_client_release(conn, clean);
    mf__session_free(s);
}

static void mf__session_add(mf_task_t *task, int argc, const char **argv)
{
    mf_task_redis_add_command(task, argc, argv, NULL);
}

/* RESET (Redis >= 6.2) undoes every state a call-and-reply command can
 * leave (MULTI, WATCH, the database, CLIENT SETNAME / TRACKING / NO-EVICT,
 * HELLO's protocol, READONLY, another user's AUTH), and logs the
 * connection out: the URL's AUTH and SELECT follow it, as on a new
 * connection. An older server refuses RESET: the cleanup fails, the
 * connection is closed. */
static void mf__session_add_reset(mf_task_t *task, const mf_redis_client_t *c)
{
    mf__session_add(task, 1, (const char *[]){"RESET"});
    if (c->password && c->user)
        mf__session_add(task, 3,
                        (const char *[]){"AUTH", c->user, c->password});
    else if (c->password)
        mf__session_add(task, 2, (const char *[]){"AUTH", c->password});
}

/* Sends what undoes the session's state; the pool's waiters wait for this
 * connection meanwhile (mf_pconn_returning). */
static void mf__session_clean(mf_redis_session_t *s, mf_redis_conn_t *conn)
{
    mf_task_t *task = mf_task_redis_create(s->client, mf__session_cleaned, s);
    mf_redis_task_t *t = (mf_redis_task_t *)(void *)task;
    bool select = s->pin.selected;
    if (s->pin.dirty) {
        mf__session_add_reset(task, s->client);
        select = s->client->db != 0; /* RESET went back to 0 */
    } else if (s->pin.in_multi) {
        mf__session_add(task, 1, (const char *[]){"DISCARD"});
    } else if (s->pin.watching) {
        mf__session_add(task, 1, (const char *[]){"UNWATCH"});
    }
    if (select) {
        char db[24];
        snprintf(db, sizeof db, "%ld", s->client->db);
        mf__session_add(task, 2, (const char *[]){"SELECT", db});
    }
    t->pin = &s->pin; /* after the commands: they change nothing to track */
    mf_pconn_returning(&conn->pc);
    mf_task_start(task);
}

/* The session's end: its connection goes back clean, or closed. */
static void mf__session_hand_back(mf_redis_session_t *s)
{
    mf_redis_conn_t *conn = s->pin.conn;
    if (!conn) {
        mf__session_free(s);
        return;
    }
    bool busy = !mf_list_empty(&conn->queue);
    if (busy || s->pin.streaming || conn->state != MF_RCONN_READY) {
        /* replies due, pushed ones (pub/sub, MONITOR), or not open yet */
        mf__redis_client_release(mf__session_unpin(s), false);
        mf__session_free(s);
        return;
    }
    if (s->pin.in_multi || s->pin.watching || s->pin.selected || s->pin.dirty) {
        mf__session_clean(s, conn);
        return;
    }
    mf__redis_client_release(mf__session_unpin(s), true);
    mf__session_free(s);
}

static void mf__session_ready(mf_post_t *post)
{
    mf_redis_session_t *s = post->data;
    s->post_pending = false;
    if (s->closed) {
        mf__session_hand_back(s);
        return;
    }
    s->cb(s, s->error, s->user);
}

static void mf__session_tell(mf_redis_session_t *s)
{
    s->post_pending = true;
    mf_loop_defer(s->loop, &s->ready_post);
}

/* The pool gave the session a connection (idle, or new and opening). */
static void mf__session_granted(mf_pwaiter_t *w, mf_pconn_t *pc)
{
    mf_redis_session_t *s = mf_container_of(w, mf_redis_session_t, waiter);
    mf_redis_conn_t *conn = mf_container_of(pc, mf_redis_conn_t, pc);
    s->pin.conn = conn;
    conn->pin = &s->pin;
    mf__redis_conn_set_busy(conn, false); /* quiet until a command */
    mf__session_tell(s);
}

/* Waits for the pool's connection of s->client (the keys' node's). */
static void mf__session_acquire(mf_redis_session_t *s)
{
    int rc = mf__redis_client_acquire(s->client, &s->waiter);
    if (rc < 0) {
        s->error = rc;
        mf__session_tell(s);
    }
}

/* The slot's node, once the cluster has a map. */
static void mf__session_mapped(mf_task_t *task)
{
    mf_redis_session_t *s = task->user;
    s->mapping = false;
    if (s->closed) {
        mf__session_free(s);
        return;
    }
    mf_redis_client_t *node = mf__redis_cluster_slot_client(s->client, s->slot);
    if (!node) {
        s->error = mf_task_error(task) ? mf_task_error(task) : MF_ECONNREFUSED;
        mf__session_tell(s);
        return;
    }
    s->client = node;
    mf__session_acquire(s);
}

/* A cluster's session: the keys' slot's master, after the map is read
 * (a PING through the cluster waits for it as any task does). */
static int mf__session_cluster(mf_redis_session_t *s, int nkeys,
                               const char *const *keys, const size_t *lens)
{
    int slot = MF_REDIS_SLOT_NONE;
    for (int i = 0; i < nkeys; i++) {
        int k = mf__redis_key_slot(keys[i], MF__REDIS_ARGLEN(lens, keys, i));
        if (slot != MF_REDIS_SLOT_NONE && k != slot)
            return MF_EINVAL;
        slot = k;
    }
    if (slot == MF_REDIS_SLOT_NONE)
        return MF_EINVAL; /* a cluster's session names its keys */
    s->slot = slot;
    mf_redis_client_t *node = mf__redis_cluster_slot_client(s->client, slot);
    if (node) {
        s->client = node;
        mf__session_acquire(s);
        return 0;
    }
    mf_task_t *ping = mf_task_redis_create(s->client, mf__session_mapped, s);
    mf_task_redis_add_command(ping, 1, (const char *[]){"PING"}, NULL);
    s->mapping = true;
    mf_task_start(ping);
    return 0;
}

mf_redis_session_t *
mf_redis_session_open_keys(mf_redis_client_t *client, int nkeys,
                           const char *const *keys, const size_t *lens,
                           mf_redis_session_cb cb, void *user)
{
    mf_redis_session_t *s = mf_loop_alloc(client->loop, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->client = client;
    s->loop = client->loop;
    s->cb = cb;
    s->user = user;
    mf_post_init(&s->ready_post, mf__session_ready, s);
    mf_pwaiter_init(&s->waiter, mf__session_granted);
    int rc = 0;
    mf_redis_client_t *node = client;
    if (client->cluster)
        rc = mf__session_cluster(s, nkeys, keys, lens);
    else if (client->group)
        rc = mf__redis_group_session_node(client, nkeys, keys, lens, &node);
    if (rc == 0 && !client->cluster) {
        s->client = node;
        mf__session_acquire(s);
    }
    if (rc < 0) {
        s->error = rc;
        mf__session_tell(s);
    }
    return s;
}

mf_redis_session_t *mf_redis_session_open(mf_redis_client_t *client,
                                          mf_redis_session_cb cb, void *user)
{
    return mf_redis_session_open_keys(client, 0, NULL, NULL, cb, user);
}

mf_task_t *mf_task_redis_session_create(mf_redis_session_t *s, mf_task_cb cb,
                                        void *user)
{
    mf_task_t *task = mf_task_redis_create(s->client, cb, user);
    ((mf_redis_task_t *)(void *)task)->pin = &s->pin;
    return task;
}

bool mf_redis_session_has_connection(const mf_redis_session_t *s)
{
    return s->pin.conn != NULL;
}

void mf_redis_session_close(mf_redis_session_t *s)
{
    if (!s || s->closed)
        return;
    s->closed = true;
    mf_pwaiter_cancel(&s->waiter);
    if (!s->post_pending && !s->mapping) /* else: freed there */
        mf__session_hand_back(s);
}
