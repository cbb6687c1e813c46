#!/usr/bin/env python3
"""How old each table in bench/results/ is against the code it measures.

A results file is measured at a commit: the one `make bench` names in the
file's first line ("> make bench at COMMIT, ..."; bench/run writes it), or,
for a file no run has stamped, the commit its "older" line names, else the
commit that last changed the file (it was measured no later than that). It is older than the code when a later
commit touches one of the paths it measures (MEASURES below; commits that
touch only bench/results/ do not count). Such a file must say so at its
top, in a line that starts "> Older than the code:".

  bench/age.py            a line per file: fresh, or older and by what
  bench/age.py --mark     writes, refreshes or removes that line in each file
  bench/age.py --check    exits 1 naming each older file without the line,
                          or a fresh one that still carries it (ctest:
                          bench.results_age)
  bench/age.py --stamp LINE --newer-than FILE
                          puts LINE ("> make bench at COMMIT, ...") first
                          in each table written after FILE was (bench/run,
                          after each step)

Outside a git checkout, or in one without the history (a shallow clone), it
says so and exits 0: there is nothing to compare."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
STAMP = re.compile(r"^> make bench at ([0-9a-f]{7,40})\b")
OLDER = "> Older than the code:"
OLDER_AT = re.compile(r"^> Older than the code: measured (at|no later than) "
                      r"([0-9a-f]{7,40})\b")

# What each table measures: its bench script and the code on its path.
SERVER = ["core/engine", "core/net", "core/http", "lua/host", "lua/serve",
          "lua/engine", "lua/http"]
MEASURES = {
    "engine": ["bench/engine.c", "core/engine"],
    "http_hello": ["bench/http/compare.py", "bench/lua", "examples"] + SERVER,
    "http_latency": ["bench/http/fixedrate.py", "bench/http/rate.c",
                     "bench/lua", "examples"] + SERVER,
    "http_fanout": ["bench/http/fanout.py", "bench/lua"] + SERVER,
    "http_idle_rss": ["bench/http/idle_rss.py"] + SERVER,
    "http_mallocs": ["bench/http/mallocs.py", "bench/malloc_count.c",
                     "examples"] + SERVER,
    "http2_hello": ["bench/http2", "bench/lua"] + SERVER,
    "static": ["bench/static"] + SERVER,
    "compress": ["bench/compress", "bench/lua"] + SERVER,
    "redis": ["bench/redis/compare_redis.py", "bench/redis/get_load.lua",
              "bench/lua/redis_get.lua", "core/redis", "lua/redis"] + SERVER,
    "redis_cluster": ["bench/redis/compare_cluster.py",
                      "bench/lua/redis_get.lua", "core/redis",
                      "lua/redis"] + SERVER,
    "upstream_cost": ["bench/upstream"] + SERVER,
    "mysql": ["bench/mysql", "bench/lua/mysql_point.lua", "core/mysql",
              "lua/mysql"] + SERVER,
    "mysql_techempower": ["bench/mysql/techempower.py",
                          "bench/mysql/compare_mysql.py",
                          "bench/mysql/blocking_server.c", "bench/lua/_world.lua",
                          "bench/lua/te_db.lua", "bench/lua/te_queries.lua",
                          "bench/lua/te_updates.lua", "core/mysql",
                          "lua/mysql"] + SERVER,
    "kafka": ["bench/kafka", "core/kafka", "lua/kafka"] + SERVER,
    "load": ["bench/load/compare_load.py", "bench/load/load_driver.c",
             "core/load", "lua/load", "lua/bench", "core/http", "core/net",
             "core/engine"],
    "load_redis": ["bench/load/compare_redis.py", "bench/load/redis_get.lua",
                   "core/load", "lua/load", "lua/bench", "core/redis",
                   "lua/redis", "core/net", "core/engine"],
    "shared": ["bench/shared", "core/shared", "lua/moonflow", "lua/ngx_ffi",
               "lua/host", "lua/serve"],
    "metrics": ["bench/metrics", "bench/lua"] + SERVER,
    "cosocket": ["bench/cosocket", "lua/net", "lua/moonflow"] + SERVER,
    "jit_fraction": ["bench/lua/jit_fraction.py", "lua/util",
                     "lua/moonflow"] + SERVER,
}


def git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args), check=True,
                          capture_output=True, text=True).stdout.strip()


def measured_at(path, lines):
    for line in lines[:3]:
        m = STAMP.match(line)
        if m:
            return git("rev-parse", m.group(1) + "^{commit}"), "stamped"
    for line in lines[:3]:  # marked before: the mark's own commit is not it
        m = OLDER_AT.match(line)
        if m:
            how = "stamped" if m.group(1) == "at" else "committed"
            return git("rev-parse", m.group(2) + "^{commit}"), how
    last = git("log", "-1", "--format=%H", "--", os.path.relpath(path, ROOT))
    return last, "committed"


def history(since, cache={}):
    """The commits after SINCE (not its ancestors), newest first, each with
    the files it changed (merges list none: their parents' commits are
    there)."""
    if since in cache:
        return cache[since]
    out = git("log", "--format=@%H", "--name-only", since + "..HEAD")
    commits = []
    for line in out.split("\n"):
        if line.startswith("@"):
            commits.append((line[1:], []))
        elif line:
            commits[-1][1].append(line)
    cache[since] = commits
    return commits


def under(f, paths):
    return [p for p in paths if f == p or f.startswith(p + "/")]


def code_commits_since(commit, paths):
    """Commits after COMMIT that touch PATHS, newest first, each with the
    paths it touched; a commit that changes only bench/results/ is the
    results' own, not the code's."""
    newer = []
    for sha, files in history(commit):
        if all(f.startswith("bench/results/") for f in files):
            continue
        hit = {p for f in files for p in under(f, paths)}
        if hit:
            newer.append((sha, hit))
    return newer


def older_line(commit, how, newer):
    touched = set().union(*(hit for _, hit in newer))
    head = git("log", "-1", "--format=%h %cs", newer[0][0])
    word = "measured at" if how == "stamped" else "measured no later than"
    return "%s %s %s; %d later commit%s changed %s (the newest: %s). " \
           "Rerun `make bench` before reading these figures as today's.\n" % (
               OLDER, word, commit[:7], len(newer),
               "" if len(newer) == 1 else "s", ", ".join(sorted(touched)),
               head)


def examine(stem):
    path = os.path.join(RESULTS, stem + ".md")
    with open(path) as f:
        lines = f.readlines()
    commit, how = measured_at(path, lines)
    newer = code_commits_since(commit, MEASURES[stem]) if commit else []
    want = older_line(commit, how, newer) if newer else None
    return path, lines, commit, how, want


def rewrite(path, lines, want):
    kept = [l for l in lines if not l.startswith(OLDER)]
    at = 1 if kept and STAMP.match(kept[0]) else 0
    if want:
        kept.insert(at, want)
    if kept != lines:
        with open(path, "w") as f:
            f.writelines(kept)
        return True
    return False


def stamp(line, marker):
    since = os.stat(marker).st_mtime
    for name in sorted(os.listdir(RESULTS)):
        path = os.path.join(RESULTS, name)
        if not name.endswith(".md") or os.stat(path).st_mtime < since:
            continue
        with open(path) as f:
            lines = [l for l in f.readlines()
                     if not STAMP.match(l) and not l.startswith(OLDER)]
        while lines and not lines[0].strip():
            lines.pop(0)
        with open(path, "w") as f:
            f.writelines([line.rstrip("\n") + "\n\n"] + lines)
        print("bench/age.py: stamped " + name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--mark", action="store_true")
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--stamp", metavar="LINE")
    ap.add_argument("--newer-than", metavar="FILE")
    args = ap.parse_args()
    if args.stamp:
        if not STAMP.match(args.stamp) or not args.newer_than:
            ap.error("--stamp takes '> make bench at COMMIT, ...' "
                     "and --newer-than FILE")
        stamp(args.stamp, args.newer_than)
        return 0
    try:
        git("rev-parse", "HEAD")
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("bench/age.py: not a git checkout: nothing to compare")
        return 0
    present = {f[:-3] for f in os.listdir(RESULTS) if f.endswith(".md")}
    unknown = sorted(present - set(MEASURES))
    if unknown:
        print("bench/age.py: no MEASURES entry for: " + ", ".join(unknown))
        return 1
    bad = []
    for stem in sorted(present):
        try:
            path, lines, commit, how, want = examine(stem)
        except subprocess.CalledProcessError as e:  # a shallow clone
            print("bench/age.py: %s: history not here (%s): nothing to "
                  "compare" % (stem, e.stderr.strip()))
            return 0
        has = any(l.startswith(OLDER) for l in lines)
        if args.mark:
            changed = rewrite(path, lines, want)
            print("%-14s %s%s" % (stem, "older" if want else "fresh",
                                  " (rewritten)" if changed else ""))
        elif args.check:
            if bool(want) != has:
                bad.append(stem)
        else:
            print("%-14s %s %s: %s" % (stem, how, commit[:7],
                                       want.strip() if want else "fresh"))
    if bad:
        print("bench/age.py: these results do not say how old they are "
              "against the code: %s\n  run `python3 bench/age.py --mark` "
              "(or `make bench`) and commit the result" % ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
