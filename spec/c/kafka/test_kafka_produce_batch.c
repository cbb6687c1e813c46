/*
 * test_kafka_produce_batch.c — the batch produce task against the mock
 * cluster: every message's outcome in the messages' order, a refused
 * message beside delivered ones, the same copy of keys and headers as the
 * single task, an empty batch, a canceled batch whose reports come later,
 * and no allocation of ours per message once warm.
 */
#include "kafka_prod.h"

typedef struct {
    bool done;
    int state;
    size_t n;
    mf_kafka_delivery_t out[4096];
} batch_t;

static void batch_done(mf_task_t *t)
{
    batch_t *b = t->user;
    size_t n = 0;
    const mf_kafka_delivery_t *d = mf_task_kafka_deliveries(t, &n);
    b->state = mf_task_state(t);
    b->n = n;
    if (n <= MF_ARRAY_SIZE(b->out) && n)
        memcpy(b->out, d, n * sizeof *d);
    b->done = true;
}

/* n messages of kp_value(id) with keys "k<id>", to partition id % nparts,
 * and the memory they point to. */
typedef struct {
    mf_kafka_message_t *ms;
    char *vals;       /* n * KP_VALUE_LEN */
    char (*keys)[16]; /* n */
} msgs_t;

static msgs_t msgs_new(int n)
{
    return (msgs_t){calloc((size_t)n, sizeof(mf_kafka_message_t)),
                    malloc((size_t)n * KP_VALUE_LEN), calloc((size_t)n, 16)};
}

static void msgs_free(msgs_t *m)
{
    free(m->ms);
    free(m->vals);
    free(m->keys);
}

/* Fills m with ids first..first+n-1. */
static void fill(msgs_t *m, int n, int first, const char *topic, int nparts)
{
    for (int i = 0; i < n; i++) {
        int id = first + i;
        char *v = m->vals + (size_t)i * KP_VALUE_LEN;
        int kl = snprintf(m->keys[i], 16, "k%d", id);
        m->ms[i] = (mf_kafka_message_t){.topic = topic,
                                        .partition = id % nparts,
                                        .key = m->keys[i],
                                        .key_len = (size_t)kl,
                                        .value = v,
                                        .value_len = kp_value(v, id)};
    }
}

static void run_batch(mf_loop_t *loop, mf_kafka_t *k,
                      const mf_kafka_message_t *ms, size_t n, batch_t *b)
{
    b->done = false;
    mf_task_start(
        mf_task_kafka_produce_batch_create(loop, k, ms, n, batch_done, b));
    ASSERT(kp_run_until(loop, &b->done, 60));
}

