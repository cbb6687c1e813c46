/* The listeners of one address for one process (moonflow/listen.h): the
 * address lock, the port check, and the handover of the very same sockets
 * to a taker, here in one process (a thread plays the old server). */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moonflow/error.h"
#include "moonflow/listen.h"
#include "test.h"
#include "test_port.h"

static mf_listen_t *open_listen(uint16_t port, unsigned count, bool take_over,
                                int *err)
{
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    mf_listen_opts_t o = {
        .address = addr, .count = count, .backlog = 16, .take_over = take_over};
    *err = 0;
    return mf_listen_open(&o, err);
}

static bool same_socket(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
           sa.st_dev == sb.st_dev;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    return ntohs(a.sin_port);
}

/* A client connection to port is accepted on one of l's listeners within
 * a second. */
static bool accepts(mf_listen_t *l, uint16_t port)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(c, (struct sockaddr *)&a, sizeof a) == 0;
    struct pollfd p[16];
    unsigned n = mf_listen_count(l) < 16 ? mf_listen_count(l) : 16;
    for (unsigned i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = mf_listen_fd(l, i), .events = POLLIN};
    ok = ok && poll(p, n, 1000) > 0;
    for (unsigned i = 0; ok && i < n; i++) {
        int s = p[i].revents ? accept(p[i].fd, NULL, NULL) : -1;
        if (s >= 0)
            close(s);
    }
    close(c);
    return ok;
}

/* The old server's side, on a thread: one wait for a handover. */
typedef struct giver {
    mf_listen_t *l;
    int cancel_fd;
    pthread_t thread;
    int rc;
    pid_t to;
} giver_t;

static void *giver_run(void *arg)
{
    giver_t *g = arg;
    g->rc = mf_listen_wait_handover(g->l, g->cancel_fd, &g->to);
    return NULL;
}

static void giver_start(giver_t *g, mf_listen_t *l)
{
    g->l = l;
    g->cancel_fd = eventfd(0, EFD_CLOEXEC);
    g->rc = 99;
    ASSERT(g->cancel_fd >= 0);
    ASSERT_EQ(pthread_create(&g->thread, NULL, giver_run, g), 0);
}

static int giver_join(giver_t *g)
{
    pthread_join(g->thread, NULL);
    close(g->cancel_fd);
    return g->rc;
}

/* Asks for the listeners of `from` (on port), served by a thread. */
static mf_listen_t *take_over(mf_listen_t *from, giver_t *g, uint16_t port,
                              unsigned count)
{
    int err;
    giver_start(g, from);
    mf_listen_t *l = open_listen(port, count, true, &err);
    if (!l)
        MF_TEST_FAIL("takeover: %s", mf_strerror(err));
    return l;
}

/* The taker serves: it confirms, the giver learns it, the old set goes. */
static void complete(mf_listen_t *old, mf_listen_t *taker, giver_t *g)
{
    ASSERT_EQ(mf_listen_confirm(taker), 0);
    ASSERT_EQ(giver_join(g), 1);
    ASSERT_EQ(g->to, getpid());
    mf_listen_close(old);
}

/* Somebody holds port: a plain open is address in use. */
static void assert_held(uint16_t port)
{
    int err;
    ASSERT(!open_listen(port, 1, false, &err));
    ASSERT_EQ(err, MF_EADDRINUSE);
}

static mf_listen_t *open_ok(uint16_t port, unsigned count)
{
    int err;
    mf_listen_t *l = open_listen(port, count, false, &err);
    if (!l)
        MF_TEST_FAIL("listen: %s", mf_strerror(err));
    return l;
}

TEST(a_second_open_of_an_address_is_refused_while_the_first_holds_it)
{
    uint16_t port = mf_test_free_port();
    mf_listen_t *l1 = open_ok(port, 2);
    ASSERT_EQ(mf_listen_count(l1), 2);
    ASSERT_EQ(mf_listen_port(l1), port);
    ASSERT_EQ(mf_listen_taken_from(l1), 0);
    ASSERT(!same_socket(mf_listen_fd(l1, 0), mf_listen_fd(l1, 1)));
    assert_held(port);
    ASSERT(accepts(l1, port));
    mf_listen_close(l1);
    mf_listen_close(open_ok(port, 1)); /* the lock went with it */
}

