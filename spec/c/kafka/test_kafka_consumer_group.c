/*
 * test_kafka_consumer_group.c — three consumers of one group on one loop
 * share 4 partitions; one closes mid-stream and the others take its
 * partitions over; nothing is lost. A close and every revocation store the
 * offsets of every record handed out and commit them (auto commit), so the
 * next owner starts right after them: with cooperative-sticky nothing is
 * read twice. With eager assignment every member gives its partitions up
 * once the group rebalances, when the coordinator refuses commits
 * (REBALANCE_IN_PROGRESS): what is read twice is at most what was handed
 * out and not known committed (auto.commit.interval.ms 100) at that
 * revocation.
 */
#include "kafka_consumer_util.h"

#define NPARTS 4
#define PHASE 500 /* records per partition per phase */
#define NPHASES 3

typedef struct group {
    mf_loop_t *loop;
    kc_t k[3];
} group_t;

static int group_unique(group_t *g)
{
    int unique = 0;
    for (int i = 0; i < NPARTS * PHASE * NPHASES; i++) {
        int seen = 0;
        for (int c = 0; c < 3; c++)
            seen += g->k[c].seen[i];
        unique += seen > 0;
    }
    return unique;
}

static size_t group_assigned(group_t *g)
{
    return kc_nassigned(&g->k[0]) + kc_nassigned(&g->k[1]) +
           kc_nassigned(&g->k[2]);
}

/* Runs until every one of `unique` values was seen (at most max_s). */
static bool group_run_until(group_t *g, int unique, double max_s)
{
    double end = kh_now() + max_s;
    while (group_unique(g) < unique && kh_now() < end) {
        mf_loop_run(g->loop, MF_RUN_ONCE);
        for (int c = 0; c < 3; c++)
            kc_sample(&g->k[c]);
    }
    return group_unique(g) >= unique;
}

static void produce_phase(const char *topic, int phase)
{
    for (int p = 0; p < NPARTS; p++)
        kc_produce(topic, p, phase * PHASE, PHASE);
}

static void run_group(const char *strategy, bool cooperative)
{
    char topic[64], group[64];
    kh_setup();
    kc_name(topic, sizeof topic, "group");
    kc_name(group, sizeof group, "g");
    kh_topic(topic, NPARTS);
    group_t g = {.loop = mf_loop_create()};
    const char *extra[] = {"partition.assignment.strategy", strategy,
                           "auto.commit.interval.ms", "100", NULL};
    for (int c = 0; c < 3; c++) {
        kc_open(&g.k[c], g.loop, group, topic, NPARTS, PHASE * NPHASES, extra);
        g.k[c].max = 50;
        g.k[c].wait_ms = 100;
        kc_poll_start(&g.k[c]);
    }
    double end = kh_now() + 60;
    while ((group_assigned(&g) != NPARTS || !kc_nassigned(&g.k[0]) ||
            !kc_nassigned(&g.k[1]) || !kc_nassigned(&g.k[2])) &&
           kh_now() < end)
        mf_loop_run(g.loop, MF_RUN_ONCE);
    ASSERT_EQ(group_assigned(&g), NPARTS);

    produce_phase(topic, 0);
    ASSERT(group_run_until(&g, NPARTS * PHASE, 60));
    produce_phase(topic, 1);
    ASSERT(group_run_until(&g, NPARTS * PHASE + 300, 60));
    /* Mid-stream, the member with two partitions leaves. */
    int leaver = 0;
    for (int c = 0; c < 3; c++)
        if (kc_nassigned(&g.k[c]) == 2)
            leaver = c;
    size_t had = kc_nassigned(&g.k[leaver]);
    g.k[leaver].keep = false;
    mf_kafka_consumer_close(g.k[leaver].c, kc_closed_cb, &g.k[leaver]);
    ASSERT(kh_run_until(g.loop, &g.k[leaver].closed, 30));
    g.k[leaver].c = NULL;
    ASSERT(group_run_until(&g, 2 * NPARTS * PHASE, 60));
    end = kh_now() + 60;
    while (group_assigned(&g) != NPARTS && kh_now() < end)
        mf_loop_run(g.loop, MF_RUN_ONCE);
    ASSERT_EQ(group_assigned(&g), NPARTS);
    produce_phase(topic, 2);
    ASSERT(group_run_until(&g, NPHASES * NPARTS * PHASE, 60));
    end = kh_now() + 1; /* nothing more may come */
    while (kh_now() < end)
        mf_loop_run(g.loop, MF_RUN_ONCE);

    int disorder = 0, foreign = 0, failures = 0;
    for (int c = 0; c < 3; c++) {
        disorder += g.k[c].disorder;
        foreign += g.k[c].foreign;
        failures += g.k[c].failures;
    }
    int total = 0, uncommitted = 0;
    for (int c = 0; c < 3; c++) {
        total += g.k[c].unique + g.k[c].dups;
        uncommitted += g.k[c].uncommitted;
    }
    fprintf(stderr,
            "%s: %d records to 3 members (%d, %d, %d), the leaver had %zu "
            "partitions; %d read twice, %d not known committed at "
            "revocations\n",
            strategy, total, g.k[0].unique, g.k[1].unique, g.k[2].unique, had,
            total - NPHASES * NPARTS * PHASE, uncommitted);
    ASSERT_EQ(group_unique(&g), NPHASES * NPARTS * PHASE);
    if (cooperative) {
        ASSERT_EQ(total, NPHASES * NPARTS * PHASE); /* none read twice */
        ASSERT_EQ(disorder, 0);
    }
    ASSERT(total - NPHASES * NPARTS * PHASE <= uncommitted);
    ASSERT_EQ(foreign, 0);
    ASSERT_EQ(failures, 0);
    ASSERT(g.k[leaver].revoked >= 1);
    for (int c = 0; c < 3; c++) {
        if (c == leaver)
            continue;
        ASSERT(g.k[c].assigned >= 2); /* the first share, then more */
        kc_close(&g.k[c]);
    }
    for (int c = 0; c < 3; c++)
        kc_free(&g.k[c]);
    mf_loop_destroy(g.loop);
}

TEST(an_eager_group_shares_partitions_and_takes_over_a_leavers)
{
    run_group("range", false);
}

TEST(a_cooperative_group_shares_partitions_and_takes_over_a_leavers)
{
    run_group("cooperative-sticky", true);
}
