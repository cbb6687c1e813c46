/*
 * lua/bench/bench_plot.c — --plot FILE.svg: latency by percentile, one line per
 * run.
 *
 * The x axis is log-scaled in 1/(1-p) (0%, 90%, 99% ... 99.999% evenly
 * apart), the y axis linear in ms from 0 with round ticks. Every run's
 * points (wrk2's spectrum of its latency) are also kept in the file's
 * <metadata id="moonflow-bench-runs"> element, one line per run:
 *     run<TAB>LABEL<TAB>MS:PERCENT MS:PERCENT ...
 * (LABEL with %, TAB, newline, <, >, &, " and ' as %XX). When FILE holds
 * such metadata, its runs are kept and this one added (at most
 * PLOT_MAX_RUNS); any other existing file is refused, never overwritten.
 * The file is written beside itself and renamed into place.
 *
 * Owns: the runs it reads and the file it writes. Calls: bench_spectrum.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PLOT_MAX_RUNS 16
#define PLOT_MAX_FILE (8u << 20)
#define METADATA_OPEN "<metadata id=\"moonflow-bench-runs\">"
#define METADATA_CLOSE "</metadata>"

typedef struct plot_run {
    char *label;
    size_t n;
    double ms[BENCH_SPECTRUM_MAX];
    double percent[BENCH_SPECTRUM_MAX];
} plot_run_t;

typedef struct plot {
    plot_run_t runs[PLOT_MAX_RUNS];
    size_t nruns;
} plot_t;

/* Plot area and size, in SVG units. */
enum { W = 960, H = 540, LEFT = 70, RIGHT = 740, TOP = 50, BOTTOM = 480 };
#define X_DECADES 5.0 /* 1/(1-p) from 1 to 10^5: 0% .. 99.999% */

static void plot_free(plot_t *p)
{
    for (size_t i = 0; i < p->nruns; i++)
        free(p->runs[i].label);
    mf_free(p);
}

/* ---- metadata: reading ------------------------------------------------ */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static char *decode_label(const char *s, size_t n)
{
    char *out = malloc(n + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hex_digit(s[i + 1])) >= 0 &&
            (lo = hex_digit(s[i + 2])) >= 0) {
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = 0;
    return out;
}

/* "run\tLABEL\tMS:PCT ..." (end: the end of the line): 0, or -1. */
static int parse_run(const char *line, const char *end, plot_run_t *run)
{
    if (strncmp(line, "run\t", 4) != 0)
        return -1;
    const char *label = line + 4, *tab = memchr(label, '\t', end - label);
    if (tab == NULL)
        return -1;
    run->label = decode_label(label, (size_t)(tab - label));
    if (run->label == NULL)
        return -1;
    const char *s = tab + 1;
    while (s < end && run->n < BENCH_SPECTRUM_MAX) {
        char *next;
        double ms = strtod(s, &next);
        if (next == s || *next != ':')
            return -1;
        s = next + 1;
        double pct = strtod(s, &next);
        if (next == s || !isfinite(ms) || !isfinite(pct))
            return -1;
        run->ms[run->n] = ms;
        run->percent[run->n++] = pct;
        s = next;
        while (s < end && *s == ' ')
            s++;
    }
    return s < end ? -1 : 0;
}

/* The runs of the metadata text [body, stop): 0, -1 (not ours), or -2
 * (more runs than a plot takes). */
static int parse_runs(const char *body, const char *stop, plot_t *p)
{
    for (const char *s = body; s < stop;) {
        const char *eol = memchr(s, '\n', (size_t)(stop - s));
        const char *end = eol ? eol : stop;
        if (end > s) {
            if (p->nruns == PLOT_MAX_RUNS)
                return -2;
            if (parse_run(s, end, &p->runs[p->nruns++]) != 0)
                return -1;
        }
        s = end + 1;
    }
    return 0;
}

