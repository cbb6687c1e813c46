/* The Redis Cluster client against a real cluster: six redis-servers
 * (--cluster-enabled yes) on free loopback ports, made three masters with a
 * replica each by `redis-cli --cluster create`, once for the binary.
 * Routing and hash tags, CROSSSLOT and unknown commands refused before
 * sending, a pipeline over every node with its replies in order, MOVED
 * after a slot migrated by hand (one map refresh for many commands), ASK
 * during a migration, a resharding of 1,000 slots by `redis-cli --cluster
 * reshard` under load with no failed command, reads from replicas, and a
 * master killed (SIGKILL) with every write that WAIT saw replicated
 * readable from its promoted replica. */
#include "redis_harness.h"

/* The client's own slot functions (redis_slot.c, internal). */
int mf__redis_key_slot(const char *key, size_t len);
int mf__redis_cmd_slot(int argc, const char *const *argv, const size_t *lens,
                       bool *readonly);

#define NODES 6

static server_t nodes[NODES];
static bool cluster_up;

static void stop_cluster(void)
{
    for (int i = 0; i < NODES; i++) {
        nodes[i].pid = nodes[i].pid ? nodes[i].pid : -1; /* killed: rm */
        if (nodes[i].pid < 0 && nodes[i].dir[0]) {
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf %s", nodes[i].dir);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", nodes[i].dir);
            continue;
        }
        server_stop(&nodes[i]);
    }
}

/* A free port whose cluster bus port (+10000) is free too. */
static uint16_t free_cluster_port(void)
{
    for (int i = 0; i < 50; i++) {
        uint16_t p = mf_test_free_port();
        if (p < 55000 && !mf_test_port_open((uint16_t)(p + 10000)))
            return p;
    }
    MF_TEST_FAIL("no free port pair");
}

static void node_start(server_t *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/mf-rcluster-XXXXXX");
    ASSERT(mkdtemp(s->dir) != NULL);
    s->port = free_cluster_port();
    char port[16], log[96];
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    char *argv[] = {"redis-server",
                    "--port",
                    port,
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    s->dir,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--loglevel",
                    "warning",
                    "--logfile",
                    log,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ASSERT(posix_spawn(&s->pid, "/usr/bin/redis-server", &fa, NULL, argv,
                       environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 250 && !mf_test_port_open(s->port); i++)
        usleep(20000);
    if (!mf_test_port_open(s->port))
        MF_TEST_FAIL("redis-server did not start");
}

/* The first line of a shell command's output. */
static void shell_line(const char *cmd, char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    ASSERT(f != NULL);
    if (!fgets(out, (int)cap, f))
        out[0] = 0;
    pclose(f);
    out[strcspn(out, "\r\n")] = 0;
}

static void cli(uint16_t port, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "redis-cli -p %u %s >/dev/null 2>&1", port, args);
    ASSERT_EQ(system(cmd), 0);
}

/* Every live node says cluster_state:ok and agrees on the slots. */
static void wait_cluster_ok(void)
{
    char cmd[256], line[256];
    for (int tries = 0; tries < 300; tries++) {
        bool ok = true;
        for (int i = 0; i < NODES && ok; i++) {
            if (!nodes[i].pid)
                continue;
            snprintf(cmd, sizeof cmd,
                     "redis-cli -p %u cluster info | grep cluster_state",
                     nodes[i].port);
            shell_line(cmd, line, sizeof line);
            ok = strcmp(line, "cluster_state:ok") == 0;
        }
        if (ok) {
            snprintf(cmd, sizeof cmd,
                     "redis-cli --cluster check 127.0.0.1:%u 2>&1 | "
                     "grep -c 'All nodes agree'",
                     nodes[0].pid ? nodes[0].port : nodes[1].port);
            shell_line(cmd, line, sizeof line);
            if (strcmp(line, "1") == 0)
                return;
        }
        usleep(50000);
    }
    MF_TEST_FAIL("the cluster never became ok");
}

/* Each master's replica has finished its first sync (WAIT counts it). */
static void wait_replicas_synced(void)
{
    char cmd[256], line[64];
    for (int tries = 0; tries < 200; tries++) {
        int online = 0;
        for (int i = 0; i < NODES; i++) {
            snprintf(cmd, sizeof cmd,
                     "redis-cli -p %u info replication | grep -c "
                     "state=online",
                     nodes[i].port);
            shell_line(cmd, line, sizeof line);
            online += atoi(line);
        }
        if (online == NODES / 2)
            return;
        usleep(50000);
    }
    MF_TEST_FAIL("the replicas never synced");
}

static void cluster_setup(void)
{
    if (cluster_up)
        return;
    if (access("/usr/bin/redis-server", X_OK) != 0 ||
        access("/usr/bin/redis-cli", X_OK) != 0)
        MF_TEST_FAIL("redis-server/redis-cli are not installed");
    signal(SIGPIPE, SIG_IGN);
    atexit(stop_cluster);
    for (int i = 0; i < NODES; i++)
        node_start(&nodes[i]);
    char cmd[1024] = "redis-cli --cluster create";
    for (int i = 0; i < NODES; i++)
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " 127.0.0.1:%u",
                 nodes[i].port);
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd),
             " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1");
    ASSERT_EQ(system(cmd), 0);
    wait_cluster_ok();
    wait_replicas_synced();
    cluster_up = true;
}

