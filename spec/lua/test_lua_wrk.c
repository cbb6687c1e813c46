/* wrk's Lua API (lua/load/mf_lua_wrk.c, moonflow/lua_wrk.h) driven through its
 * C API on plain lua_States: the wrk table and wrk.format (defaults from the
 * table, Host, Content-Length for a body), init(args) and the frozen
 * wrk.request(), wrk.lookup and wrk.connect against a real listening
 * socket on 127.0.0.1 and a closed port, mf_lua_wrk_resolve, thread
 * objects (get, set, stop, addr) copying values between two states, the
 * statistics objects done() is given over a known histogram, and the
 * errors that bad arguments raise. */
#include <arpa/inet.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <moonflow/hdr.h>
#include <moonflow/lua_wrk.h>
#include "test.h"
#include "test_port.h"

/* ---- helpers ----------------------------------------------------------- */

static lua_State *new_state(void)
{
    lua_State *L = luaL_newstate();
    ASSERT(L);
    luaL_openlibs(L);
    return L;
}

/* A state with wrk's table for url (host, port) and the -H lines. */
static lua_State *wrk_state(const char *host, const char *port,
                            char *const *headers, size_t nheaders)
{
    lua_State *L = new_state();
    const mf_lua_wrk_url_t url = {"http", host, port, "/base"};
    ASSERT_EQ(mf_lua_wrk_open(L, &url, headers, nheaders), 0);
    return L;
}

/* A state for url whose thread (*t, kept by the caller as long as the
 * state) ran its init: wrk.thread and the Host header are set. */
static lua_State *inited_state(mf_lua_wrk_thread_t *t, const char *host,
                               const char *port, char *const *headers,
                               size_t nheaders)
{
    lua_State *L = wrk_state(host, port, headers, nheaders);
    memset(t, 0, sizeof *t);
    t->L = L;
    ASSERT_EQ(mf_lua_wrk_thread_init(L, t, "http://u/", NULL, 0), 0);
    return L;
}

