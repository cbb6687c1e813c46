#!/usr/bin/env python3
"""Runs a tsan.* test command with ThreadSanitizer's reports written to
files (TSAN_OPTIONS log_path, in a temporary folder: every process the test
starts, servers included, writes there) and fails when one was written,
printing it. A report in a server the test kills, or one whose exit status
the test does not read, still fails the test: a twin passes with 0 reports.

  run_checked.py COMMAND [ARGS...]
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    folder = tempfile.mkdtemp(prefix="mf_tsan_")
    try:
        options = [o for o in [os.environ.get("TSAN_OPTIONS", ""),
                               "log_path=" + os.path.join(folder, "report")]
                   if o]
        env = dict(os.environ, TSAN_OPTIONS=":".join(options))
        status = subprocess.call(sys.argv[1:], env=env)
        reports = sorted(glob.glob(os.path.join(folder, "report*")))
        for path in reports:
            with open(path, errors="replace") as f:
                sys.stderr.write("--- %s\n%s" % (os.path.basename(path),
                                                 f.read()))
        if reports:
            sys.stderr.write("FAIL %d ThreadSanitizer report file(s)\n"
                             % len(reports))
            return 1
        return status
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
