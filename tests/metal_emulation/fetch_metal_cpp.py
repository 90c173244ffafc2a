#!/usr/bin/env python3
"""Provide Apple's metal-cpp headers for the Linux Metal emulation build.

The headers are never committed. They come from the PyPI *source* package
``pymetal-cpp`` (which carries Apple's metal-cpp with its LICENSE under
``thirdparty/metal-cpp/``) and are extracted into a build directory, once.

Usage::

    fetch_metal_cpp.py --dest BUILD/_deps/metal-cpp [--metal-cpp-dir DIR] [--sdist FILE]

The script prints the metal-cpp include directory (the folder holding
``Foundation/``, ``Metal/`` and ``QuartzCore/``) as the last line of stdout.

Order of preference:
1. ``--metal-cpp-dir`` or the ``METAL_CPP_DIR`` environment variable: an
   already extracted metal-cpp (or a folder containing one); nothing is fetched.
2. A copy already extracted under ``--dest`` by an earlier run (the cache).
3. ``--sdist``: a ``pymetal_cpp-*.tar.gz`` already on disk.
4. ``pip download`` of the pinned sdist into ``--dest``, then extraction.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

PACKAGE = "pymetal-cpp"
VERSION = "0.1.5"
SDIST_PREFIX = "pymetal_cpp-"
INNER = "thirdparty/metal-cpp"
MARKERS = ("Foundation/Foundation.hpp", "Metal/Metal.hpp")


def is_metal_cpp(path):
    return bool(path) and all(os.path.isfile(os.path.join(path, m)) for m in MARKERS)


def find_metal_cpp(root):
    """Return the metal-cpp folder at or below ``root`` (at most 3 levels down)."""
    if is_metal_cpp(root):
        return root
    if not os.path.isdir(root):
        return None
    base_depth = root.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, _ in os.walk(root):
        if dirpath.count(os.sep) - base_depth >= 3:
            dirnames[:] = []
            continue
        dirnames.sort()
        for d in dirnames:
            cand = os.path.join(dirpath, d)
            if is_metal_cpp(cand):
                return cand
    return None


def pip_download(download_dir):
    os.makedirs(download_dir, exist_ok=True)
    # --no-binary for this package only: the sdist is what carries the headers.
    # (":all:" would also force pip to build the package's build tools from source.)
    cmd = [sys.executable, "-m", "pip", "download", "%s==%s" % (PACKAGE, VERSION),
           "--no-deps", "--no-binary", PACKAGE, "-d", download_dir]
    print("fetch_metal_cpp: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def find_sdist(download_dir):
    if not os.path.isdir(download_dir):
        return None
    for name in sorted(os.listdir(download_dir)):
        if name.startswith(SDIST_PREFIX + VERSION) and name.endswith(".tar.gz"):
            return os.path.join(download_dir, name)
    return None


def extract(sdist, dest):
    """Extract only thirdparty/metal-cpp/ from the sdist into dest/metal-cpp."""
    final = os.path.join(dest, "metal-cpp")
    tmp = tempfile.mkdtemp(prefix=".extract-", dir=dest)
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = []
            for m in tar.getmembers():
                parts = m.name.split("/", 1)
                if len(parts) != 2 or not parts[1].startswith(INNER + "/"):
                    continue
                if not (m.isfile() or m.isdir()):
                    continue  # no links or devices from an archive
                rel = parts[1][len(INNER) + 1:]
                if not rel or rel.startswith("/") or ".." in rel.split("/"):
                    continue
                m.name = rel
                members.append(m)
            if not members:
                raise SystemExit("fetch_metal_cpp: %s has no %s/" % (sdist, INNER))
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp, members=members, **kwargs)
        if not is_metal_cpp(tmp):
            raise SystemExit("fetch_metal_cpp: extracted tree lacks %s" % ", ".join(MARKERS))
        if os.path.isdir(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    return final


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", required=True, help="cache/extraction directory")
    ap.add_argument("--metal-cpp-dir", default=os.environ.get("METAL_CPP_DIR", ""),
                    help="use this already extracted metal-cpp instead of fetching")
    ap.add_argument("--sdist", default="", help="use this pymetal_cpp sdist instead of downloading")
    args = ap.parse_args(argv)

    if args.metal_cpp_dir:
        found = find_metal_cpp(os.path.abspath(args.metal_cpp_dir))
        if not found:
            raise SystemExit("fetch_metal_cpp: no metal-cpp headers (%s) under %s"
                             % (", ".join(MARKERS), args.metal_cpp_dir))
        print(found)
        return 0

    dest = os.path.abspath(args.dest)
    cached = os.path.join(dest, "metal-cpp")
    if is_metal_cpp(cached):
        print(cached)
        return 0

    os.makedirs(dest, exist_ok=True)
    sdist = os.path.abspath(args.sdist) if args.sdist else None
    if not sdist:
        download_dir = os.path.join(dest, "download")
        sdist = find_sdist(download_dir)
        if not sdist:
            pip_download(download_dir)
            sdist = find_sdist(download_dir)
        if not sdist:
            raise SystemExit("fetch_metal_cpp: pip did not leave %s%s*.tar.gz in %s"
                             % (SDIST_PREFIX, VERSION, download_dir))
    print(extract(sdist, dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