static mf_redis_client_t *cluster_client(const char *query)
{
    cluster_setup();
    if (!loop)
        loop = mf_loop_create();
    char url[256];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%u,127.0.0.1:%u/%s",
             nodes[0].port, nodes[1].port, query ? query : "");
    int err = -1;
    mf_redis_client_t *c = mf_redis_cluster_client(loop, url, NULL, &err);
    ASSERT(c != NULL);
    ASSERT_EQ(err, 0);
    return c;
}

static mf_redis_cluster_stats_t stats_of(mf_redis_client_t *c)
{
    mf_redis_cluster_stats_t st;
    ASSERT_EQ(mf_redis_cluster_stats(c, &st), 0);
    return st;
}

/* The master that serves slot (CLUSTER NODES of a live node): its port and
 * id; with other, a different live master's. */
typedef struct master {
    uint16_t port;
    char id[64];
} master_t;

static bool try_find_masters(int slot, master_t *owner, master_t *other)
{
    uint16_t ask = nodes[0].pid ? nodes[0].port : nodes[1].port;
    char cmd[128], line[1024];
    snprintf(cmd, sizeof cmd, "redis-cli -p %u cluster nodes", ask);
    FILE *f = popen(cmd, "r");
    ASSERT(f != NULL);
    owner->port = other->port = 0;
    while (fgets(line, sizeof line, f)) {
        char id[64], addr[128], flags[128];
        if (sscanf(line, "%63s %127s %127s", id, addr, flags) != 3 ||
            !strstr(flags, "master") || strstr(flags, "fail"))
            continue;
        uint16_t port = (uint16_t)atoi(strchr(addr, ':') + 1);
        bool owns = false;
        char *save = NULL;
        int field = 0;
        for (char *w = strtok_r(line, " \n", &save); w;
             w = strtok_r(NULL, " \n", &save)) {
            if (++field < 9 || w[0] == '[')
                continue;
            int from = atoi(w), to = from;
            char *dash = strchr(w, '-');
            if (dash)
                to = atoi(dash + 1);
            owns = owns || (slot >= from && slot <= to);
        }
        master_t *m = owns ? owner : other;
        if (m->port && !owns)
            continue;
        m->port = port;
        snprintf(m->id, sizeof m->id, "%s", id);
    }
    pclose(f);
    return owner->port && other->port;
}

static void find_masters(int slot, master_t *owner, master_t *other)
{
    ASSERT(try_find_masters(slot, owner, other));
}

static void tick_cb(mf_timer_t *timer)
{
    (void)timer;
}

/* Runs the loop for ms (timers fire, nothing else need happen). */
static void run_for(uint64_t ms)
{
    uint64_t end = now_ms() + ms;
    mf_timer_t tick;
    while (now_ms() < end) {
        mf_timer_init(&tick, tick_cb, NULL);
        mf_timer_start(loop, &tick, 10);
        mf_loop_run(loop, MF_RUN_ONCE);
        mf_timer_stop(loop, &tick);
    }
}

static int slot_of(const char *key)
{
    return mf__redis_key_slot(key, strlen(key));
}

/* ---- no cluster ---------------------------------------------------------- */

