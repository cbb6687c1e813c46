/*
 * http_range.c — Range, If-None-Match, If-Modified-Since and If-Range
 * values, file validators (http_range.h). Pure functions over caller
 * buffers; the fuzz target fuzz_http_range drives the readers.
 */
#include "http/http_range.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const mf__wkday[7] = {"Sun", "Mon", "Tue", "Wed",
                                         "Thu", "Fri", "Sat"};
static const char *const mf__month[12] = {"Jan", "Feb", "Mar", "Apr",
                                          "May", "Jun", "Jul", "Aug",
                                          "Sep", "Oct", "Nov", "Dec"};

static const char *mf__skip_ows(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static bool mf__is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits at *p as a number, saturated at UINT64_MAX (a position past any
 * file is as good as infinite). False when there is no digit. */
static bool mf__read_u64(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t n = 0;
    while (s < end && mf__is_digit(*s)) {
        unsigned d = (unsigned)(*s - '0');
        n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
        s++;
    }
    if (s == *p)
        return false;
    *p = s;
    *v = n;
    return true;
}

/* ---- Range --------------------------------------------------------------- */

/* One range-spec at *p: 1 (a satisfiable range in *r), 0 (good syntax,
 * unsatisfiable), -1 (bad syntax). */
static int mf__range_spec(const char **p, const char *end, uint64_t size,
                          mf_http_range_t *r)
{
    uint64_t first, last;
    if (**p == '-') { /* suffix-range: the last N bytes */
        (*p)++;
        if (!mf__read_u64(p, end, &last))
            return -1;
        if (last == 0 || size == 0)
            return 0;
        r->first = size > last ? size - last : 0;
        r->last = size - 1;
        return 1;
    }
    if (!mf__read_u64(p, end, &first) || *p == end || **p != '-')
        return -1;
    (*p)++;
    bool has_last = mf__read_u64(p, end, &last);
    if (has_last && last < first)
        return -1; /* invalid: the whole field is ignored */
    if (first >= size)
        return 0;
    r->first = first;
    r->last = !has_last || last >= size ? size - 1 : last;
    return 1;
}

int mf__http_range_parse(const char *value, size_t len, uint64_t size,
                         mf_http_range_t *out)
{
    if (len < 6 || strncasecmp(value, "bytes", 5) != 0 || value[5] != '=')
        return MF_HTTP_RANGE_IGNORE;
    const char *p = value + 6, *end = value + len;
    int n = 0;
    bool any = false;
    for (;;) {
        p = mf__skip_ows(p, end);
        if (p == end)
            break;
        if (*p == ',') { /* an empty list element (RFC 9110 §5.6.1) */
            p++;
            continue;
        }
        mf_http_range_t r;
        int rc = mf__range_spec(&p, end, size, &r);
        if (rc < 0)
            return MF_HTTP_RANGE_IGNORE;
        any = true;
        if (rc == 1) {
            if (n == MF_HTTP_RANGES_MAX)
                return MF_HTTP_RANGE_IGNORE;
            out[n++] = r;
        }
        p = mf__skip_ows(p, end);
        if (p < end && *p != ',')
            return MF_HTTP_RANGE_IGNORE;
    }
    if (!any)
        return MF_HTTP_RANGE_IGNORE;
    return n ? n : MF_HTTP_RANGE_UNSATISFIABLE;
}

/* ---- entity tags --------------------------------------------------------- */

size_t mf__http_etag_format(char *out, size_t cap, time_t mtime, uint64_t size)
{
    int n = snprintf(out, cap, "\"%llx-%llx\"", (unsigned long long)mtime,
                     (unsigned long long)size);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap ? cap - 1 : 0;
}

/* The opaque part of an entity-tag at *p (quotes included), after an
 * optional W/; false when malformed. */
static bool mf__etag_next(const char **p, const char *end, const char **tag,
                          size_t *tag_len, bool *weak)
{
    const char *s = *p;
    *weak = end - s >= 2 && s[0] == 'W' && s[1] == '/';
    if (*weak)
        s += 2;
    if (s == end || *s != '"')
        return false;
    const char *close = memchr(s + 1, '"', (size_t)(end - s - 1));
    if (!close)
        return false;
    *tag = s;
    *tag_len = (size_t)(close + 1 - s);
    *p = close + 1;
    return true;
}

/* Strips a W/ from our own tag for the weak comparison. */
static void mf__etag_opaque(const char **etag, size_t *len)
{
    if (*len >= 2 && (*etag)[0] == 'W' && (*etag)[1] == '/') {
        *etag += 2;
        *len -= 2;
    }
}

bool mf__http_etag_list_match(const char *value, size_t len, const char *etag,
                              size_t etag_len)
{
    const char *p = mf__skip_ows(value, value + len), *end = value + len;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end - p == 1 && *p == '*')
        return true;
    mf__etag_opaque(&etag, &etag_len);
    bool matched = false;
    while (p < end) {
        if (*p == ',' || *p == ' ' || *p == '\t') {
            p++;
            continue;
        }
        const char *tag;
        size_t tag_len;
        bool weak;
        if (!mf__etag_next(&p, end, &tag, &tag_len, &weak))
            return false; /* malformed: matches nothing */
        if (tag_len == etag_len && memcmp(tag, etag, tag_len) == 0)
            matched = true;
        p = mf__skip_ows(p, end);
        if (p < end && *p != ',')
            return false;
    }
    return matched;
}

