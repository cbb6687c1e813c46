/*
 * test_kafka_admin.c — the metadata task (on the compute pool) and the
 * create-topic task against the mock cluster, and create-topic's success
 * against spec/fixture/kafka_controller.py (the mock has no CreateTopics).
 */
#include <moonflow/pool.h>

#include <signal.h>
#include <sys/wait.h>

#include "kafka_prod.h"

typedef struct {
    bool done;
    int state, error;
    char text[256];
    /* what the metadata said about the asked topic */
    int nbrokers, controller;
    int ntopics, npartitions, leader0, sorted, nreplicas0, topic_err;
    char host0[64];
} admin_t;

static void admin_text(admin_t *a, mf_task_t *t)
{
    a->state = mf_task_state(t);
    a->error = mf_task_error(t);
    const char *text = mf_task_kafka_error(t);
    snprintf(a->text, sizeof a->text, "%s", text ? text : "");
    a->done = true;
}

static const char *asked;

static void metadata_done(mf_task_t *t)
{
    admin_t *a = t->user;
    admin_text(a, t);
    const mf_kafka_metadata_t *md = mf_task_kafka_metadata(t);
    if (!md)
        return;
    a->nbrokers = (int)md->nbrokers;
    a->controller = md->controller_id;
    snprintf(a->host0, sizeof a->host0, "%s", md->brokers[0].host);
    a->ntopics = (int)md->ntopics;
    for (size_t i = 0; i < md->ntopics; i++) {
        const mf_kafka_topic_info_t *ti = &md->topics[i];
        if (strcmp(ti->name, asked) != 0)
            continue;
        a->topic_err = ti->err;
        a->npartitions = (int)ti->npartitions;
        a->leader0 = ti->npartitions ? ti->partitions[0].leader : -1;
        a->nreplicas0 = ti->npartitions ? (int)ti->partitions[0].nreplicas : 0;
        a->sorted = 1;
        for (size_t j = 0; j < ti->npartitions; j++)
            if (ti->partitions[j].id != (int32_t)j)
                a->sorted = 0;
    }
}

static void metadata(mf_loop_t *loop, mf_kafka_t *k, const char *topic,
                     admin_t *a)
{
    memset(a, 0, sizeof *a);
    mf_task_start(
        mf_task_kafka_metadata_create(loop, k, topic, 10000, metadata_done, a));
    ASSERT(kp_run_until(loop, &a->done, 30));
}

static void admin_done(mf_task_t *t)
{
    admin_text(t->user, t);
}

/* replication -1: the cluster's default; timeout_ms 0: the default. */
static void create_topic_within(mf_loop_t *loop, mf_kafka_t *k,
                                const char *name, int parts, int replication,
                                int timeout_ms, admin_t *a)
{
    memset(a, 0, sizeof *a);
    mf_task_start(mf_task_kafka_create_topic_create(
        loop, k, name, parts, replication, timeout_ms, admin_done, a));
    ASSERT(kp_run_until(loop, &a->done, 30));
}

static void create_topic(mf_loop_t *loop, mf_kafka_t *k, const char *name,
                         int parts, int replication, admin_t *a)
{
    memset(a, 0, sizeof *a);
    mf_task_start(mf_task_kafka_create_topic_create(
        loop, k, name, parts, replication, 0, admin_done, a));
    ASSERT(kp_run_until(loop, &a->done, 30));
}

TEST(metadata_lists_brokers_topics_partitions_and_leaders)
{
    asked = kp_topic("md", 5);
    rd_kafka_mock_partition_set_leader(kh_mock, asked, 0, 2);
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(1);
    mf_loop_set_pool(loop, pool);
    mf_kafka_t *k = kp_open(NULL);
    admin_t a;
    metadata(loop, k, NULL, &a); /* every topic */
    ASSERT_EQ(a.state, MF_STATE_SUCCESS);
    ASSERT_EQ(a.nbrokers, KH_BROKERS);
    ASSERT_STR_EQ(a.host0, "127.0.0.1");
    /* Known (not -1); librdkafka's mock cluster answers 0, naming none. */
    ASSERT(a.controller >= 0 && a.controller <= KH_BROKERS);
    ASSERT(a.ntopics >= 1);
    ASSERT_EQ(a.npartitions, 5);
    ASSERT_EQ(a.sorted, 1);
    ASSERT_EQ(a.leader0, 2);
    ASSERT_EQ(a.nreplicas0, KH_BROKERS);
    /* The leader moves: a new snapshot says so. */
    rd_kafka_mock_partition_set_leader(kh_mock, asked, 0, 3);
    metadata(loop, k, asked, &a);
    ASSERT_EQ(a.state, MF_STATE_SUCCESS);
    ASSERT_EQ(a.ntopics, 1);
    ASSERT_EQ(a.leader0, 3);
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
    mf_pool_destroy(pool);
}