TEST(malformed_urls_and_dead_seeds)
{
    signal(SIGPIPE, SIG_IGN);
    loop = mf_loop_create();
    const char *bad[] = {"redis://127.0.0.1:1",
                         "redis-cluster://",
                         "redis-cluster://127.0.0.1:1,",
                         "redis-cluster://127.0.0.1:1/3",
                         "redis-cluster://127.0.0.1:1/?read_from=anywhere",
                         "redis-cluster://127.0.0.1:notaport"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(bad); i++) {
        int err = 0;
        ASSERT(mf_redis_cluster_client(loop, bad[i], NULL, &err) == NULL);
        ASSERT_EQ(err, MF_EINVAL);
    }
    int err = -1;
    mf_redis_client_t *single =
        mf_redis_client(loop, "redis://127.0.0.1:1", NULL, &err);
    mf_redis_cluster_stats_t st;
    ASSERT_EQ(mf_redis_cluster_stats(single, &st), MF_EINVAL);
    /* Seeds that refuse: the tasks waiting for the map fail, every one. */
    char url[96];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%u,127.0.0.1:%u",
             mf_test_free_port(), mf_test_free_port());
    mf_redis_client_t *c = mf_redis_cluster_client(loop, url, NULL, &err);
    ASSERT(c != NULL);
    ASSERT(c == mf_redis_cluster_client(loop, url, NULL, &err));
    result_t r1 = {0}, r2 = {0};
    mf_task_start(task_of(c, &r1, "GET a"));
    mf_task_start(task_of(c, &r2, "SET b 1; GET c"));
    run_until(&r1.done, 1);
    run_until(&r2.done, 1);
    EXPECT_STATE(r1, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    EXPECT_STATE(r2, MF_STATE_SYS_ERROR, MF_ECONNREFUSED);
    ASSERT_EQ(r2.n, 0);
    ASSERT_EQ(stats_of(c).mapped, false);
    teardown();
}

/* ---- routing ------------------------------------------------------------- */

TEST(commands_go_to_the_owner_of_their_slot)
{
    mf_redis_client_t *c = cluster_client(NULL);
    /* Our slots are Redis's (hash tags included). */
    const char *keys[] = {"a",    "foo",   "{user1}.a", "{user1}.b",
                          "x{}y", "{}{z}", "{a}{b}",    "123456789"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(keys); i++) {
        char line[128], want[32];
        snprintf(line, sizeof line, "CLUSTER KEYSLOT %s", keys[i]);
        snprintf(want, sizeof want, ":%d", slot_of(keys[i]));
        expect(c, line, want);
    }
    ASSERT_EQ(slot_of("123456789"), 0x31C3 & 16383); /* CRC16 check value */
    ASSERT_EQ(slot_of("{user1}.a"), slot_of("{user1}.b"));
    /* Keys of every node; the servers would answer MOVED to a wrong one,
     * and the map was read once. */
    for (int i = 0; i < 60; i++) {
        char line[128], want[32];
        snprintf(line, sizeof line, "SET key%d v%d; GET key%d", i, i, i);
        snprintf(want, sizeof want, "+OK | $v%d", i);
        expect(c, line, want);
    }
    expect(c, "MSET {user1}.a 1 {user1}.b 2; MGET {user1}.a {user1}.b",
           "+OK | [$1,$2]");
    mf_redis_cluster_stats_t st = stats_of(c);
    ASSERT_EQ(st.moved, 0);
    ASSERT_EQ(st.asks, 0);
    ASSERT_EQ(st.refreshes, 1);
    ASSERT(st.mapped);
    ASSERT_EQ(st.nodes, NODES); /* two seeds, the rest from the map */
    /* One shared connection per master (and none to a replica). */
    ASSERT_EQ(mf_redis_client_connects(c), 3);
    teardown();
}

/* A command's slot as the server's COMMAND GETKEYS sees its keys: the
 * slot of them all, -1 with none, -2 when they span slots. */
