/*
 * bench/load/load_driver.c — the load engine alone (moonflow/load.h): one
 * loop, one target, no script and no report, so its cost per request can
 * be measured (CPU, syscalls) beside wrk's against the same server.
 *
 * Usage: bench_load_driver HOST:PORT [connections] [seconds] [rate] [path]
 * Prints requests, requests/s, the process CPU seconds and requests per
 * CPU-second; exits 1 on errors.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <moonflow/load.h>
#include <moonflow/moonflow.h>

static void on_done(mf_load_t *load, void *user)
{
    (void)load;
    mf_loop_stop(user);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int parse_target(const char *text, const char *path, mf_load_target_t *t,
                        char *request, size_t cap)
{
    char host[64];
    int port;
    if (sscanf(text, "%63[^:]:%d", host, &port) != 2 || port <= 0 ||
        port > 65535)
        return -1;
    t->addr.in4.sin_family = AF_INET;
    t->addr.in4.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &t->addr.in4.sin_addr) != 1)
        return -1;
    int n = snprintf(request, cap, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path,
                     text);
    t->request = request;
    t->request_len = (size_t)n;
    return 0;
}

int main(int argc, char **argv)
{
    char request[512];
    mf_load_target_t t = {0};
    if (argc < 2 || parse_target(argv[1], argc > 5 ? argv[5] : "/", &t, request,
                                 sizeof request) < 0) {
        fprintf(stderr, "usage: bench_load_driver HOST:PORT [connections] "
                        "[seconds] [rate] [path]\n");
        return 2;
    }
    mf_load_config_t c = {
        .targets = &t,
        .ntargets = 1,
        .connections = argc > 2 ? (unsigned)atoi(argv[2]) : 64,
        .duration_ns = (uint64_t)((argc > 3 ? atof(argv[3]) : 5) * 1e9),
        .rate = argc > 4 ? atof(argv[4]) : 0,
        .keepalive = true};
    mf_loop_t *loop = mf_loop_create();
    int err = 0;
    mf_load_t *load = loop ? mf_load_create(loop, &c, NULL, &err) : NULL;
    if (!load) {
        fprintf(stderr, "bench_load_driver: %s\n", mf_strerror(err));
        return 2;
    }
    double cpu0 = cpu_seconds();
    mf_load_start(load, on_done, loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    double cpu = cpu_seconds() - cpu0;
    const mf_load_stats_t *s = mf_load_stats(load);
    const mf_load_errors_t *e = &s->errors;
    uint64_t errors = e->connect + e->read + e->write + e->status + e->timeout;
    double secs = (double)s->duration_ns / 1e9;
    printf("requests %" PRIu64 " in %.3f s: %.0f/s, cpu %.3f s, %.0f "
           "requests per cpu-second, p50 %.3f ms p99 %.3f ms, errors %" PRIu64
           "\n",
           s->requests, secs, (double)s->requests / secs, cpu,
           (double)s->requests / cpu,
           (double)mf_hdr_percentile(s->latency, 50) / 1e6,
           (double)mf_hdr_percentile(s->latency, 99) / 1e6, errors);
    mf_load_destroy(load);
    mf_loop_destroy(loop);
    return errors ? 1 : 0;
}
