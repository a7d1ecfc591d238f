#!/usr/bin/env python3
"""Checks ARCHITECTURE.md's "One detached miss on the redis backend, file by file" against
the code: every file it names exists (under `stampede-runtime/src`), and every function
or type it names in a step is defined in a file that step names. Prints the path's length
(files, and returns to a file already open) so a change that lengthens it shows.

    python3 scripts/architecture-path.py

Standard library only.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "stampede-runtime" / "src"
HEADING = "### One detached miss on the redis backend, file by file"
# Named in the text, but not items of the runtime: Redis commands, the attribute, the
# backend's constructor.
NOT_ITEMS = {"MGET", "#[cached]", "Backend::redis", "SharedStore"}


def section(text):
    start = text.index(HEADING)
    end = text.index("\n## ", start)
    return text[start:end]


def steps(text):
    """The numbered steps, each its text joined onto one line."""
    found, current = [], None
    for line in section(text).splitlines():
        numbered = re.match(r"^(\d+)\. (.*)", line)
        if numbered:
            current = [numbered.group(2)]
            found.append(current)
        elif current is not None and line.startswith("   "):
            current.append(line.strip())
        elif not line.strip():
            current = None
    return [" ".join(step) for step in found]


def defined(name, files):
    """Whether `name` (a function, or `Type::function`, or a type) is defined in one of
    `files`."""
    last = name.split("::")[-1]
    if last[:1].isupper():
        pattern = rf"\b(struct|enum|trait|type)\s+{re.escape(last)}\b"
    else:
        pattern = rf"\bfn\s+{re.escape(last)}\b"
    return any(re.search(pattern, path.read_text()) for path in files)


def main():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    problems, opened, returns, last = [], [], 0, None
    for number, step in enumerate(steps(text), 1):
        quoted = re.findall(r"`([^`]+)`", step)
        paths = [q for q in quoted if q.endswith(".rs")]
        if not paths:
            problems.append(f"step {number} names no file")
            continue
        files = []
        for path in paths:
            full = SOURCE / path
            if not full.exists():
                problems.append(f"step {number}: `{path}` does not exist")
                continue
            files.append(full)
            if path in opened and path != last:
                returns += 1
            if path not in opened:
                opened.append(path)
            last = path
        for name in quoted:
            if name.endswith(".rs") or name in NOT_ITEMS:
                continue
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)?", name):
                continue
            if not defined(name, files):
                problems.append(f"step {number}: `{name}` is not defined in {', '.join(paths)}")
    for problem in problems:
        print(problem)
    print(f"the path of one call: {len(opened)} files, {returns} returns to a file already open")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
