#!/usr/bin/env python3
"""Run a command and check its output: a subprocess test for ctest.

    run_expect.py [--expect-fail] [--expect REGEX]... -- COMMAND [ARGS...]

Passes when every REGEX matches the combined stdout+stderr and the exit status
is zero (or, with --expect-fail, non-zero)."""
import argparse
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--expect-fail", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command and args.command[0] == "--" else args.command
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    sys.stdout.write(r.stdout)
    ok = True
    if args.expect_fail and r.returncode == 0:
        print("run_expect: the command succeeded but was expected to fail")
        ok = False
    if not args.expect_fail and r.returncode != 0:
        print("run_expect: the command failed with status %d" % r.returncode)
        ok = False
    for pattern in args.expect:
        if not re.search(pattern, r.stdout, re.M):
            print("run_expect: output does not match %r" % pattern)
            ok = False
    print("run_expect: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
