/*
 * redis_sub.c — pub/sub: a subscriber is a connection of its own in
 * subscribe mode (SUBSCRIBE/PSUBSCRIBE, or SSUBSCRIBE for sharded
 * channels); messages and (un)subscribe confirmations go to its
 * callback in order, an error reply (a refused subscription) ends it, and its
 * end (error, server gone, or close) is reported once, from a deferred post,
 * after which the subscriber is freed.
 *
 * Its connection tells it of replies, a refused AUTH/SELECT and its end
 * through the owner ops given at open (mf__sub_conn_owner).
 *
 * Ownership: the client keeps live subscribers in its subs list and frees
 * them with the loop; the user's pointer is valid until the final call.
 * Message memory is the connection's scratch arena, reset after each call.
 */
#include <string.h>

#include "redis_int.h"

static void mf__sub_command(mf_redis_subscriber_t *sub, bool subscribe,
                            bool pattern, int n, const char *const *channels,
                            const size_t *lens)
{
    mf_loop_t *loop = sub->client->loop;
    const char *verb = subscribe ? (pattern ? "PSUBSCRIBE" : "SUBSCRIBE")
                                 : (pattern ? "PUNSUBSCRIBE" : "UNSUBSCRIBE");
    if (sub->sharded)
        verb = subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE";
    mf_buf_t cmd;
    mf__buf_init(&cmd);
    const char **argv = mf_xmalloc((size_t)(n + 1) * sizeof(*argv));
    size_t *argl = mf_xmalloc((size_t)(n + 1) * sizeof(*argl));
    argv[0] = verb;
    argl[0] = strlen(verb);
    for (int i = 0; i < n; i++) {
        argv[i + 1] = channels[i];
        argl[i + 1] = lens ? lens[i] : strlen(channels[i]);
    }
    if (mf__redis_format(loop, &cmd, n + 1, argv, argl) == 0)
        mf__redis_conn_send(sub->conn, cmd.data, cmd.len);
    mf__buf_release(loop, &cmd);
    mf_free(argv);
    mf_free(argl);
}

static void mf__sub_end_cb(mf_post_t *post)
{
    mf_redis_subscriber_t *sub = post->data;
    mf_list_remove(&sub->link);
    sub->cb(sub, NULL, sub->error, sub->user);
    mf_free(sub);
}

static void mf__sub_on_message(mf_redis_conn_t *conn,
                               const mf_redis_reply_t *reply);
static void mf__sub_on_refused(mf_redis_conn_t *conn,
                               const mf_redis_reply_t *reply);
static void mf__sub_on_close(mf_redis_conn_t *conn, int error);

static const mf_redis_conn_owner_t mf__sub_conn_owner = {
    mf__sub_on_message, mf__sub_on_refused, mf__sub_on_close};

static mf_redis_subscriber_t *mf__sub_start(mf_redis_client_t *client,
                                            bool sharded, int nchannels,
                                            const char *const *channels,
                                            const size_t *lens, bool pattern,
                                            mf_redis_message_cb cb, void *user)
{
    mf_redis_subscriber_t *sub = mf_xcalloc(1, sizeof(*sub));
    sub->client = client;
    sub->cb = cb;
    sub->user = user;
    sub->sharded = sharded;
    mf_post_init(&sub->end_post, mf__sub_end_cb, sub);
    mf_list_push_back(&client->subs, &sub->link);
    if (client->group) { /* no live server of the group, or no channel */
        sub->error = MF_ENOUPSTREAM;
        mf_loop_defer(client->loop, &sub->end_post);
        return sub;
    }
    sub->conn =
        mf__redis_conn_open(client, MF_RCONN_SUB, &mf__sub_conn_owner, sub);
    /* Queued behind AUTH/SELECT; written once the connection is up. */
    if (nchannels > 0)
        mf__sub_command(sub, true, pattern, nchannels, channels, lens);
    return sub;
}

mf_redis_subscriber_t *mf_redis_subscribe(mf_redis_client_t *client,
                                          int nchannels,
                                          const char *const *channels,
                                          const size_t *lens, bool pattern,
                                          mf_redis_message_cb cb, void *user)
{
    if (client->pubsub) /* a cluster: a message reaches every node */
        client = client->pubsub;
    else if (client->group && nchannels > 0) /* the first channel's pick */
        client = client->kind->shard_node(client, channels[0],
                                          MF__REDIS_ARGLEN(lens, channels, 0));
    return mf__sub_start(client, false, nchannels, channels, lens, pattern, cb,
                         user);
}

