/*
 * test_bench_plot.c — --plot FILE.svg: well-formed SVG (read back by
 * Python's XML parser) with one polyline and legend entry per run, runs
 * kept across writes through the file's metadata, and files that are not
 * ours refused and left as they were.
 */
#include "bench_fixture.h"

static const char svg_check[] =
    "import sys, xml.dom.minidom as m\n"
    "path, labels = sys.argv[1], sys.argv[2].split('|')\n"
    "doc = m.parse(path)\n"
    "svg = doc.documentElement\n"
    "assert svg.tagName == 'svg', svg.tagName\n"
    "lines = svg.getElementsByTagName('polyline')\n"
    "assert len(lines) == len(labels), (len(lines), labels)\n"
    "texts = [t.firstChild.data for t in svg.getElementsByTagName('text')\n"
    "         if t.firstChild]\n"
    "for want in ['0%', '90%', '99%', '99.9%', '99.99%', '99.999%',\n"
    "             'Latency (ms)'] + labels:\n"
    "    assert want in texts, (want, texts)\n"
    "meta = svg.getElementsByTagName('metadata')[0].firstChild.data\n"
    "runs = [l for l in meta.split('\\n') if l]\n"
    "assert len(runs) == len(labels), runs\n"
    "colors = set()\n"
    "for line in lines:\n"
    "    pts = [tuple(map(float, p.split(',')))\n"
    "           for p in line.getAttribute('points').split()]\n"
    "    assert len(pts) > 10, pts\n"
    "    assert pts[0][0] == 70 and pts[-1][0] == 740, pts\n"
    "    assert all(70 <= x <= 740 and 50 <= y <= 480 for x, y in pts)\n"
    "    assert all(a[0] <= b[0] and a[1] >= b[1]\n"
    "               for a, b in zip(pts, pts[1:])), pts\n"
    "    colors.add(line.getAttribute('stroke'))\n"
    "assert len(colors) == len(lines)\n";

static bench_result_t *run_of(uint64_t scale)
{
    bench_result_t *r = bench_result_new("http", 0);
    for (uint64_t v = 1; v <= 10000; v++)
        mf_hdr_record(r->latency, v * scale);
    return r;
}

