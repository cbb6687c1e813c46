#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

typedef struct peer {
    mf_loop_t *loop;
    mf_io_t io;
    int fds[2];
    int reads;
    int writes;
    struct peer *other;
} peer_t;

static void drain(int fd)
{
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

static void on_readable_stop_other(mf_io_t *io, unsigned events)
{
    peer_t *p = io->data;
    if (events & MF_IO_READ) {
        p->reads++;
        drain(io->fd);
    }
    /* Whoever runs first stops both: the other's event in this same batch
     * must be voided, not delivered to a stopped watcher. */
    mf_io_stop(p->loop, &p->other->io);
    mf_io_stop(p->loop, io);
}

TEST(stopping_a_watcher_voids_its_pending_event_in_the_same_batch)
{
    mf_loop_t *loop = mf_loop_create();
    peer_t a = {0}, b = {0};
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a.fds), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b.fds), 0);
    a.loop = b.loop = loop;
    a.other = &b;
    b.other = &a;
    mf_io_init(&a.io, a.fds[0], on_readable_stop_other, &a);
    mf_io_init(&b.io, b.fds[0], on_readable_stop_other, &b);
    ASSERT_EQ(mf_io_start(loop, &a.io, MF_IO_READ), 0);
    ASSERT_EQ(mf_io_start(loop, &b.io, MF_IO_READ), 0);
    ASSERT_EQ(write(a.fds[1], "x", 1), 1);
    ASSERT_EQ(write(b.fds[1], "y", 1), 1);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    ASSERT_EQ(a.reads + b.reads, 1);
    for (int i = 0; i < 2; i++) {
        close(a.fds[i]);
        close(b.fds[i]);
    }
    mf_loop_destroy(loop);
}

static void on_writable(mf_io_t *io, unsigned events)
{
    peer_t *p = io->data;
    if (events & MF_IO_WRITE) {
        p->writes++;
        mf_io_stop(p->loop, io);
    }
}

TEST(write_interest_reports_a_writable_socket)
{
    mf_loop_t *loop = mf_loop_create();
    peer_t p = {0};
    p.loop = loop;
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p.fds), 0);
    mf_io_init(&p.io, p.fds[0], on_writable, &p);
    ASSERT_EQ(mf_io_start(loop, &p.io, MF_IO_READ | MF_IO_WRITE), 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(p.writes, 1);
    close(p.fds[0]);
    close(p.fds[1]);
    mf_loop_destroy(loop);
}

static void on_hangup(mf_io_t *io, unsigned events)
{
    peer_t *p = io->data;
    char c;
    if (read(io->fd, &c, 1) == 0) /* EOF: the peer closed */
        p->reads = 100;
    mf_io_stop(p->loop, io);
}

TEST(a_closed_peer_is_reported_as_readable_eof)
{
    mf_loop_t *loop = mf_loop_create();
    peer_t p = {0};
    p.loop = loop;
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p.fds), 0);
    mf_io_init(&p.io, p.fds[0], on_hangup, &p);
    ASSERT_EQ(mf_io_start(loop, &p.io, MF_IO_READ), 0);
    close(p.fds[1]);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(p.reads, 100);
    close(p.fds[0]);
    mf_loop_destroy(loop);
}

TEST(starting_a_watcher_on_a_bad_fd_returns_an_error_code)
{
    mf_loop_t *loop = mf_loop_create();
    mf_io_t io;
    mf_io_init(&io, -1, NULL, NULL);
    ASSERT_EQ(mf_io_start(loop, &io, MF_IO_READ), MF_EBADF);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_NOWAIT), 0); /* nothing registered */
    mf_loop_destroy(loop);
}