TEST(a_batch_reports_every_message_in_order_and_they_land_in_order)
{
    enum { N = 3000, PARTS = 3 };
    const char *topic = kp_topic("batch", PARTS);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    msgs_t m = msgs_new(N);
    fill(&m, N, 0, topic, PARTS);
    batch_t *b = calloc(1, sizeof *b);
    run_batch(loop, k, m.ms, N, b);
    memset(m.vals, 0, (size_t)N * KP_VALUE_LEN); /* the task had its copy */
    ASSERT_EQ(b->state, MF_STATE_SUCCESS);
    ASSERT_EQ(b->n, N);
    ASSERT_EQ(mf_kafka_in_flight(k), 0);
    int64_t next[PARTS] = {0};
    for (int id = 0; id < N; id++) {
        ASSERT_EQ(b->out[id].err, 0);
        ASSERT_EQ(b->out[id].partition, id % PARTS);
        ASSERT_EQ(b->out[id].offset, next[id % PARTS]++);
    }
    kp_check_read_back(topic, N, PARTS);
    free(b);
    msgs_free(&m);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* A message librdkafka refuses (an unknown partition) gets its error; the
 * others of the batch are delivered, with headers copied as the single
 * task copies them. */
TEST(a_refused_message_fails_alone_and_headers_travel)
{
    const char *topic = kp_topic("batch-mixed", 2);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    mf_kafka_header_t hs[] = {{"x", "1", 1}, {"x", NULL, 0}, {"y", "22", 2}};
    mf_kafka_message_t ms[] = {
        {.topic = topic, .partition = 0, .value = "a", .value_len = 1},
        {.topic = topic, .partition = 7, .value = "b", .value_len = 1},
        {.topic = topic,
         .partition = 1,
         .key = "",
         .key_len = 0,
         .headers = hs,
         .nheaders = 3},
        {.topic = topic, .partition = 0, .value = "c", .value_len = 1}};
    batch_t *b = calloc(1, sizeof *b);
    run_batch(loop, k, ms, 4, b);
    ASSERT_EQ(b->state, MF_STATE_SUCCESS);
    ASSERT_EQ(b->n, 4);
    ASSERT_EQ(b->out[0].err, 0);
    ASSERT_EQ(b->out[0].offset, 0);
    ASSERT_EQ(b->out[1].err, RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION);
    ASSERT_EQ(b->out[1].offset, -1);
    ASSERT_EQ(b->out[2].err, 0);
    ASSERT_EQ(b->out[2].partition, 1);
    ASSERT_EQ(b->out[2].offset, 0);
    ASSERT_EQ(b->out[3].offset, 1);
    char text[256];
    mf_kafka_error_text(b->out[1].err, text, sizeof text);
    ASSERT_STR_EQ(text, "_UNKNOWN_PARTITION: Local: Unknown partition");
    ASSERT_EQ(mf_kafka_in_flight(k), 0);
    free(b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

TEST(an_empty_batch_succeeds_at_once)
{
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    batch_t *b = calloc(1, sizeof *b);
    run_batch(loop, k, NULL, 0, b);
    ASSERT_EQ(b->state, MF_STATE_SUCCESS);
    ASSERT_EQ(b->n, 0);
    free(b);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* Canceled once dispatched: completes at once; the reports that come
 * later are dropped, and the loop and the handle close cleanly. */
TEST(a_canceled_batch_completes_at_once_and_drops_its_reports)
{
    enum { N = 200 };
    const char *topic = kp_topic("batch-cancel", 2);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    msgs_t m = msgs_new(N);
    fill(&m, N, 0, topic, 2);
    batch_t *b = calloc(1, sizeof *b);
    mf_task_t *t =
        mf_task_kafka_produce_batch_create(loop, k, m.ms, N, batch_done, b);
    mf_task_start(t);
    mf_task_cancel(t);
    ASSERT(kp_run_until(loop, &b->done, 10));
    ASSERT_EQ(b->state, MF_STATE_CANCELED);
    for (int i = 0; i < 100 && mf_kafka_in_flight(k) > 0; i++)
        kp_run_for(loop, 0.1);
    ASSERT_EQ(mf_kafka_in_flight(k), 0); /* delivered, reports dropped */
    kp_run_for(loop, 0.2);
    free(b);
    msgs_free(&m);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}

/* The batch and its reports come from loop memory and the mailbox's free
 * list: once warm, nothing of ours is allocated per message; a batch's
 * block above MF_LOOP_ALLOC_MAX (this one: about 110 KB) is the loop
 * allocator's one malloc per batch. */
TEST(steady_state_batches_allocate_one_block_per_batch_at_most)
{
    enum { N = 500, ROUNDS = 20 };
    const char *topic = kp_topic("batch-alloc", 2);
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    msgs_t m = msgs_new(N);
    batch_t *b = calloc(1, sizeof *b);
    uint64_t before = 0;
    for (int round = 0; round < ROUNDS + 2; round++) {
        if (round == 2)
            before = mf_alloc_count();
        fill(&m, N, round * N, topic, 2);
        run_batch(loop, k, m.ms, N, b);
        ASSERT_EQ(b->state, MF_STATE_SUCCESS);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(b->out[i].err, 0);
    }
    uint64_t allocs = mf_alloc_count() - before;
    printf("# %llu allocations of ours for %d messages in batches of %d\n",
           (unsigned long long)allocs, ROUNDS * N, N);
    ASSERT(allocs <= ROUNDS);
    free(b);
    msgs_free(&m);
    mf_kafka_close(k, 5000);
    mf_loop_destroy(loop);
}
