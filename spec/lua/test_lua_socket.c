/* Cosockets (lua/net/mf_lua_socket.c) on the host's C API: the ends a busted
 * spec cannot reach. A coroutine parked on sock:receive() that is aborted
 * (a client gone) closes its connection at once and leaves no reference,
 * timer or pending wait behind (the loop goes idle well before the read
 * timeout); so does one destroyed with the host; one that returns with a
 * socket open closes it as it ends. The peer is a listener in a thread of
 * this process that reads each connection until its end and counts the
 * ends. */
#include <lauxlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <moonflow/lua_host.h>
#include <moonflow/moonflow.h>
#include "test.h"
#include "test_port.h"

static mf_loop_t *loop;
static mf_lua_host_t *host;
static uint16_t port;
static atomic_int ends; /* connections the peer saw end */

static void *read_to_end(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
    atomic_fetch_add(&ends, 1);
    return NULL;
}

__attribute__((constructor)) static void start_peer(void)
{
    int lfd = mf_test_bind_loopback(&port, 16);
    ASSERT(lfd >= 0);
    ASSERT(mf_test_accept_in_thread(lfd, read_to_end));
}

/* Waits up to 2 s for the peer to have seen n ends. */
static bool peer_saw_ends(int n)
{
    for (int i = 0; i < 200 && atomic_load(&ends) < n; i++)
        usleep(10 * 1000);
    return atomic_load(&ends) >= n;
}

static void setup(void)
{
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, NULL);
    ASSERT(host);
}

static void assert_released(void)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.coroutines, 0);
    ASSERT_EQ(c.refs, 0);
    ASSERT_EQ(c.timers, 0);
    ASSERT_EQ(c.tasks, 0);
}

static int exits;

static void on_exit_cb(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    (void)co;
    (void)ex;
    (void)data;
    exits++;
}

/* Spawns code (with PORT replaced by the peer's port) and runs the loop
 * until the connect is done: the coroutine is then parked on what
 * follows, or has ended. */
static mf_lua_co_t *spawn_connected(const char *body)
{
    char code[1024];
    snprintf(code, sizeof code,
             "local mf = require 'moonflow'\n"
             "local s = mf.socket.tcp()\n"
             "s:settimeout(60000)\n"
             "assert(s:connect('127.0.0.1', %u))\n%s",
             (unsigned)port, body);
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(luaL_loadstring(L, code), 0);
    mf_lua_co_t *co = mf_lua_host_spawn(host, 0, on_exit_cb, NULL);
    ASSERT(co != NULL); /* parked on the connect */
    for (int i = 0; i < 100; i++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    return co;
}

TEST(an_aborted_receive_closes_the_connection_and_releases_everything)
{
    setup();
    int before = atomic_load(&ends);
    exits = 0;
    mf_lua_co_t *co = spawn_connected("return s:receive()\n");
    ASSERT_EQ(exits, 0); /* parked on the receive */
    mf_lua_co_abort(co, "client gone");
    ASSERT_EQ(exits, 1);
    ASSERT(peer_saw_ends(before + 1));
    time_t t0 = time(NULL);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* the canceled read completes */
    ASSERT(time(NULL) - t0 < 5);       /* no 60 s read timer left */
    assert_released();
    mf_lua_host_destroy(host);
    mf_loop_destroy(loop);
}

TEST(a_coroutine_returning_with_its_socket_open_closes_it)
{
    setup();
    int before = atomic_load(&ends);
    exits = 0;
    spawn_connected("_G.kept = s\nreturn true\n"); /* still reachable */
    ASSERT_EQ(exits, 1);
    ASSERT(peer_saw_ends(before + 1));
    assert_released();
    mf_lua_host_destroy(host);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}

TEST(destroying_the_host_closes_a_parked_socket)
{
    setup();
    int before = atomic_load(&ends);
    exits = 0;
    spawn_connected("return s:receive('*a')\n");
    ASSERT_EQ(exits, 0);
    mf_lua_host_destroy(host);
    ASSERT_EQ(exits, 1);
    ASSERT(peer_saw_ends(before + 1));
    time_t t0 = time(NULL);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(time(NULL) - t0 < 5);
    mf_loop_destroy(loop);
}
