#!/usr/bin/env python3
"""Write the emulation's stand-in for mpsgrad.metallib: the kernels a set of .metal files defines.

On Apple platforms `metal` + `metallib` turn the kernels into mpsgrad.metallib, which the backend
finds on disk and loads with newLibraryWithURL:. The emulation build writes this file instead, so
the backend's real lookup (next to the binary, then the build tree) runs unchanged: the fake
device opens the file and accepts it only if it lists exactly the kernels linked into the process
(a library of another build, or a stale one, is refused with the difference). Kernel names come
from msl2cpp.py's own parse of each file, so they are the names the translation registers.

Usage: make_metallib.py -o OUT [-I DIR]... [--display-root DIR] file.metal...
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim"))
import msl2cpp  # noqa: E402

HEADER = "mtlemu kernel library 1"  # mock/src/device_config.h: kLibraryManifestHeader


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("-I", dest="include_dirs", action="append", default=[])
    ap.add_argument("--display-root", default=os.getcwd())
    args = ap.parse_args(argv)
    lines = [HEADER]
    for path in sorted(args.files):
        display = os.path.relpath(path, args.display_root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            _, kernels, _ = msl2cpp.translate(path, text, display, args.include_dirs)
        except msl2cpp.TranslationError as e:
            print("%s:%s: error: %s" % (display, e.line, e), file=sys.stderr)
            return 1
        lines.append("# " + display)
        lines.extend(sorted(k.host_name for k in kernels))
    content = "\n".join(lines) + "\n"
    old = None
    if os.path.exists(args.output):
        with open(args.output, encoding="utf-8") as f:
            old = f.read()
    if old != content:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