static int server_slot(mf_redis_client_t *c, const char *cmd)
{
    char line[256];
    snprintf(line, sizeof line, "COMMAND GETKEYS %s", cmd);
    result_t r;
    run(c, &r, line);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    if (r.errors) /* "ERR The command has no key arguments" */
        return -1;
    /* "[$k1,$k2]" */
    int slot = -1;
    char *save = NULL;
    for (char *k = strtok_r(r.text + 1, ",]", &save); k;
         k = strtok_r(NULL, ",]", &save)) {
        int s = slot_of(k + 1); /* past the '$' */
        slot = slot == -1 || slot == s ? s : -2;
    }
    return slot;
}

/* The key table against Redis's own COMMAND GETKEYS (SPUBLISH's channel,
 * routed like a key, is no key there: the pub/sub test covers it). */
TEST(key_positions_agree_with_the_server)
{
    mf_redis_client_t *c = cluster_client(NULL);
    const char *cmds[] = {
        "GET a",
        "SET a 1 EX 10",
        "MGET a b c",
        "MGET {t}a {t}b",
        "MSET a 1 b 2",
        "MSET {t}a 1 {t}b 2",
        "DEL a",
        "EXISTS {t}a {t}b",
        "RENAME {t}a {t}b",
        "LMOVE a b LEFT RIGHT",
        "BLPOP {t}a {t}b 0",
        "BZPOPMIN a b 1",
        "EVAL x 2 {t}a {t}b arg",
        "EVAL x 0 arg",
        "EVALSHA x 1 a b",
        "FCALL f 1 a b",
        "ZUNIONSTORE {t}d 2 {t}a {t}b WEIGHTS 1 2",
        "ZUNIONSTORE d 2 {t}a {t}b",
        "ZINTER 2 a b",
        "LMPOP 2 {t}a {t}b LEFT",
        "BLMPOP 1 2 a b LEFT",
        "SINTERCARD 2 {t}a {t}b",
        "XREAD COUNT 2 STREAMS {t}a {t}b 0 0",
        "XREAD STREAMS a b 0 0",
        "XREADGROUP GROUP g c STREAMS a 0",
        "XADD s * f v",
        "HSET h f v",
        "SMOVE a b m",
        "PFCOUNT {t}a {t}b",
        "GEOSEARCHSTORE {t}d {t}s FROMLONLAT 0 0 BYRADIUS 1 km",
        "OBJECT ENCODING a",
        "MEMORY USAGE a",
        "PING",
        "PUBLISH ch m",
    };
    for (size_t i = 0; i < MF_ARRAY_SIZE(cmds); i++) {
        const char *argv[32];
        char copy[256];
        snprintf(copy, sizeof copy, "%s", cmds[i]);
        int argc = 0;
        char *save = NULL;
        for (char *w = strtok_r(copy, " ", &save); w && argc < 32;
             w = strtok_r(NULL, " ", &save))
            argv[argc++] = w;
        bool ro;
        int ours = mf__redis_cmd_slot(argc, argv, NULL, &ro);
        int theirs = server_slot(c, cmds[i]);
        if (ours != theirs)
            MF_TEST_FAIL("%s: slot %d, the server's keys give %d", cmds[i],
                         ours, theirs);
    }
    teardown();
}

TEST(cross_slot_and_unknown_commands_are_refused_before_sending)
{
    mf_redis_client_t *c = cluster_client(NULL);
    ASSERT(slot_of("a") != slot_of("b"));
    expect(c, "SET a 1; MGET a b; GET a; NOSUCHCMD a; DEL {t}x {t}y",
           "+OK | -CROSSSLOT Keys in request don't hash to the same slot "
           "(refused by the cluster client) | $1 | -ERR the cluster client "
           "does not know where this command's keys are: not sent | :0");
    result_t r;
    run(c, &r, "MGET a b");
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.errors, 1);
    /* A transaction with a refused command is refused whole. */
    expect(c, "MULTI; SET {t}x 1; MGET a b; EXEC",
           "-ERR not sent: another command of the task was refused | -ERR "
           "not sent: another command of the task was refused | "
           "-CROSSSLOT Keys in request don't hash to the same slot (refused "
           "by the cluster client) | -ERR not sent: another command of the "
           "task was refused");
    /* One in one slot runs on that slot's node. */
    expect(c, "MULTI; SET {t}x 1; INCR {t}y; EXEC",
           "+OK | +QUEUED | +QUEUED | [+OK,:1]");
    teardown();
}

