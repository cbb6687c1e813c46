/* Internal helpers of the HTTP code: listen-address parsing (net.c) and the
 * loop-backed growable buffers (buf.c). */
#include <arpa/inet.h>
#include <unistd.h>

#include "engine/buf.h"
#include "net/net.h"
#include "test.h"

TEST(listen_addresses_parse_v4_v6_and_any)
{
    mf_sockaddr_t a;
    ASSERT_EQ(mf__net_parse_listen("127.0.0.1:8080", &a), 0);
    ASSERT_EQ(a.sa.sa_family, AF_INET);
    ASSERT_EQ(mf__net_port(&a), 8080);
    ASSERT_EQ(ntohl(a.in4.sin_addr.s_addr), 0x7f000001);
    ASSERT_EQ(mf__net_parse_listen("[::1]:443", &a), 0);
    ASSERT_EQ(a.sa.sa_family, AF_INET6);
    ASSERT_EQ(mf__net_port(&a), 443);
    ASSERT_EQ(mf__net_parse_listen(":0", &a), 0);
    ASSERT_EQ(a.in4.sin_addr.s_addr, htonl(INADDR_ANY));
    ASSERT_EQ(mf__net_parse_listen("localhost:1", &a), 0);
    ASSERT_EQ(ntohl(a.in4.sin_addr.s_addr), 0x7f000001);
}

TEST(bad_listen_addresses_are_einval)
{
    mf_sockaddr_t a;
    const char *bad[] = {"127.0.0.1",   "127.0.0.1:", "1.2.3.4:99999",
                         "[::1:80",     "[::1]80",    "host.test:80",
                         "1.2.3.4:8x0", "1.2.3.4:-1"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(bad); i++)
        if (mf__net_parse_listen(bad[i], &a) != MF_EINVAL)
            MF_TEST_FAIL("%s was accepted", bad[i]);
    ASSERT_EQ(mf__net_parse_listen(NULL, &a), MF_EINVAL);
}

TEST(listen_sockets_open_and_foreign_addresses_fail_cleanly)
{
    mf_sockaddr_t a;
    ASSERT_EQ(mf__net_parse_listen("127.0.0.1:0", &a), 0);
    int fd = mf__net_listen(&a, 16);
    ASSERT(fd >= 0);
    ASSERT_EQ(mf__net_socket_error(fd), 0);
    close(fd);
    ASSERT_EQ(mf__net_parse_listen("203.0.113.1:80", &a), 0);
    ASSERT_EQ(mf__net_listen(&a, 16), MF_EADDRNOTAVAIL); /* not ours */
}

TEST(buffers_grow_by_powers_of_two_and_keep_their_bytes)
{
    mf_loop_t *loop = mf_loop_create();
    mf_buf_t b;
    mf__buf_init(&b);
    char chunk[1000];
    for (int i = 0; i < 100; i++) { /* 100 KB: past the slab's largest */
        memset(chunk, 'a' + i % 26, sizeof chunk);
        ASSERT_EQ(mf__buf_append(loop, &b, chunk, sizeof chunk), 0);
        ASSERT((b.cap & (b.cap - 1)) == 0);
    }
    ASSERT_EQ(b.len, 100000);
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(b.data[i * 1000 + 999], 'a' + i % 26);
    mf__buf_release(loop, &b);
    ASSERT(b.data == NULL && b.len == 0 && b.cap == 0);
    ASSERT_EQ(mf__buf_reserve(loop, &b, SIZE_MAX), MF_ENOMEM); /* no abort */
    mf_loop_destroy(loop);
}