mf_redis_subscriber_t *mf_redis_ssubscribe(mf_redis_client_t *client,
                                           int nchannels,
                                           const char *const *channels,
                                           const size_t *lens,
                                           mf_redis_message_cb cb, void *user)
{
    if (client->kind && nchannels > 0) /* a cluster: the channel's node */
        client = client->kind->shard_node(client, channels[0],
                                          MF__REDIS_ARGLEN(lens, channels, 0));
    return mf__sub_start(client, true, nchannels, channels, lens, false, cb,
                         user);
}

void mf_redis_subscriber_update(mf_redis_subscriber_t *sub, bool subscribe,
                                int nchannels, const char *const *channels,
                                const size_t *lens, bool pattern)
{
    if (sub->closing || !sub->conn || nchannels < 0 ||
        (subscribe && nchannels == 0))
        return;
    mf__sub_command(sub, subscribe, pattern, nchannels, channels, lens);
}

void mf_redis_subscriber_close(mf_redis_subscriber_t *sub)
{
    if (sub->closing)
        return;
    sub->closing = true;
    if (sub->conn)
        mf__redis_conn_close(sub->conn, MF_STATE_SUCCESS, 0);
}

static bool mf__is(const mf_redis_reply_t *r, const char *word)
{
    size_t n = strlen(word);
    return r->type == MF_REDIS_STRING && r->len == n &&
           memcmp(r->str, word, n) == 0;
}

/* Keeps (a bounded copy of) the error reply that ends the subscriber: a
 * refused AUTH, SELECT or (P)SUBSCRIBE. */
static void mf__sub_keep_refusal(mf_redis_subscriber_t *sub,
                                 const mf_redis_reply_t *reply)
{
    size_t len =
        reply->len < MF_REDIS_REFUSAL_MAX ? reply->len : MF_REDIS_REFUSAL_MAX;
    memcpy(sub->refusal, reply->str, len);
    sub->refusal[len] = '\0';
}

static void mf__sub_on_refused(mf_redis_conn_t *conn,
                               const mf_redis_reply_t *reply)
{
    mf__sub_keep_refusal(conn->owner_data, reply);
}

/* A reply arrived on the subscriber's connection (scratch memory). */
static void mf__sub_on_message(mf_redis_conn_t *conn,
                               const mf_redis_reply_t *reply)
{
    mf_redis_subscriber_t *sub = conn->owner_data;
    if (sub->closing)
        return;
    if (reply->type == MF_REDIS_ERROR) {
        /* A refused (P)SUBSCRIBE: NOPERM when the user may not listen. */
        bool denied = reply->len >= 6 && !memcmp(reply->str, "NOPERM", 6);
        mf__sub_keep_refusal(sub, reply);
        mf__redis_conn_close(sub->conn, MF_STATE_TASK_ERROR,
                             denied ? MF_EACCES : MF_EPROTO);
        return;
    }
    if (reply->type != MF_REDIS_ARRAY || reply->len < 3)
        return;
    const mf_redis_reply_t *kind = &reply->elements[0];
    bool confirm =
        reply->len == 3 && reply->elements[2].type == MF_REDIS_INTEGER &&
        (mf__is(kind, "subscribe") || mf__is(kind, "psubscribe") ||
         mf__is(kind, "unsubscribe") || mf__is(kind, "punsubscribe") ||
         mf__is(kind, "ssubscribe") || mf__is(kind, "sunsubscribe"));
    bool message = reply->len == 3 &&
                   (mf__is(kind, "message") || mf__is(kind, "smessage"));
    if (confirm || message || (mf__is(kind, "pmessage") && reply->len == 4))
        sub->cb(sub, reply, 0, sub->user);
}

const char *mf_redis_subscriber_error_message(const mf_redis_subscriber_t *sub)
{
    return sub->refusal[0] ? sub->refusal : NULL;
}

/* Its connection ended (error 0: closed on purpose). */
static void mf__sub_on_close(mf_redis_conn_t *conn, int error)
{
    mf_redis_subscriber_t *sub = conn->owner_data;
    sub->conn = NULL;
    sub->closing = true;
    sub->error = error;
    mf_loop_defer(sub->client->loop, &sub->end_post);
}

void mf__redis_sub_free(mf_redis_subscriber_t *sub)
{
    if (sub->conn)
        mf__redis_conn_drop(sub->conn);
    mf_free(sub);
}