TEST(anything_else_listening_on_the_port_is_address_in_use_even_reuseport)
{
    for (int reuseport = 0; reuseport < 2; reuseport++) {
        uint16_t port = mf_test_free_port();
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, err;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (reuseport)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        ASSERT_EQ(listen(fd, 4), 0);
        assert_held(port);
        ASSERT(!open_listen(port, 2, true, &err)); /* nothing to take */
        ASSERT_EQ(err, MF_EADDRINUSE);
        close(fd);
    }
}

TEST(port_zero_gets_one_fresh_port_for_every_listener_and_locks_it)
{
    mf_listen_t *l = open_ok(0, 3);
    uint16_t port = mf_listen_port(l);
    ASSERT(port != 0);
    for (unsigned i = 0; i < 3; i++)
        ASSERT_EQ(bound_port(mf_listen_fd(l, i)), port);
    assert_held(port);
    mf_listen_close(l);
}

TEST(bad_addresses_and_no_listeners_are_einval)
{
    mf_listen_opts_t o = {.address = "127.0.0.1", .count = 1, .backlog = 4};
    int err = 0;
    ASSERT(!mf_listen_open(&o, &err));
    ASSERT_EQ(err, MF_EINVAL);
    o.address = "127.0.0.1:0";
    o.count = 0;
    ASSERT(!mf_listen_open(&o, &err));
    ASSERT_EQ(err, MF_EINVAL);
}

TEST(a_takeover_gets_the_same_sockets_and_the_lock_and_the_holder_learns_it)
{
    uint16_t port = mf_test_free_port();
    mf_listen_t *old = open_ok(port, 2);
    giver_t g;
    mf_listen_t *taker = take_over(old, &g, port, 2);
    ASSERT_EQ(mf_listen_taken_from(taker), getpid());
    ASSERT_EQ(mf_listen_count(taker), 2);
    for (unsigned i = 0; i < 2; i++)
        ASSERT(same_socket(mf_listen_fd(taker, i), mf_listen_fd(old, i)));
    complete(old, taker, &g); /* the sockets and the lock live on */
    ASSERT(accepts(taker, port));
    assert_held(port);
    mf_listen_t *third = take_over(taker, &g, port, 2); /* and on again */
    complete(taker, third, &g);
    ASSERT(accepts(third, port));
    mf_listen_close(third);
}

TEST(a_taker_that_exits_before_confirming_leaves_the_holder_serving)
{
    uint16_t port = mf_test_free_port();
    mf_listen_t *old = open_ok(port, 2);
    giver_t g;
    mf_listen_close(take_over(old, &g, port, 2)); /* it failed to start */
    ASSERT_EQ(giver_join(&g), MF_ECANCELED);
    ASSERT(accepts(old, port));
    assert_held(port);
    mf_listen_close(old);
}

TEST(a_taker_with_more_or_fewer_workers_keeps_every_listener)
{
    uint16_t port = mf_test_free_port();
    mf_listen_t *old = open_ok(port, 3);
    giver_t g;
    mf_listen_t *fewer = take_over(old, &g, port, 1);
    ASSERT_EQ(mf_listen_count(fewer), 3); /* none dropped */
    complete(old, fewer, &g);
    mf_listen_t *more = take_over(fewer, &g, port, 5);
    ASSERT_EQ(mf_listen_count(more), 5);
    for (unsigned i = 0; i < 5; i++)
        ASSERT_EQ(bound_port(mf_listen_fd(more, i)), port);
    complete(fewer, more, &g);
    ASSERT(accepts(more, port));
    mf_listen_close(more);
}

TEST(a_takeover_with_nothing_to_take_opens_afresh)
{
    uint16_t port = mf_test_free_port();
    int err;
    mf_listen_t *l = open_listen(port, 2, true, &err);
    ASSERT(l);
    ASSERT_EQ(mf_listen_taken_from(l), 0);
    ASSERT_EQ(mf_listen_count(l), 2);
    ASSERT_EQ(mf_listen_confirm(l), 0);
    mf_listen_close(l);
}

TEST(waiting_for_a_handover_ends_with_0_when_canceled)
{
    mf_listen_t *l = open_ok(0, 1);
    giver_t g;
    giver_start(&g, l);
    uint64_t one = 1;
    ASSERT_EQ(write(g.cancel_fd, &one, sizeof one), sizeof one);
    ASSERT_EQ(giver_join(&g), 0);
    mf_listen_close(l);
}