static int plot(const char *path, const char *label, uint64_t scale, char *err,
                size_t errlen)
{
    bench_opts_t o;
    fixture_opts(&o);
    o.label = (char *)label;
    bench_result_t *r = run_of(scale);
    int rc = bench_plot_write(path, &o, r, err, errlen);
    bench_result_free(r);
    return rc;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

TEST(runs_accumulate_in_one_plot)
{
    char dir[64], path[128], err[256] = "";
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/latency.svg", dir);
    ASSERT_EQ(plot(path, "baseline", 1000, err, sizeof err), 0);
    ASSERT_EQ(run_python(dir, svg_check, path, "baseline"), 0);
    /* a label with what XML and the metadata escape */
    ASSERT_EQ(plot(path, "<fast> & \"50%\"\tx", 500, err, sizeof err), 0);
    ASSERT_EQ(plot(path, NULL, 2000, err, sizeof err), 0);
    ASSERT_EQ(
        run_python(dir, svg_check, path, "baseline|<fast> & \"50%\"x|run 3"),
        0);
    const char *svg = slurp(path);
    ASSERT(strstr(svg, "run\t%3Cfast%3E %26 %2250%25%22%09x\t") != NULL);
    ASSERT(strstr(svg, "&lt;fast&gt; &amp; &quot;50%&quot;x</text>") != NULL);
    tmpdir_remove(dir);
}

TEST(a_file_that_is_not_ours_is_refused_and_kept)
{
    char dir[64], path[128], err[256] = "";
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/other.svg", dir);
    const char *other = "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n";
    FILE *f = fopen(path, "w");
    fputs(other, f);
    fclose(f);
    ASSERT_EQ(plot(path, "x", 1000, err, sizeof err), -1);
    char want[256];
    snprintf(want, sizeof want,
             "--plot %s: the file exists and is not a moonflow bench plot "
             "(left unchanged)",
             path);
    ASSERT_STR_EQ(err, want);
    ASSERT_STR_EQ(slurp(path), other);
    /* our marker with a damaged run line is not ours either */
    f = fopen(path, "w");
    fputs("<metadata id=\"moonflow-bench-runs\">\nrun\tx\t1:abc\n"
          "</metadata>\n",
          f);
    fclose(f);
    ASSERT_EQ(plot(path, "x", 1000, err, sizeof err), -1);
    ASSERT_STR_EQ(err, want);
    /* an empty file is a new plot */
    f = fopen(path, "w");
    fclose(f);
    ASSERT_EQ(plot(path, "x", 1000, err, sizeof err), 0);
    ASSERT_EQ(run_python(dir, svg_check, path, "x"), 0);
    tmpdir_remove(dir);
}

TEST(a_plot_takes_sixteen_runs)
{
    char dir[64], path[128], err[256] = "", label[16];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/many.svg", dir);
    for (int i = 1; i <= 16; i++) {
        snprintf(label, sizeof label, "c%d", i);
        if (plot(path, label, 100 * (uint64_t)i, err, sizeof err) != 0)
            MF_TEST_FAIL("run %d: %s", i, err);
    }
    char labels[256] = "";
    for (int i = 1; i <= 16; i++) {
        snprintf(label, sizeof label, "%sc%d", i > 1 ? "|" : "", i);
        strcat(labels, label);
    }
    ASSERT_EQ(run_python(dir, svg_check, path, labels), 0);
    ASSERT_EQ(plot(path, "c17", 1000, err, sizeof err), -1);
    char want[256];
    snprintf(want, sizeof want,
             "--plot %s: holds 16 runs already, the most a plot takes (use "
             "another file)",
             path);
    ASSERT_STR_EQ(err, want);
    tmpdir_remove(dir);
}

TEST(unwritable_path_and_empty_run_are_errors)
{
    char dir[64], path[128], err[256] = "", want[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/no/such/dir.svg", dir);
    ASSERT_EQ(plot(path, "x", 1000, err, sizeof err), -1);
    snprintf(want, sizeof want,
             "--plot %s: cannot write it: No such file or directory", path);
    ASSERT_STR_EQ(err, want);
    snprintf(path, sizeof path, "%s/empty.svg", dir);
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = bench_result_new("http", 0);
    ASSERT_EQ(bench_plot_write(path, &o, r, err, sizeof err), -1);
    snprintf(want, sizeof want, "--plot %s: the run recorded no latency", path);
    ASSERT_STR_EQ(err, want);
    ASSERT(access(path, F_OK) != 0);
    bench_result_free(r);
    tmpdir_remove(dir);
}

/* What the command checks before a run (bench.c): the same refusals as
 * after it, with nothing sent yet. */
TEST(outputs_are_checked_before_the_run)
{
    char dir[64], path[128], err[256] = "", want[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/new.svg", dir);
    ASSERT_EQ(bench_plot_check(path, err, sizeof err), 0);
    ASSERT(access(path, F_OK) != 0); /* a check creates nothing */
    ASSERT_EQ(bench_output_writable("--json", path, false, err, sizeof err),
              0);
    ASSERT_EQ(bench_plot_check(dir, err, sizeof err), -1);
    snprintf(want, sizeof want, "--plot %s: is a directory", dir);
    ASSERT_STR_EQ(err, want);
    snprintf(path, sizeof path, "%s/no/run.json", dir);
    ASSERT_EQ(bench_output_writable("--json", path, false, err, sizeof err),
              -1);
    snprintf(want, sizeof want,
             "--json %s: cannot create files in %s/no: No such file or "
             "directory",
             path, dir);
    ASSERT_STR_EQ(err, want);
    /* a bare name is in the working directory */
    ASSERT_EQ(bench_output_writable("--json", "run.json", false, err,
                                    sizeof err),
              access(".", W_OK | X_OK) == 0 ? 0 : -1);
    snprintf(path, sizeof path, "%s/other.svg", dir);
    FILE *f = fopen(path, "w");
    fputs("<svg/>\n", f);
    fclose(f);
    ASSERT_EQ(bench_plot_check(path, err, sizeof err), -1);
    ASSERT(strstr(err, "is not a moonflow bench plot") != NULL);
    ASSERT_STR_EQ(slurp(path), "<svg/>\n");
    tmpdir_remove(dir);
}