TEST(a_pipeline_over_every_node_keeps_its_order)
{
    mf_redis_client_t *c = cluster_client(NULL);
    char line[1024] = "", want[2048] = "";
    for (int i = 0; i < 24; i++) {
        snprintf(line + strlen(line), sizeof line - strlen(line),
                 "%sSET p%d %d; GET p%d", i ? "; " : "", i, i * 7, i);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s+OK | $%d",
                 i ? " | " : "", i * 7);
    }
    expect(c, line, want);
    /* Concurrent tasks too: each gets its own replies. */
    result_t rs[40];
    memset(rs, 0, sizeof rs);
    int done = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(line, sizeof line, "GET p%d; PING; GET p%d", i % 24,
                 (i + 5) % 24);
        mf_task_start(task_of(c, &rs[i], line));
    }
    for (int i = 0; i < 40; i++) {
        run_until(&rs[i].done, 1);
        char w[64];
        snprintf(w, sizeof w, "$%d | +PONG | $%d", (i % 24) * 7,
                 ((i + 5) % 24) * 7);
        ASSERT_STR_EQ(rs[i].text, w);
        done++;
    }
    ASSERT_EQ(done, 40);
    teardown();
}

typedef struct batching {
    uint64_t writes, commands;
} batching_t;

static void sum_stats(void *ud, const mf_redis_client_stats_t *st)
{
    batching_t *b = ud;
    b->writes += st->writes;
    b->commands += st->commands;
}

static batching_t batching_now(void)
{
    batching_t b = {0, 0};
    mf_redis_clients_stats(loop, sum_stats, &b);
    return b;
}

TEST(concurrent_commands_share_one_write_per_node)
{
    mf_redis_client_t *c = cluster_client(NULL);
    expect(c, "SET b0 x", "+OK"); /* the map, and each node's connection */
    for (int i = 0; i < 3; i++)
        expect(c, "GET b0; GET b1; GET b2; GET b3; GET b4; GET b5",
               "$x | nil | nil | nil | nil | nil");
    batching_t before = batching_now();
    result_t rs[90];
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < 90; i++) {
        char line[32];
        snprintf(line, sizeof line, "GET b%d", i % 6);
        mf_task_start(task_of(c, &rs[i], line));
    }
    for (int i = 0; i < 90; i++)
        run_until(&rs[i].done, 1);
    batching_t after = batching_now();
    ASSERT_EQ(after.commands - before.commands, 90);
    /* One write per node that holds one of the six keys (b0..b5 hash to
     * every master here), not one per command. */
    ASSERT(after.writes - before.writes <= 3);
    teardown();
}

/* ---- redirections -------------------------------------------------------- */

static void setslot_everywhere(int slot, const char *id)
{
    char args[160];
    snprintf(args, sizeof args, "cluster setslot %d node %s", slot, id);
    for (int i = 0; i < NODES; i++)
        if (nodes[i].pid)
            cli(nodes[i].port, args);
}

TEST(moved_after_a_migration_refreshes_the_map_once)
{
    mf_redis_client_t *c = cluster_client(NULL);
    expect(c, "SET {mv}k hello", "+OK");
    mf_redis_cluster_stats_t before = stats_of(c);
    int slot = slot_of("{mv}k");
    master_t src, dst;
    find_masters(slot, &src, &dst);
    char args[256];
    snprintf(args, sizeof args, "cluster setslot %d importing %s", slot,
             src.id);
    cli(dst.port, args);
    snprintf(args, sizeof args, "cluster setslot %d migrating %s", slot,
             dst.id);
    cli(src.port, args);
    snprintf(args, sizeof args, "migrate 127.0.0.1 %u \"\" 0 5000 keys {mv}k",
             dst.port);
    cli(src.port, args);
    setslot_everywhere(slot, dst.id);
    /* 50 commands of the moved slot at once: all answered MOVED, one
     * refresh. */
    result_t rs[50];
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < 50; i++)
        mf_task_start(task_of(c, &rs[i], "GET {mv}k"));
    for (int i = 0; i < 50; i++) {
        run_until(&rs[i].done, 1);
        ASSERT_STR_EQ(rs[i].text, "$hello");
    }
    run_for(300); /* a refresh may be put off by 100 ms */
    mf_redis_cluster_stats_t after = stats_of(c);
    ASSERT(after.moved - before.moved >= 1);
    ASSERT_EQ(after.refreshes - before.refreshes, 1);
    /* The next ones go straight to the new owner. */
    expect(c, "GET {mv}k", "$hello");
    ASSERT_EQ(stats_of(c).moved, after.moved);
    teardown();
}