/* ---- HTTP-dates ---------------------------------------------------------- */

static bool mf__num(const char *p, int digits, int *v)
{
    int n = 0;
    for (int i = 0; i < digits; i++) {
        if (!mf__is_digit(p[i]))
            return false;
        n = n * 10 + (p[i] - '0');
    }
    *v = n;
    return true;
}

static int mf__month_of(const char *p)
{
    for (int i = 0; i < 12; i++)
        if (memcmp(p, mf__month[i], 3) == 0)
            return i;
    return -1;
}

/* "HH:MM:SS" at p into tm. */
static bool mf__clock(const char *p, struct tm *tm)
{
    return mf__num(p, 2, &tm->tm_hour) && p[2] == ':' &&
           mf__num(p + 3, 2, &tm->tm_min) && p[5] == ':' &&
           mf__num(p + 6, 2, &tm->tm_sec);
}

/* IMF-fixdate after "Sun, ": "06 Nov 1994 08:49:37 GMT" (24 bytes). */
static bool mf__date_fix(const char *p, size_t n, struct tm *tm)
{
    if (n != 24 || p[2] != ' ' || p[6] != ' ' || p[11] != ' ' || p[20] != ' ' ||
        memcmp(p + 21, "GMT", 3) != 0)
        return false;
    tm->tm_mon = mf__month_of(p + 3);
    if (!mf__num(p, 2, &tm->tm_mday) || !mf__num(p + 7, 4, &tm->tm_year))
        return false;
    tm->tm_year -= 1900;
    return mf__clock(p + 12, tm);
}

/* RFC 850 after "Sunday, ": "06-Nov-94 08:49:37 GMT" (22 bytes); a
 * two-digit year is read within 1970..2069. */
static bool mf__date_850(const char *p, size_t n, struct tm *tm)
{
    int yy;
    if (n != 22 || p[2] != '-' || p[6] != '-' || p[9] != ' ' || p[18] != ' ' ||
        memcmp(p + 19, "GMT", 3) != 0)
        return false;
    tm->tm_mon = mf__month_of(p + 3);
    if (!mf__num(p, 2, &tm->tm_mday) || !mf__num(p + 7, 2, &yy))
        return false;
    tm->tm_year = yy < 70 ? 100 + yy : yy;
    return mf__clock(p + 10, tm);
}

/* asctime: "Sun Nov  6 08:49:37 1994" (24 bytes). */
static bool mf__date_asctime(const char *p, size_t n, struct tm *tm)
{
    if (n != 24 || p[3] != ' ' || p[7] != ' ' || p[10] != ' ' || p[19] != ' ')
        return false;
    tm->tm_mon = mf__month_of(p + 4);
    char day[2] = {p[8] == ' ' ? '0' : p[8], p[9]};
    if (!mf__num(day, 2, &tm->tm_mday) || !mf__num(p + 20, 4, &tm->tm_year))
        return false;
    tm->tm_year -= 1900;
    return mf__clock(p + 11, tm);
}

bool mf__http_date_parse(const char *value, size_t len, time_t *t)
{
    const char *p = mf__skip_ows(value, value + len), *end = value + len;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t n = (size_t)(end - p);
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_mon = -1;
    const char *comma = memchr(p, ',', n);
    bool ok;
    if (!comma) {
        ok = mf__date_asctime(p, n, &tm);
    } else {
        size_t day = (size_t)(comma - p); /* "Sun" or "Sunday" */
        if (day < 3 || day > 9 || n < day + 2 || comma[1] != ' ')
            return false;
        const char *rest = comma + 2;
        size_t rest_n = n - day - 2;
        ok = day == 3 ? mf__date_fix(rest, rest_n, &tm)
                      : mf__date_850(rest, rest_n, &tm);
    }
    if (!ok || tm.tm_mon < 0 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return false;
    *t = timegm(&tm);
    return true;
}

size_t mf__http_date_format(char *out, size_t cap, time_t t)
{
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        memset(&tm, 0, sizeof tm);
    int n = snprintf(out, cap, "%s, %02d %s %04d %02d:%02d:%02d GMT",
                     mf__wkday[tm.tm_wday % 7], tm.tm_mday,
                     mf__month[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap ? cap - 1 : 0;
}

/* ---- If-Range ------------------------------------------------------------ */

bool mf__http_if_range_match(const char *value, size_t len, const char *etag,
                             size_t etag_len, time_t mtime)
{
    const char *p = mf__skip_ows(value, value + len), *end = value + len;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t n = (size_t)(end - p);
    bool weak = n >= 2 && p[0] == 'W' && p[1] == '/';
    if (n && (*p == '"' || weak))
        return n == etag_len && *p == '"' && memcmp(p, etag, n) == 0;
    time_t t;
    return mf__http_date_parse(p, n, &t) && t == mtime;
}