/* Runs code in L: its first result as a string, or "error: MESSAGE". */
static const char *eval(lua_State *L, const char *code)
{
    static char out[1024];
    if (luaL_loadstring(L, code) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
        snprintf(out, sizeof out, "error: %s", lua_tostring(L, -1));
    } else {
        lua_getglobal(L, "tostring");
        lua_insert(L, -2);
        lua_call(L, 1, 1);
        snprintf(out, sizeof out, "%s", lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    return out;
}

#define EVAL_EQ(L, code, want) ASSERT_STR_EQ(eval(L, code), want)

/* Whether the error text of code contains want. */
static void expect_error(lua_State *L, const char *code, const char *want)
{
    const char *got = eval(L, code);
    if (strncmp(got, "error: ", 7) != 0 || !strstr(got, want))
        MF_TEST_FAIL("%s: got \"%s\", want an error with \"%s\"", code, got,
                     want);
}

static mf_lua_wrk_thread_t thread_of(lua_State *own)
{
    mf_lua_wrk_thread_t t;
    memset(&t, 0, sizeof t);
    t.L = own;
    return t;
}

/* ---- the wrk table and wrk.format -------------------------------------- */

TEST(the_table_holds_the_url_and_the_header_flags)
{
    char *headers[] = {"X-Flag:   a b", "Accept:text/plain"};
    lua_State *L = wrk_state("127.0.0.1", "8080", headers, 2);
    EVAL_EQ(L,
            "return table.concat({wrk.scheme, wrk.host, wrk.port, "
            "wrk.path, wrk.method}, ' ')",
            "http 127.0.0.1 8080 /base GET");
    EVAL_EQ(L, "return wrk.headers['X-Flag'] .. '|' .. wrk.headers.Accept",
            "a b|text/plain");
    EVAL_EQ(L, "return tostring(wrk.body) .. ' ' .. tostring(wrk.thread)",
            "nil nil");
    EVAL_EQ(L,
            "return type(wrk.lookup) .. type(wrk.connect) .. "
            "type(wrk.format) .. type(wrk.request)",
            "functionfunctionfunctionfunction");
    lua_close(L);
    /* no port in the URL: wrk.port is nil */
    L = wrk_state("example.com", NULL, NULL, 0);
    EVAL_EQ(L, "return tostring(wrk.port)", "nil");
    lua_close(L);
}

TEST(format_takes_its_defaults_from_the_table)
{
    char *headers[] = {"X-Flag: a"};
    lua_State *L = wrk_state("127.0.0.1", "8080", headers, 1);
    /* before the thread's init there is no Host */
    EVAL_EQ(L, "return wrk.format()",
            "GET /base HTTP/1.1\r\nX-Flag: a\r\n\r\n");
    EVAL_EQ(L,
            "wrk.method = 'PATCH'; wrk.path = '/t'; wrk.body = 'xyz'\n"
            "return wrk.format()",
            "PATCH /t HTTP/1.1\r\nX-Flag: a\r\nContent-Length: 3\r\n\r\nxyz");
    EVAL_EQ(L, "return wrk.format('DELETE')",
            "DELETE /t HTTP/1.1\r\nX-Flag: a\r\nContent-Length: 3\r\n\r\nxyz");
    lua_close(L);
}

TEST(format_puts_host_second_and_counts_the_body)
{
    mf_lua_wrk_thread_t t;
    lua_State *L = inited_state(&t, "127.0.0.1", "8080", NULL, 0);
    EVAL_EQ(L, "return wrk.headers.Host", "127.0.0.1:8080");
    EVAL_EQ(L, "return wrk.format(nil, '/p')",
            "GET /p HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    /* headers given replace the table's, but Host still comes from it */
    EVAL_EQ(L, "return wrk.format('POST', '/p', {['X-A'] = 1}, 'hello')",
            "POST /p HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-A: 1\r\n"
            "Content-Length: 5\r\n\r\nhello");
    /* a Host given wins; a Content-Length given is replaced by the body's
     * own, and none is sent without a body */
    EVAL_EQ(L,
            "return wrk.format('PUT', '/q', {Host = 'h', "
            "['Content-Length'] = '99'}, 'ab')",
            "PUT /q HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab");
    EVAL_EQ(L, "return wrk.format('GET', '/', {['Content-Length'] = '9'})",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    lua_close(L);
}

TEST(the_host_header_brackets_an_ipv6_address_and_omits_a_missing_port)
{
    mf_lua_wrk_thread_t t;
    lua_State *L = inited_state(&t, "::1", "9", NULL, 0);
    EVAL_EQ(L, "return wrk.headers.Host", "[::1]:9");
    lua_close(L);
    L = inited_state(&t, "example.com", NULL, NULL, 0);
    EVAL_EQ(L, "return wrk.headers.Host", "example.com");
    lua_close(L);
    /* a Host header from -H is kept */
    char *headers[] = {"Host: given"};
    L = inited_state(&t, "example.com", "80", headers, 1);
    EVAL_EQ(L, "return wrk.headers.Host", "given");
    lua_close(L);
}

TEST(init_gets_the_url_and_arguments_and_request_is_frozen_after_it)
{
    lua_State *L = wrk_state("127.0.0.1", "8080", NULL, 0);
    EVAL_EQ(L,
            "function init(args)\n"
            "  seen = args[0] .. ' ' .. args[1] .. ' ' .. args[2] .. ' ' .. "
            "#args\n"
            "  wrk.path = '/from-init'\n"
            "end\n"
            "return 'ok'",
            "ok");
    mf_lua_wrk_thread_t t = thread_of(L);
    char *args[] = {"one", "two"};
    ASSERT_EQ(mf_lua_wrk_thread_init(L, &t, "http://u/", args, 2), 0);
    EVAL_EQ(L, "return seen", "http://u/ one two 2");
    EVAL_EQ(L, "return wrk.thread ~= nil", "true");
    /* wrk's order: the request is built once, after init */
    EVAL_EQ(L, "wrk.path = '/later'; return wrk.request()",
            "GET /from-init HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    lua_close(L);
}

TEST(an_error_in_init_comes_back_with_its_traceback)
{
    lua_State *L = wrk_state("127.0.0.1", "8080", NULL, 0);
    EVAL_EQ(L, "function init() error('no way') end return 1", "1");
    mf_lua_wrk_thread_t t = thread_of(L);
    ASSERT_EQ(mf_lua_wrk_thread_init(L, &t, "http://u/", NULL, 0), -1);
    const char *msg = lua_tostring(L, -1);
    ASSERT(msg && strstr(msg, "no way") && strstr(msg, "stack traceback"));
    lua_pop(L, 1);
    ASSERT_EQ(lua_gettop(L), 0);
    lua_close(L);
}

TEST(call_runs_a_global_function_or_says_it_is_not_one)
{
    lua_State *L = new_state();
    EVAL_EQ(L, "function add(a, b) return a + b end return 1", "1");
    lua_pushnumber(L, 2);
    lua_pushnumber(L, 3);
    ASSERT_EQ(mf_lua_wrk_call(L, "add", 2, 1), 0);
    ASSERT_EQ(lua_tonumber(L, -1), 5);
    lua_pop(L, 1);
    lua_pushnumber(L, 2);
    ASSERT_EQ(mf_lua_wrk_call(L, "missing", 1, 0), 1);
    ASSERT_EQ(lua_gettop(L), 0); /* its arguments are dropped */
    EVAL_EQ(L, "function bad() error('bad call') end return 1", "1");
    ASSERT_EQ(mf_lua_wrk_call(L, "bad", 0, 0), -1);
    ASSERT(strstr(lua_tostring(L, -1), "bad call"));
    ASSERT(strstr(lua_tostring(L, -1), "stack traceback"));
    lua_close(L);
}

/* ---- wrk.lookup, wrk.connect and resolving ----------------------------- */

/* A listening socket on 127.0.0.1 (returned, its port in *port) and a port
 * where nothing listens any more (*closed). */
static int listen_and_close(uint16_t *port, uint16_t *closed)
{
    int listener = mf_test_bind_loopback(port, 16);
    ASSERT(listener >= 0);
    int gone = mf_test_bind_loopback(closed, 0);
    ASSERT(gone >= 0);
    close(gone);
    return listener;
}

TEST(lookup_and_connect_reach_a_listening_socket_and_not_a_closed_port)
{
    uint16_t port = 0, closed = 0;
    int listener = listen_and_close(&port, &closed);
    lua_State *L = wrk_state("127.0.0.1", NULL, NULL, 0);
    char code[512], want[64];
    snprintf(code, sizeof code,
             "local a = wrk.lookup('127.0.0.1', '%u')\n"
             "return #a .. ' ' .. tostring(a[1]) .. ' ' .. "
             "tostring(wrk.connect(a[1]))",
             port);
    snprintf(want, sizeof want, "1 127.0.0.1:%u true", port);
    EVAL_EQ(L, code, want);
    snprintf(code, sizeof code,
             "return tostring(wrk.connect(wrk.lookup('127.0.0.1', '%u')[1]))",
             closed);
    EVAL_EQ(L, code, "false");
    /* the address objects of setup(thread): thread.addr = ... */
    snprintf(code, sizeof code,
             "local a = wrk.lookup('::1', '%u') return #a .. ' ' .. "
             "tostring(a[1])",
             port);
    snprintf(want, sizeof want, "1 [::1]:%u", port);
    EVAL_EQ(L, code, want);
    expect_error(L, "return wrk.lookup('no-such-host.invalid', '80')",
                 "unable to resolve no-such-host.invalid:80");
    expect_error(
        L, "return wrk.lookup('127.0.0.1')",
        "wrk.lookup(host, service): service: a string expected, got no value");
    expect_error(L, "return wrk.connect('127.0.0.1:80')",
                 "wrk.connect(addr): a moonflow.wrk.addr expected");
    lua_close(L);
    close(listener);
}

TEST(resolve_keeps_the_addresses_that_accept_a_connection)
{
    uint16_t port = 0, closed = 0;
    int listener = listen_and_close(&port, &closed);
    char service[8], err[256] = "";
    mf_sockaddr_t addrs[4];
    snprintf(service, sizeof service, "%u", port);
    ASSERT_EQ(
        mf_lua_wrk_resolve("127.0.0.1", service, addrs, 4, err, sizeof err), 1);
    char text[80], want[80];
    snprintf(want, sizeof want, "127.0.0.1:%u", port);
    ASSERT_STR_EQ(mf_sockaddr_format(&addrs[0], text, sizeof text), want);
    snprintf(service, sizeof service, "%u", closed);
    ASSERT_EQ(
        mf_lua_wrk_resolve("127.0.0.1", service, addrs, 4, err, sizeof err),
        -1);
    snprintf(want, sizeof want, "unable to connect to 127.0.0.1:%u ", closed);
    ASSERT(strncmp(err, want, strlen(want)) == 0);
    ASSERT(strstr(err, "refused"));
    ASSERT_EQ(mf_lua_wrk_resolve("no-such-host.invalid", "80", addrs, 4, err,
                                 sizeof err),
              -1);
    ASSERT(strstr(err, "unable to resolve no-such-host.invalid:80"));
    close(listener);
}

/* ---- thread objects ------------------------------------------------------ */

static int stops;
static int stop_result;

static int count_stop(mf_lua_wrk_thread_t *t)
{
    (void)t;
    stops++;
    return stop_result;
}

TEST(thread_get_and_set_copy_values_between_states)
{
    lua_State *main = wrk_state("127.0.0.1", "80", NULL, 0);
    lua_State *own = wrk_state("127.0.0.1", "80", NULL, 0);
    mf_lua_wrk_thread_t t = thread_of(own);
    mf_lua_wrk_push_thread(main, &t);
    lua_setglobal(main, "th");
    EVAL_EQ(main,
            "th:set('x', {n = 1.5, s = 'str', b = true, list = {'a', "
            "{'deep'}}})\n"
            "return 'set'",
            "set");
    EVAL_EQ(own,
            "return x.n .. x.s .. tostring(x.b) .. x.list[1] .. "
            "x.list[2][1]",
            "1.5strtrueadeep");
    EVAL_EQ(own, "counter = 41; text = 'a\\0b'; return 1", "1");
    EVAL_EQ(main,
            "return th:get('counter') + 1 .. ' ' .. #th:get('text') .. ' ' "
            ".. tostring(th:get('nothing'))",
            "42 3 nil");
    /* the copy is a copy: changing it leaves the other state's alone */
    EVAL_EQ(main, "local c = th:get('x'); c.n = 0; return th:get('x').n",
            "1.5");
    EVAL_EQ(main, "th:set('x', nil); return tostring(th:get('x'))", "nil");
    expect_error(main, "th:set('f', print)",
                 "thread:set('f'): cannot transfer 'function' to thread");
    expect_error(main, "local t = {} t.self = t th:set('cycle', t)",
                 "thread:set('cycle'): cannot transfer a table nested "
                 "deeper than 32");
    EVAL_EQ(own, "co = coroutine.create(print) return 1", "1");
    expect_error(main, "return th:get('co')",
                 "thread:get('co'): cannot transfer 'thread' to thread");
    expect_error(
        main, "th:set()",
        "thread:set(name, value): name: a string expected, got no value");
    expect_error(main, "th.get(42, 'x')",
                 "thread:get(name): self: a moonflow.wrk.thread expected");
    /* a failed set leaves nothing behind on the other state */
    ASSERT_EQ(lua_gettop(own), 0);
    lua_close(main);
    lua_close(own);
}

TEST(thread_addr_and_stop_go_through_the_thread_record)
{
    uint16_t port = 0;
    int listener = mf_test_bind_loopback(&port, 4);
    ASSERT(listener >= 0);
    lua_State *L = wrk_state("127.0.0.1", NULL, NULL, 0);
    mf_lua_wrk_thread_t t = thread_of(L);
    t.stop = count_stop;
    mf_sockaddr_t a;
    memset(&a, 0, sizeof a);
    a.in4.sin_family = AF_INET;
    a.in4.sin_port = htons(port);
    a.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    t.addr = a;
    mf_lua_wrk_push_thread(L, &t);
    lua_setglobal(L, "th");
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%u true", port);
    EVAL_EQ(L,
            "return tostring(th.addr) .. ' ' .. tostring(wrk.connect(th.addr))",
            want);
    /* setup(thread) may point the thread at another address */
    EVAL_EQ(L, "th.addr = wrk.lookup('::1', '7')[1]; return tostring(th.addr)",
            "[::1]:7");
    ASSERT_EQ(t.addr.sa.sa_family, AF_INET6);
    expect_error(L, "th.addr = '1.2.3.4:5'", "a moonflow.wrk.addr expected");
    expect_error(L, "th.other = 1", "cannot set 'other' on thread");
    EVAL_EQ(L, "return tostring(th.other)", "nil");
    stops = 0;
    stop_result = 0;
    EVAL_EQ(L, "th:stop() return 'stopped'", "stopped");
    ASSERT_EQ(stops, 1);
    stop_result = -1; /* the owner says the thread is not running */
    expect_error(L, "th:stop()", "thread:stop() works only while the thread");
    ASSERT_EQ(stops, 2);
    t.stop = NULL;
    expect_error(L, "th:stop()", "thread:stop() works only while the thread");
    lua_close(L);
    close(listener);
}

/* ---- statistics objects ----------------------------------------------------
 */

TEST(stats_read_min_max_mean_stdev_and_percentiles_of_a_histogram)
{
    mf_hdr_t *h = mf_hdr_create();
    ASSERT(h);
    /* exact below 256: 10, 20, 30 and 40 once each */
    for (uint64_t v = 10; v <= 40; v += 10)
        mf_hdr_record(h, v);
    lua_State *L = new_state();
    mf_lua_wrk_push_stats(L, h, 1);
    lua_setglobal(L, "s");
    EVAL_EQ(L, "return s.min .. ' ' .. s.max .. ' ' .. s.mean", "10 40 25");
    /* stdev divides by n: sqrt((15^2 + 5^2 + 5^2 + 15^2) / 4) */
    EVAL_EQ(L, "return string.format('%.4f', s.stdev)", "11.1803");
    EVAL_EQ(L,
            "return s:percentile(0) .. ' ' .. s:percentile(25) .. ' ' .. "
            "s:percentile(50) .. ' ' .. s:percentile(75) .. ' ' .. "
            "s:percentile(99.9) .. ' ' .. s:percentile(100)",
            "10 10 20 30 40 40");
    /* #s non-empty buckets; s(i) the i-th with its count; nothing past */
    EVAL_EQ(L,
            "local v, c = s(3) return #s .. ' ' .. v .. 'x' .. c .. ' ' .. "
            "select('#', s(5)) .. select('#', s(0))",
            "4 30x1 00");
    EVAL_EQ(L, "return tostring(s.other)", "nil");
    expect_error(L, "return s:percentile(101)", "percentile must be 0..100");
    expect_error(L, "return s:percentile(-1)", "percentile must be 0..100");
    expect_error(L, "return s:percentile('x')",
                 "stats:percentile(p): a number expected, got string");
    expect_error(L, "return s.percentile({}, 50)",
                 "stats:percentile(p): self: a moonflow.wrk.stats expected");
    lua_close(L);
    mf_hdr_destroy(h);
}

TEST(stats_divide_into_wrk_units_as_done_sees_them)
{
    mf_hdr_t *lat = mf_hdr_create(), *rate = mf_hdr_create(),
             *none = mf_hdr_create();
    ASSERT(lat && rate && none);
    mf_hdr_record_n(lat, 200, 3); /* ns; exact */
    mf_hdr_record(lat, 100);
    mf_hdr_record(rate, 7);
    lua_State *L = new_state();
    /* done(summary, latency, requests) as moonflow bench calls it: latency
     * in µs (ns / 1000, whole as wrk's), requests per second as they are */
    EVAL_EQ(L,
            "function done(summary, latency, requests)\n"
            "  seen = table.concat({summary.requests, latency.min, "
            "latency.max, latency.mean, latency:percentile(50), "
            "requests.max, #requests}, ' ')\n"
            "end\n"
            "return 1",
            "1");
    lua_createtable(L, 0, 1);
    lua_pushnumber(L, 4);
    lua_setfield(L, -2, "requests");
    mf_lua_wrk_push_stats(L, lat, 10); /* tens of ns: 10 and 20, mean 17.5 */
    mf_lua_wrk_push_stats(L, rate, 1);
    ASSERT_EQ(mf_lua_wrk_call(L, "done", 3, 0), 0);
    EVAL_EQ(L, "return seen", "4 10 20 17.5 20 7 1");
    /* an empty histogram reads 0 everywhere */
    mf_lua_wrk_push_stats(L, none, 1000);
    lua_setglobal(L, "e");
    EVAL_EQ(L,
            "return e.min .. e.max .. e.mean .. e.stdev .. e:percentile(99) "
            ".. #e .. select('#', e(1))",
            "0000000");
    lua_close(L);
    mf_hdr_destroy(lat);
    mf_hdr_destroy(rate);
    mf_hdr_destroy(none);
}

/* ---- copies -------------------------------------------------------------- */

TEST(copy_carries_plain_values_and_refuses_the_rest_cleanly)
{
    lua_State *a = new_state(), *b = new_state();
    char err[128] = "";
    EVAL_EQ(a, "v = {1, 2, k = {x = false}, [3.5] = 'f'} return 1", "1");
    lua_getglobal(a, "v");
    ASSERT_EQ(mf_lua_wrk_copy(a, -1, b, err, sizeof err), 0);
    lua_setglobal(b, "v");
    lua_pop(a, 1);
    EVAL_EQ(b, "return v[1] + v[2] .. tostring(v.k.x) .. v[3.5]", "3falsef");
    lua_pushlightuserdata(a, &err);
    ASSERT_EQ(mf_lua_wrk_copy(a, -1, b, err, sizeof err), -1);
    ASSERT_STR_EQ(err, "cannot transfer 'userdata' to thread");
    lua_pop(a, 1);
    EVAL_EQ(a, "w = {ok = 1, bad = {f = print}} return 1", "1");
    lua_getglobal(a, "w");
    ASSERT_EQ(mf_lua_wrk_copy(a, -1, b, err, sizeof err), -1);
    ASSERT_STR_EQ(err, "cannot transfer 'function' to thread");
    ASSERT_EQ(lua_gettop(b), 0); /* the half-made table is gone */
    ASSERT_EQ(lua_gettop(a), 1); /* the source is as it was */
    lua_close(a);
    lua_close(b);
}