/* The whole file, NUL-ended; NULL with errno (ENOENT: none). */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = malloc(PLOT_MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, PLOT_MAX_FILE + 1, f) : 0;
    int failed = buf == NULL || ferror(f) || n > PLOT_MAX_FILE;
    fclose(f);
    if (failed) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int load_runs(const char *path, plot_t *p, char *err, size_t errlen)
{
    size_t len;
    char *text = read_file(path, &len);
    if (text == NULL && errno == ENOENT)
        return 0;
    if (text == NULL) {
        snprintf(err, errlen, "--plot %s: cannot read it: %s", path,
                 errno == EFBIG ? "larger than 8 MiB" : strerror(errno));
        return -1;
    }
    if (len == 0) { /* an empty file (mktemp's) takes a first run */
        free(text);
        return 0;
    }
    const char *open = strstr(text, METADATA_OPEN), *close = NULL;
    if (open != NULL)
        close = strstr(open, METADATA_CLOSE);
    int rc = close ? parse_runs(open + strlen(METADATA_OPEN), close, p) : -1;
    free(text);
    if (rc == 0 && p->nruns == PLOT_MAX_RUNS)
        rc = -2;
    if (rc == -2)
        snprintf(err, errlen,
                 "--plot %s: holds %d runs already, the most a plot takes "
                 "(use another file)",
                 path, PLOT_MAX_RUNS);
    else if (rc != 0)
        snprintf(err, errlen,
                 "--plot %s: the file exists and is not a moonflow bench "
                 "plot (left unchanged)",
                 path);
    return rc == 0 ? 0 : -1;
}

/* ---- this run ---------------------------------------------------------- */

static int add_run(plot_t *p, const bench_opts_t *o, const bench_result_t *r)
{
    bench_spectrum_point_t *points =
        mf_xcalloc(BENCH_SPECTRUM_MAX, sizeof *points);
    size_t n = bench_spectrum(r->latency, points, BENCH_SPECTRUM_MAX);
    plot_run_t *run = &p->runs[p->nruns];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "run %zu", p->nruns + 1);
    run->label = strdup(o->label ? o->label : fallback);
    if (run->label == NULL) {
        mf_free(points);
        return -1;
    }
    p->nruns++;
    for (size_t i = 0; i < n; i++) {
        run->ms[i] = (double)points[i].value_ns / 1e6;
        run->percent[i] = points[i].percentile;
    }
    run->n = n;
    mf_free(points);
    return 0;
}

/* ---- the SVG ----------------------------------------------------------- */

static const char *const colors[PLOT_MAX_RUNS] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
    "#8c6d31", "#843c39", "#7b4173", "#3182bd"};

static void xml_text(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '&':
            fputs("&amp;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        default:
            if ((unsigned char)*s >= 0x20)
                fputc(*s, out);
        }
    }
}

static void metadata_label(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || strchr("%<>&\"'", c) != NULL)
            fprintf(out, "%%%02X", c);
        else
            fputc(c, out);
    }
}

static void write_metadata(FILE *out, const plot_t *p)
{
    fprintf(out, "%s\n", METADATA_OPEN);
    for (size_t i = 0; i < p->nruns; i++) {
        const plot_run_t *run = &p->runs[i];
        fputs("run\t", out);
        metadata_label(out, run->label);
        fputc('\t', out);
        for (size_t k = 0; k < run->n; k++)
            fprintf(out, "%s%.9g:%.9g", k ? " " : "", run->ms[k],
                    run->percent[k]);
        fputc('\n', out);
    }
    fprintf(out, "%s\n", METADATA_CLOSE);
}

static double x_of(double percent)
{
    double tail = 1.0 - percent / 100.0;
    double decades = tail > 0 ? log10(1.0 / tail) : X_DECADES;
    if (decades > X_DECADES)
        decades = X_DECADES;
    return LEFT + (RIGHT - LEFT) * decades / X_DECADES;
}

/* A round step (1, 2 or 5 times a power of ten) giving about 5 ticks up
 * to top. */
static double tick_step(double top)
{
    double raw = top / 5, power = pow(10, floor(log10(raw)));
    double unit = raw / power;
    return power * (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10);
}

