/* A task kind defined outside the engine, the way the protocol clients plug
 * in: it embeds mf_task_t, watches a socket with mf_io_t, and completes when
 * a whole line has arrived. Timeouts and cancel come from the engine. */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

typedef struct line_task {
    mf_task_t base;
    mf_io_t io;
    char line[64];
    size_t len;
} line_task_t;

static void line_readable(mf_io_t *io, unsigned events)
{
    line_task_t *t = io->data;
    for (;;) { /* edge-triggered: read until EAGAIN */
        char c;
        ssize_t n = read(io->fd, &c, 1);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0 || t->len + 1 == sizeof t->line) {
            mf_io_stop(t->base._loop, io);
            mf_task_complete(&t->base, MF_STATE_SYS_ERROR,
                             n == 0 ? MF_EOF : MF_EMSGSIZE);
            return;
        }
        if (c == '\n') {
            mf_io_stop(t->base._loop, io);
            mf_task_complete(&t->base, MF_STATE_SUCCESS, 0);
            return;
        }
        t->line[t->len++] = c;
        t->line[t->len] = 0;
    }
}

static void line_dispatch(mf_task_t *task)
{
    line_task_t *t = (line_task_t *)task;
    int rc = mf_io_start(task->_loop, &t->io, MF_IO_READ);
    if (rc < 0)
        mf_task_complete(task, MF_STATE_SYS_ERROR, rc);
}

static void line_cancel(mf_task_t *task)
{
    line_task_t *t = (line_task_t *)task;
    mf_io_stop(task->_loop, &t->io);
    mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void line_destroy(mf_task_t *task)
{
    mf_loop_free(task->_loop, task, sizeof(line_task_t));
}

static const mf_task_ops_t line_ops = {"line", line_dispatch, line_cancel,
                                       line_destroy};

static mf_task_t *line_task_create(mf_loop_t *loop, int fd, mf_task_cb cb)
{
    line_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    mf_task_init(&t->base, &line_ops, loop, cb, NULL);
    mf_io_init(&t->io, fd, line_readable, t);
    t->len = 0;
    t->line[0] = 0;
    return &t->base;
}

static char got[3][64];
static int got_state[3];
static int got_count;

static void on_line(mf_task_t *task)
{
    line_task_t *t = (line_task_t *)task;
    memcpy(got[got_count], t->line, sizeof t->line);
    got_state[got_count++] = mf_task_state(task);
}

static int pair[2];

static void write_later(mf_timer_t *timer)
{
    const char *text = timer->data;
    ASSERT_EQ(write(pair[1], text, strlen(text)), (long)strlen(text));
}

TEST(a_socket_task_kind_runs_in_a_series_with_engine_timeouts)
{
    mf_loop_t *loop = mf_loop_create();
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
    mf_timer_t w1, w2;
    mf_timer_init(&w1, write_later, "hel");
    mf_timer_init(&w2, write_later, "lo\nworld\n");
    mf_timer_start(loop, &w1, 5);
    mf_timer_start(loop, &w2, 15);
    mf_series_t *s = mf_series_create(loop, NULL);
    mf_series_push_back(s, line_task_create(loop, pair[0], on_line));
    mf_series_push_back(s, line_task_create(loop, pair[0], on_line));
    mf_task_t *silent = line_task_create(loop, pair[0], on_line);
    mf_task_set_timeout(silent, 20); /* nobody writes a third line */
    mf_series_push_back(s, silent);
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(got_count, 3);
    ASSERT_STR_EQ(got[0], "hello");
    /* "world\n" was already buffered when the second task started: with
     * edge-triggered epoll, registering the fd reports it at once. */
    ASSERT_STR_EQ(got[1], "world");
    ASSERT_EQ(got_state[0], MF_STATE_SUCCESS);
    ASSERT_EQ(got_state[1], MF_STATE_SUCCESS);
    ASSERT_EQ(got_state[2], MF_STATE_TIMEOUT);
    close(pair[0]);
    close(pair[1]);
    mf_loop_destroy(loop);
}

static int bad_fd_error;

static void on_bad_fd(mf_task_t *task)
{
    bad_fd_error = mf_task_error(task);
}

TEST(a_kind_that_fails_to_start_reports_it_in_its_completion)
{
    mf_loop_t *loop = mf_loop_create();
    mf_task_start(line_task_create(loop, 987654, on_bad_fd));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(bad_fd_error, MF_EBADF);
    mf_loop_destroy(loop);
}
