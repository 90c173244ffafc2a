#!/usr/bin/env python3
"""Copy a real .metal kernel with one planted bug: plant.py SRC OUT OLD NEW.

OLD must occur exactly once in SRC (so a kernel edit that removes it breaks the build loudly
instead of silently testing an unplanted copy)."""
import os
import sys


def main():
    src, out, old, new = sys.argv[1:5]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    if text.count(old) != 1:
        print("plant.py: %r occurs %d times in %s (expected once)" % (old, text.count(old), src), file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
