/*
 * load_record.c — what a load connection reports into its run, below both
 * the run (load.c) and the connections (load_conn.c): a response's count
 * and latency, an error of the measured window, the end of the run for a
 * hook's error (through the run's stop pointer), and the scan of a request
 * buffer into its requests.
 *
 * Writes the stats and the error of mf_load_t (load.c owns it). May call:
 * the histogram, the HTTP parser. Must not call load.c or load_conn.c.
 */
#include <string.h>

#include "load_int.h"
#include "moonflow/error.h"

/* ---- requests in a buffer --------------------------------------------- */

size_t mf__load_scan_requests(const char *buf, size_t len, uint64_t *heads)
{
    size_t count = 0, pos = 0;
    *heads = 0;
    while (pos < len) {
        mf_http_header_t headers[100];
        mf_http_request_t req = {.headers = headers,
                                 .num_headers = MF_ARRAY_SIZE(headers)};
        int rc = mf_http_parse_request(buf + pos, len - pos, &req, NULL, NULL);
        if (rc < 0 || req.body == MF_HTTP_BODY_CHUNKED)
            return 0;
        uint64_t body =
            req.body == MF_HTTP_BODY_LENGTH ? req.content_length : 0;
        if (body > len - pos - (size_t)rc)
            return 0;
        if (count < 64 && req.method_len == 4 &&
            memcmp(req.method, "HEAD", 4) == 0)
            *heads |= UINT64_C(1) << count;
        pos += (size_t)rc + (size_t)body;
        count++;
    }
    return count;
}

size_t mf_load_count_requests(const char *buf, size_t len)
{
    uint64_t heads;
    return buf ? mf__load_scan_requests(buf, len, &heads) : 0;
}

void mf__load_fail(mf_load_t *load, int error)
{
    if (!load->error)
        load->error = error;
    load->stop(load);
}

/* ---- recording ------------------------------------------------------------
 */

void mf__load_record(mf_load_t *load, mf_load_conn_t *c, uint64_t now_ns)
{
    if (!load->measuring)
        return;
    mf_load_stats_t *s = &load->stats;
    uint64_t latency = now_ns > c->start_ns ? now_ns - c->start_ns : 0;
    s->requests++;
    s->target_requests[c->target]++;
    mf_hdr_record(s->latency, latency);
    if (s->ntargets > 1)
        mf_hdr_record(s->target_latency[c->target], latency);
    if (c->status >= 400) {
        s->errors.status++;
        s->target_errors[c->target]++;
    }
}

void mf__load_count_error(mf_load_t *load, size_t target, uint64_t *field)
{
    if (!load->measuring)
        return;
    (*field)++;
    load->stats.target_errors[target]++;
}
