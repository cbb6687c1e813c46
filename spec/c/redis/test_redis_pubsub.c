/* Pub/sub on the redis client against a real redis-server
 * (redis_harness.h): messages in order and one end per subscriber,
 * subscribing and unsubscribing channels and patterns, a close from inside
 * the callback, a subscriber that cannot connect or is refused, and a loop
 * destroyed with live subscribers. */
#include "redis_harness.h"

TEST(subscriber_gets_messages_in_order_and_its_end_once)
{
    expect(setup(), "ACL SETUSER alice on >s3cret ~* &* +@all", "+OK");
    mf_redis_client_t *c = setup_with("alice:s3cret", 0, NULL);
    subres_t s = {0};
    const char *chans[] = {"news", "sport"};
    mf_redis_subscriber_t *sub =
        mf_redis_subscribe(c, 2, chans, NULL, false, on_message, &s);
    run_until(&s.confirms, 2); /* subscribed once both are confirmed */
    publish_until(c, &s, 1, "PUBLISH news first");
    expect(c, "PUBLISH sport a; PUBLISH news b; PUBLISH other x",
           ":1 | :1 | :0");
    publish_until(c, &s, 3, "PING");
    const char *pats[] = {"we*"};
    mf_redis_subscriber_update(sub, true, 1, pats, NULL, true);
    run_until(&s.confirms, 3);
    publish_until(c, &s, 4, "PUBLISH weather sunny");
    mf_redis_subscriber_update(sub, false, 1, chans, NULL, false);
    run_until(&s.confirms, 4);
    publish_until(c, &s, 5, "PUBLISH news gone; PUBLISH sport last");
    mf_redis_subscriber_update(sub, false, 0, NULL, NULL, false); /* all */
    run_until(&s.confirms, 5);
    wait_subscribers(c, "sport", 0);
    ASSERT_STR_EQ(s.text, "[$message,$news,$first] [$message,$sport,$a] "
                          "[$message,$news,$b] "
                          "[$pmessage,$we*,$weather,$sunny] "
                          "[$message,$sport,$last]");
    ASSERT_STR_EQ(s.confirmed, "[$subscribe,$news,:1] [$subscribe,$sport,:2] "
                               "[$psubscribe,$we*,:3] [$unsubscribe,$news,:2] "
                               "[$unsubscribe,$sport,:1]");
    mf_redis_subscriber_close(sub);
    ASSERT_EQ(s.ended, 0); /* never inside the call */
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* nothing keeps the loop now */
    ASSERT_EQ(s.ended, 1);
    teardown();
}

static void on_message_close(mf_redis_subscriber_t *sub,
                             const mf_redis_reply_t *msg, int error, void *user)
{
    subres_t *s = user;
    if (msg && is_confirmation(msg))
        return;
    if (msg) {
        mf_redis_subscriber_close(sub); /* from inside: msg stays valid */
        mf_redis_subscriber_close(sub); /* twice: no effect */
        snprintf(s->text, sizeof s->text, "%.*s", (int)msg->elements[2].len,
                 msg->elements[2].str);
        s->messages++;
        return;
    }
    s->ended++;
    s->error = error;
}

TEST(a_subscriber_may_close_from_its_callback)
{
    mf_redis_client_t *c = setup();
    subres_t s = {0};
    const char *chans[] = {"bye"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message_close, &s);
    wait_subscribers(c, "bye", 1);
    publish_until(c, &s, 1, "PUBLISH bye one; PUBLISH bye two");
    run_until(&s.ended, 1);
    ASSERT_EQ(s.messages, 1);
    ASSERT_STR_EQ(s.text, "one");
    ASSERT_EQ(s.error, 0);
    teardown();
}

TEST(a_subscriber_that_cannot_connect_ends_with_the_error)
{
    loop = mf_loop_create();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", mf_test_free_port());
    mf_redis_client_t *c = mf_redis_client(loop, url, NULL, NULL);
    subres_t s = {0};
    const char *chans[] = {"x"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message, &s);
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, MF_ECONNREFUSED);
    teardown();
}

TEST(a_loop_destroyed_with_live_subscribers_and_idle_connections_frees_all)
{
    mf_redis_client_t *c = setup();
    subres_t s = {0};
    const char *chans[] = {"live"};
    mf_redis_subscribe(c, 1, chans, NULL, false, on_message, &s);
    wait_subscribers(c, "live", 1);
    publish_until(c, &s, 1, "PUBLISH live 1");
    expect(c, "BLPOP none 0.01", "*nil"); /* an idle pooled connection */
    teardown();                           /* ASan: nothing leaks */
    ASSERT_EQ(s.ended, 0);                /* no call into a dead loop */
}

TEST(a_refused_subscription_ends_the_subscriber_with_eacces)
{
    mf_redis_client_t *c = setup();
    expect(c, "ACL SETUSER deaf on >pw ~* resetchannels +@all", "+OK");
    mf_redis_client_t *deaf = setup_with("deaf:pw", 0, NULL);
    subres_t s = {0};
    const char *chans[] = {"secret"};
    mf_redis_subscribe(deaf, 1, chans, NULL, false, on_message, &s);
    run_until(&s.ended, 1);
    ASSERT_EQ(s.error, MF_EACCES);
    ASSERT_EQ(s.messages, 0);
    ASSERT(strncmp(s.refusal, "NOPERM ", 7) == 0); /* Redis's reason */
    /* A refused AUTH ends a subscriber the same way, with its reason. */
    mf_redis_client_t *wrong = setup_with("deaf:wrong", 0, NULL);
    subres_t w = {0};
    mf_redis_subscribe(wrong, 1, chans, NULL, false, on_message, &w);
    run_until(&w.ended, 1);
    ASSERT_EQ(w.error, MF_EACCES);
    ASSERT(strncmp(w.refusal, "WRONGPASS ", 10) == 0);
    teardown();
}
