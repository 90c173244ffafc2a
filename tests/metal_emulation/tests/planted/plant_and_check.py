#!/usr/bin/env python3
"""Plant a bug in a copy of a real kernel and run the MSL-subset check on the copy:

    plant_and_check.py CLANG PROJECT_METAL_DIR FILE OLD NEW

The copy is checked as metal/FILE (with the project's metal/ headers on the include path); the
exit status and output are the checker's."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    clang, metal_dir, name, old, new = sys.argv[1:6]
    with tempfile.TemporaryDirectory(prefix="planted") as tmp:
        out = os.path.join(tmp, "metal", name)
        subprocess.run([sys.executable, os.path.join(HERE, "plant.py"), os.path.join(metal_dir, name), out, old, new],
                       check=True)
        checker = os.path.join(HERE, "..", "..", "mslcheck", "msl_subset_check.py")
        return subprocess.run([sys.executable, checker, "--clang", clang, "-I", metal_dir, "--display-root", tmp,
                               out]).returncode


if __name__ == "__main__":
    sys.exit(main())