TEST(metadata_without_a_compute_pool_fails_with_enopool)
{
    asked = "none";
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    admin_t a;
    metadata(loop, k, NULL, &a);
    ASSERT_EQ(a.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(a.error, MF_ENOPOOL);
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
}

/* librdkafka 2.0.2's mock cluster has no CreateTopics handler and names no
 * controller (metadata says 0): the request waits for a controller until
 * the task's timeout (librdkafka's admin request timeout, socket.timeout.ms
 * without it: 60 s) and fails with librdkafka's words. What this checks:
 * the answer travels from the background queue to the waiting task on its
 * loop, after the task's timeout. */
TEST(create_topic_reports_the_cluster_answer_on_the_loop_within_its_timeout)
{
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = kp_open(NULL);
    admin_t a;
    double start = kh_now();
    create_topic_within(loop, k, kp_topic("created", 0), 3, -1, 1500, &a);
    ASSERT(kh_now() - start > 1.2 && kh_now() - start < 5);
    ASSERT_EQ(a.state, MF_STATE_TIMEOUT);
    ASSERT_EQ(a.error, MF_ETIMEDOUT);
    ASSERT_STR_EQ(a.text, "_TIMED_OUT: Failed while waiting for controller: "
                          "Local: Timed out");
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
}

/* spec/fixture/kafka_controller.py in a child process, once per test
 * binary: a one-broker controller that answers CreateTopics in Kafka's
 * wire format. It exits when its standard input closes: at our exit, even
 * a failed one. */
static char controller_bootstrap[64];
static FILE *controller_out; /* kept: a leak checker sees it reachable */

static const char *controller_start(void)
{
    if (controller_bootstrap[0])
        return controller_bootstrap;
    int to_child[2], from_child[2];
    ASSERT(pipe(to_child) == 0 && pipe(from_child) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        execlp("python3", "python3", MF_SPEC_DIR "/fixture/kafka_controller.py",
               (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    controller_out = fdopen(from_child[0], "r");
    char line[128] = "";
    ASSERT(controller_out && fgets(line, sizeof line, controller_out));
    ASSERT(sscanf(line, "bootstrap %63s", controller_bootstrap) == 1);
    return controller_bootstrap; /* to_child[1] stays open until we exit */
}

static mf_kafka_t *controller_open(void)
{
    /* No idempotence: it needs InitProducerId, which this broker lacks. */
    mf_kafka_prop_t props[] = {{"bootstrap.servers", controller_start()},
                               {"enable.idempotence", "false"}};
    char err[256];
    mf_kafka_t *k = mf_kafka_open(props, 2, err, sizeof err);
    if (!k)
        MF_TEST_FAIL("mf_kafka_open: %s", err);
    return k;
}

TEST(create_topic_succeeds_and_metadata_then_lists_the_topic)
{
    mf_loop_t *loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(1);
    mf_loop_set_pool(loop, pool);
    mf_kafka_t *k = controller_open();
    admin_t a;
    create_topic(loop, k, "made-here", 3, -1, &a);
    ASSERT_EQ(a.state, MF_STATE_SUCCESS);
    ASSERT_EQ(a.error, 0);
    ASSERT_STR_EQ(a.text, "");
    asked = "made-here";
    metadata(loop, k, asked, &a);
    ASSERT_EQ(a.state, MF_STATE_SUCCESS);
    ASSERT_EQ(a.controller, 1);
    ASSERT_EQ(a.topic_err, 0);
    ASSERT_EQ(a.npartitions, 3);
    ASSERT_EQ(a.leader0, 1);
    /* The broker's refusal of the same name is the task's error. */
    create_topic(loop, k, "made-here", 3, -1, &a);
    ASSERT_EQ(a.state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(a.error, MF_EEXIST);
    ASSERT_STR_EQ(a.text,
                  "TOPIC_ALREADY_EXISTS: Topic 'made-here' already exists.");
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
    mf_pool_destroy(pool);
}

TEST(create_topic_reports_a_replication_the_cluster_cannot_hold)
{
    mf_loop_t *loop = mf_loop_create();
    mf_kafka_t *k = controller_open();
    admin_t a;
    create_topic(loop, k, "too-many", 2, 3, &a);
    ASSERT_EQ(a.state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(a.error, MF_EKAFKA);
    ASSERT_STR_EQ(a.text, "INVALID_REPLICATION_FACTOR: Replication factor: 3 "
                          "larger than available brokers: 1.");
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
}

TEST(create_topic_refuses_bad_arguments_in_its_completion)
{
    mf_loop_t *loop = mf_loop_create();
    const char *extra[] = {"socket.timeout.ms", "1500", NULL};
    mf_kafka_t *k = kp_open(extra);
    admin_t a;
    create_topic(loop, k, "bad-parts", -5, -1, &a);
    ASSERT_EQ(a.state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(a.error, MF_EKAFKA);
    ASSERT(strncmp(a.text, "_INVALID_ARG: ", 14) == 0);
    ASSERT(strstr(a.text, "partitions") != NULL);
    mf_kafka_close(k, 1000);
    mf_loop_destroy(loop);
}
