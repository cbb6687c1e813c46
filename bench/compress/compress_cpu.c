/*
 * compress_cpu.c — CPU per KiB of the server's encoders
 * (core/http/http_compress.c), as bench/compress/compare_compress.py
 * runs them: a file compressed again and again, whole (a known-length
 * answer) or in flushed pieces (a streamed one), with one encoder pool as
 * a worker has, until `seconds` of CPU have passed.
 *
 * Usage: bench_compress_cpu FILE gzip|br LEVEL PIECE SECONDS
 *   PIECE 0: whole; else the piece size in bytes, each piece flushed.
 * Prints one JSON line: {"coding", "level", "piece", "bytes_in",
 * "bytes_out", "runs", "cpu_s", "ns_per_kib", "ratio"}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http_compress.h"

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = n > 0 ? malloc((size_t)n) : NULL;
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* One answer: the whole input through a fresh encoder; its output size,
 * or 0 when the encoder failed. */
static size_t compress_once(mf_http_compress_pool_t *pool,
                            mf_http_coding_t coding, int level, const char *in,
                            size_t len, size_t piece, char *out, size_t cap)
{
    mf_http_encoder_t *enc = mf__http_encoder_open(pool, coding, level);
    if (!enc)
        return 0;
    size_t at = 0, total = 0;
    if (!piece)
        piece = len;
    do {
        size_t n = len - at < piece ? len - at : piece;
        mf_http_encode_op_t op =
            at + n == len ? MF_HTTP_ENCODE_FINISH : MF_HTTP_ENCODE_FLUSH;
        const char *p = in + at;
        size_t left = n;
        int rc;
        do { /* out is reused: only the size counts here */
            size_t used, written;
            rc = mf__http_encoder_step(enc, p, left, &used, out, cap, &written,
                                       op);
            if (rc < 0) {
                mf__http_encoder_close(enc);
                return 0;
            }
            p += used;
            left -= used;
            total += written;
        } while (rc == 1);
        at += n;
    } while (at < len);
    mf__http_encoder_close(enc);
    return total;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s FILE gzip|br LEVEL PIECE SECONDS\n",
                argv[0]);
        return 2;
    }
    size_t len;
    char *in = read_file(argv[1], &len);
    if (!in) {
        fprintf(stderr, "%s: cannot read\n", argv[1]);
        return 1;
    }
    mf_http_coding_t coding =
        strcmp(argv[2], "br") == 0 ? MF_HTTP_CODING_BR : MF_HTTP_CODING_GZIP;
    int level = atoi(argv[3]);
    size_t piece = (size_t)atol(argv[4]);
    double seconds = atof(argv[5]);
    size_t cap = 64 * 1024;
    char *out = malloc(cap);
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    if (!out || !pool)
        return 1;
    size_t packed = compress_once(pool, coding, level, in, len, piece, out,
                                  cap); /* warm-up: the pool fills */
    unsigned long runs = 0;
    double start = cpu_seconds(), used = 0;
    while (used < seconds) {
        if (compress_once(pool, coding, level, in, len, piece, out, cap) !=
            packed) {
            fprintf(stderr, "the output changed between runs\n");
            return 1;
        }
        runs++;
        used = cpu_seconds() - start;
    }
    double kib = (double)len * (double)runs / 1024.0;
    printf("{\"coding\": \"%s\", \"level\": %d, \"piece\": %zu, "
           "\"bytes_in\": %zu, \"bytes_out\": %zu, \"runs\": %lu, "
           "\"cpu_s\": %.3f, \"ns_per_kib\": %.0f, \"ratio\": %.4f}\n",
           argv[2], level, piece, len, packed, runs, used, used * 1e9 / kib,
           (double)packed / (double)len);
    mf__http_compress_pool_destroy(pool);
    free(out);
    free(in);
    return 0;
}
