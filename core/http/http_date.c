/*
 * http_date.c — refreshing the cached Date line of http_date.h.
 */
#include "http_date.h"

#include <time.h>

const char *mf__http_date_refresh(mf_http_date_t *d, uint64_t tick, size_t *len)
{
    d->checked = tick;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec != d->sec) {
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        d->len = strftime(d->line, sizeof d->line,
                          "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        d->sec = now.tv_sec;
    }
    *len = d->len;
    return d->line;
}