TEST(ask_during_a_migration_is_followed_with_asking)
{
    mf_redis_client_t *c = cluster_client(NULL);
    int slot = slot_of("{ask}k");
    master_t src, dst;
    find_masters(slot, &src, &dst);
    char args[256];
    snprintf(args, sizeof args, "cluster setslot %d importing %s", slot,
             src.id);
    cli(dst.port, args);
    snprintf(args, sizeof args, "cluster setslot %d migrating %s", slot,
             dst.id);
    cli(src.port, args);
    /* A new key of a migrating slot: the source answers ASK; the target
     * takes it after ASKING only. */
    uint64_t asks = stats_of(c).asks;
    expect(c, "SET {ask}k there; GET {ask}k", "+OK | $there");
    ASSERT(stats_of(c).asks - asks >= 2);
    ASSERT_EQ(stats_of(c).moved, 0);
    setslot_everywhere(slot, dst.id);
    expect(c, "GET {ask}k", "$there"); /* now MOVED */
    teardown();
}

/* ---- resharding under load ----------------------------------------------- */

typedef struct load {
    mf_redis_client_t *c;
    int issued, done, failed, inflight;
    char failure[512];
} load_t;

static void load_next(load_t *l);

static void load_done(mf_task_t *t)
{
    load_t *l = t->user;
    l->done++;
    l->inflight--;
    const mf_redis_reply_t *get = mf_task_redis_reply(t, 1);
    if (mf_task_state(t) == MF_STATE_SUCCESS && get &&
        !mf_task_redis_error_replies(t) && get->type == MF_REDIS_STRING &&
        get->len >= 2 && get->str[0] == 'v')
        return;
    if (l->failed++)
        return;
    result_t r = {0};
    for (size_t i = 0; i < mf_task_redis_nreplies(t); i++) {
        put(&r, " ", 1);
        render(&r, mf_task_redis_reply(t, i));
    }
    snprintf(l->failure, sizeof l->failure, "%s %s:%.400s",
             mf_state_name(mf_task_state(t)), mf_err_name(mf_task_error(t)),
             r.text);
}

static void load_next(load_t *l)
{
    char key[32], val[32];
    int i = l->issued++;
    snprintf(key, sizeof key, "load:%d", i % 5000);
    snprintf(val, sizeof val, "v%d", i);
    mf_task_t *t = mf_task_redis_create(l->c, load_done, l);
    mf_task_redis_add_command(t, 3, (const char *[]){"SET", key, val}, NULL);
    mf_task_redis_add_command(t, 2, (const char *[]){"GET", key}, NULL);
    l->inflight++;
    mf_task_start(t);
}