static void write_axes(FILE *out, double top, double step)
{
    static const char *const xlabels[] = {"0%",    "90%",    "99%",
                                          "99.9%", "99.99%", "99.999%"};
    for (int d = 0; d <= (int)X_DECADES; d++) {
        double x = LEFT + (RIGHT - LEFT) * d / X_DECADES;
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                "stroke=\"#ddd\"/>\n<text x=\"%.1f\" y=\"%d\" "
                "text-anchor=\"middle\">%s</text>\n",
                x, TOP, x, BOTTOM, x, BOTTOM + 20, xlabels[d]);
    }
    for (int k = 0; k * step <= top * (1 + 1e-9); k++) {
        double y = BOTTOM - (BOTTOM - TOP) * (k * step) / top;
        fprintf(out,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                "stroke=\"#ddd\"/>\n<text x=\"%d\" y=\"%.1f\" "
                "text-anchor=\"end\">%g</text>\n",
                LEFT, y, RIGHT, y, LEFT - 6, y + 4, k * step);
    }
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"none\" stroke=\"#333\"/>\n"
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">Percentile"
            "</text>\n<text x=\"20\" y=\"%d\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 20 %d)\">Latency (ms)</text>\n",
            LEFT, TOP, RIGHT - LEFT, BOTTOM - TOP, (LEFT + RIGHT) / 2,
            BOTTOM + 45, (TOP + BOTTOM) / 2, (TOP + BOTTOM) / 2);
}

static void write_run(FILE *out, const plot_run_t *run, size_t i, double top)
{
    fprintf(out,
            "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"%s\" "
            "points=\"",
            colors[i]);
    for (size_t k = 0; k < run->n; k++) {
        double y = BOTTOM - (BOTTOM - TOP) * run->ms[k] / top;
        fprintf(out, "%s%.1f,%.1f", k ? " " : "", x_of(run->percent[k]), y);
    }
    fprintf(out, "\"/>\n");
    double ly = TOP + 10 + 22.0 * (double)i;
    fprintf(out,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
            "stroke=\"%s\" stroke-width=\"2\"/>\n<text x=\"%d\" "
            "y=\"%.1f\">",
            RIGHT + 15, ly, RIGHT + 40, ly, colors[i], RIGHT + 46, ly + 4);
    xml_text(out, run->label);
    fprintf(out, "</text>\n");
}

static void write_svg(FILE *out, const plot_t *p)
{
    double top = 0;
    for (size_t i = 0; i < p->nruns; i++)
        for (size_t k = 0; k < p->runs[i].n; k++)
            top = p->runs[i].ms[k] > top ? p->runs[i].ms[k] : top;
    double step = tick_step(top > 0 ? top : 1);
    top = step * ceil((top > 0 ? top : 1) / step);
    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n",
            W, H, W, H);
    write_metadata(out, p);
    fprintf(out,
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" "
            "font-size=\"16\">Latency by percentile</text>\n",
            W, H, (LEFT + RIGHT) / 2);
    write_axes(out, top, step);
    for (size_t i = 0; i < p->nruns; i++)
        write_run(out, &p->runs[i], i, top);
    fprintf(out, "</svg>\n");
}

/* Writes path's new content beside it, then renames it into place. */
static int save(const char *path, const plot_t *p, char *err, size_t errlen)
{
    size_t n = strlen(path) + 8;
    char *tmp = mf_xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    int rc = -1;
    if (out != NULL) {
        write_svg(out, p);
        int failed = fflush(out) != 0 || ferror(out);
        failed |= fclose(out) != 0;
        rc = failed ? -1 : rename(tmp, path);
    }
    if (rc != 0) {
        snprintf(err, errlen, "--plot %s: cannot write it: %s", path,
                 strerror(errno));
        remove(tmp);
    }
    mf_free(tmp);
    return rc;
}

int bench_plot_check(const char *path, char *err, size_t errlen)
{
    /* the new plot replaces the file by a rename: the directory too */
    if (bench_output_writable("--plot", path, true, err, errlen) < 0)
        return -1;
    plot_t *p = mf_xcalloc(1, sizeof *p);
    int rc = load_runs(path, p, err, errlen);
    plot_free(p);
    return rc;
}

int bench_plot_write(const char *path, const bench_opts_t *o,
                     const bench_result_t *r, char *err, size_t errlen)
{
    plot_t *p = mf_xcalloc(1, sizeof *p);
    int rc = load_runs(path, p, err, errlen);
    if (rc == 0 && mf_hdr_count(r->latency) == 0) {
        snprintf(err, errlen, "--plot %s: the run recorded no latency", path);
        rc = -1;
    }
    if (rc == 0 && add_run(p, o, r) != 0) {
        snprintf(err, errlen, "--plot %s: out of memory", path);
        rc = -1;
    }
    if (rc == 0)
        rc = save(path, p, err, errlen);
    plot_free(p);
    return rc;
}