TEST(a_resharding_of_1000_slots_under_load_fails_no_command)
{
    mf_redis_client_t *c = cluster_client(NULL);
    load_t l = {.c = c};
    while (l.issued < 5000) { /* every key exists before the move */
        while (l.inflight < 64 && l.issued < 5000)
            load_next(&l);
        mf_loop_run(loop, MF_RUN_ONCE);
    }
    master_t from, to;
    find_masters(slot_of("load:0"), &from, &to);
    char ports[16], fromid[64], toid[64];
    snprintf(ports, sizeof ports, "127.0.0.1:%u", nodes[0].port);
    snprintf(fromid, sizeof fromid, "%s", from.id);
    snprintf(toid, sizeof toid, "%s", to.id);
    char *argv[] = {"redis-cli",       "--cluster", "reshard",       ports,
                    "--cluster-from",  fromid,      "--cluster-to",  toid,
                    "--cluster-slots", "1000",      "--cluster-yes", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    ASSERT(posix_spawn(&pid, "/usr/bin/redis-cli", &fa, NULL, argv, environ) ==
           0);
    posix_spawn_file_actions_destroy(&fa);
    mf_redis_cluster_stats_t before = stats_of(c);
    uint64_t start = now_ms(), end = start + 60000;
    int status = -1;
    bool resharding = true;
    /* Load until the resharding is over: at most 64 tasks in flight and
     * 30,000 a second (bounded: 60 s). */
    while (now_ms() < end && (resharding || l.inflight)) {
        uint64_t allowed = 5000 + (now_ms() - start) * 30;
        while (resharding && l.inflight < 64 && (uint64_t)l.issued < allowed)
            load_next(&l);
        if (l.inflight)
            mf_loop_run(loop, MF_RUN_ONCE);
        else
            usleep(1000);
        if (resharding && waitpid(pid, &status, WNOHANG) == pid)
            resharding = false;
    }
    uint64_t took = now_ms() - start;
    if (resharding) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        MF_TEST_FAIL("the resharding did not end in 60 s");
    }
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(l.inflight, 0);
    if (l.failed)
        MF_TEST_FAIL("%d of %d failed; first: %s", l.failed, l.done, l.failure);
    mf_redis_cluster_stats_t after = stats_of(c);
    printf("resharding: %llu ms, %d tasks (SET+GET) during it, %llu MOVED, "
           "%llu ASK, %llu refreshes\n",
           (unsigned long long)took, l.done - 5000,
           (unsigned long long)(after.moved - before.moved),
           (unsigned long long)(after.asks - before.asks),
           (unsigned long long)(after.refreshes - before.refreshes));
    ASSERT(after.moved - before.moved >= 1); /* the load met the move */
    ASSERT(l.done - 5000 >= 1000);
    wait_cluster_ok();
    teardown();
}

/* ---- replicas and failover ----------------------------------------------- */

TEST(read_from_replica_reads_on_replicas)
{
    /* A replica that has replicated nothing yet is "loading" in the map:
     * not read from. */
    mf_redis_client_t *w = cluster_client(NULL);
    const char *keys[] = {"{r}k", "a", "b", "c", "foo", "bar"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(keys); i++) {
        char set[64];
        snprintf(set, sizeof set, "SET %s 1; WAIT 1 2000", keys[i]);
        expect(w, set, "+OK | :1");
    }
    char cmd[256], line[256];
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %u cluster shards | grep -c loading", nodes[0].port);
    for (int i = 0; i < 100; i++) {
        shell_line(cmd, line, sizeof line);
        if (strcmp(line, "0") == 0)
            break;
        usleep(50000);
    }
    mf_redis_client_t *c = cluster_client("?read_from=replica");
    for (int i = 0; i < 10; i++)
        expect(c, "GET {r}k", "$1");
    /* The reads reached the replica (over a connection that sent
     * READONLY), not the master. */
    master_t owner, other;
    find_masters(slot_of("{r}k"), &owner, &other);
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %u cluster nodes | grep slave | grep %s | "
             "cut -d' ' -f2 | cut -d: -f2 | cut -d@ -f1",
             owner.port, owner.id);
    shell_line(cmd, line, sizeof line);
    uint16_t replica = (uint16_t)atoi(line);
    ASSERT(replica != 0);
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %u info commandstats | grep cmdstat_get: | "
             "sed 's/^[^=]*=\\([0-9]*\\).*/\\1/'",
             replica);
    shell_line(cmd, line, sizeof line);
    ASSERT_EQ(atoi(line), 10);
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %u info commandstats | grep -c cmdstat_readonly",
             replica);
    shell_line(cmd, line, sizeof line);
    ASSERT_STR_EQ(line, "1");
    expect(c, "INCR {r}n", ":1"); /* writes still go to the master */
    teardown();
}

TEST(pub_sub_and_sharded_pub_sub_reach_their_subscribers)
{
    mf_redis_client_t *c = cluster_client(NULL);
    expect(c, "SET {sp}x 1", "+OK"); /* the map is known */
    subres_t s = {0}, ss = {0};
    mf_redis_subscriber_t *sub = mf_redis_subscribe(
        c, 1, (const char *[]){"plain"}, NULL, false, on_message, &s);
    mf_redis_subscriber_t *ssub = mf_redis_ssubscribe(
        c, 1, (const char *[]){"{sp}ch"}, NULL, on_message, &ss);
    run_until(&s.confirms, 1);
    run_until(&ss.confirms, 1);
    ASSERT_STR_EQ(s.confirmed, "[$subscribe,$plain,:1]");
    ASSERT_STR_EQ(ss.confirmed, "[$ssubscribe,${sp}ch,:1]");
    /* PUBLISH goes to one master or another: the cluster carries it to
     * every node. SPUBLISH goes to the channel's node, where the sharded
     * subscriber is. */
    for (int i = 0; i < 3; i++) {
        result_t r;
        run(c, &r, "PUBLISH plain hi");
        ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    }
    expect(c, "SPUBLISH {sp}ch hello", ":1");
    run_until(&s.messages, 3);
    run_until(&ss.messages, 1);
    ASSERT_STR_EQ(s.text, "[$message,$plain,$hi] [$message,$plain,$hi] "
                          "[$message,$plain,$hi]");
    ASSERT_STR_EQ(ss.text, "[$smessage,${sp}ch,$hello]");
    mf_redis_subscriber_close(sub);
    mf_redis_subscriber_close(ssub);
    run_until(&s.ended, 1);
    run_until(&ss.ended, 1);
    teardown();
}

TEST(a_killed_master_s_replicated_writes_survive_its_failover)
{
    mf_redis_client_t *c = cluster_client(NULL);
    master_t victim, other;
    find_masters(slot_of("{fo}0"), &victim, &other);
    /* Written and acknowledged: WAIT 1 says a replica has it. */
    enum { N = 200 };
    result_t rs[N];
    memset(rs, 0, sizeof rs);
    char line[128];
    for (int i = 0; i < N; i++) {
        snprintf(line, sizeof line, "SET {fo}k%d w%d; WAIT 1 2000", i, i);
        mf_task_start(task_of(c, &rs[i], line));
    }
    for (int i = 0; i < N; i++) {
        run_until(&rs[i].done, 1);
        ASSERT_STR_EQ(rs[i].text, "+OK | :1");
    }
    /* A second client whose map is read now, for a pipeline over every
     * node after the promotion. */
    mf_redis_client_t *c2 = cluster_client("?read_from=master");
    expect(c2, "SET a 1; WAIT 1 2000", "+OK | :1");
    expect(c2, "SET b 1; WAIT 1 2000", "+OK | :1");
    expect(c2, "SET c 1; WAIT 1 2000", "+OK | :1");
    for (int i = 0; i < NODES; i++)
        if (nodes[i].port == victim.port) {
            kill(nodes[i].pid, SIGKILL);
            waitpid(nodes[i].pid, NULL, 0);
            nodes[i].pid = 0;
        }
    run_for(200); /* the client sees its connection to it close */
    /* The replica takes over (cluster-node-timeout 1 s, then its election). */
    master_t now = {0}, other2;
    uint64_t end = now_ms() + 20000;
    while (now_ms() < end) {
        if (try_find_masters(slot_of("{fo}0"), &now, &other2) &&
            now.port != victim.port)
            break;
        now.port = 0;
        usleep(100000);
    }
    ASSERT(now.port != 0);
    /* Every acknowledged write is read back, with no failed read: the
     * client's map still names the dead master, whose refused connection
     * makes it read the map again and send the unsent GETs to the new one. */
    uint64_t refreshes = stats_of(c).refreshes;
    for (int i = 0; i < N; i += 20) {
        result_t rd[20];
        memset(rd, 0, sizeof rd);
        for (int k = 0; k < 20; k++) {
            snprintf(line, sizeof line, "GET {fo}k%d", i + k);
            mf_task_start(task_of(c, &rd[k], line));
        }
        for (int k = 0; k < 20; k++) {
            run_until(&rd[k].done, 1);
            char want[32];
            snprintf(want, sizeof want, "$w%d", i + k);
            if (rd[k].state != MF_STATE_SUCCESS || strcmp(rd[k].text, want))
                MF_TEST_FAIL("GET {fo}k%d: %s %s %s", i + k,
                             mf_state_name(rd[k].state),
                             mf_err_name(rd[k].error), rd[k].text);
        }
    }
    ASSERT(stats_of(c).refreshes > refreshes);
    /* Split over nodes, the part bound for the dead master is routed again
     * on the new map; the replies keep their order. */
    expect(c2, "GET {fo}k1; GET a; GET {fo}k2; GET b; GET c; GET {fo}k3",
           "$w1 | $1 | $w2 | $1 | $1 | $w3");
    teardown();
}
