#!/usr/bin/env python3
"""Does what the README's five-minute start asks of a new user, from the README's text.

Takes the README's first `toml` block (the dependencies) and first `rust` block (the
program), writes them into a new cargo project as `Cargo.toml` and `src/main.rs`, runs
it, and checks that it prints one origin call for the 101 calls it makes. The one edit:
`stampede = "0.1"` becomes a path dependency on this repository, which is not on
crates.io yet.

    python3 scripts/readme-quickstart.py

To build quickly it starts from the repository's `Cargo.lock` (the same versions) and
builds in its target directory (`CARGO_TARGET_DIR`, else `target/`), with the
workspace's dev profile. Standard library only.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCY = 'stampede = "0.1"'
EXPECTED = "origin calls: 1"


def first_block(text, language):
    """The first fenced block whose info string starts with `language`."""
    match = re.search(rf"^```{language}\b[^\n]*\n(.*?)^```", text, re.S | re.M)
    if not match:
        sys.exit(f"README.md has no ```{language} block")
    return match.group(1)


def dev_profiles(manifest):
    """The workspace's `[profile.dev…]` tables, so that the dependencies built for the
    workspace's tests are reused as they are."""
    tables = re.split(r"^(?=\[)", manifest, flags=re.M)
    return "".join(table for table in tables if table.startswith("[profile.dev"))


def main():
    readme = (ROOT / "README.md").read_text()
    dependencies = first_block(readme, "toml")
    program = first_block(readme, "rust")
    if dependencies.count(DEPENDENCY) != 1:
        sys.exit(f"the README's dependencies do not have the line `{DEPENDENCY}` once")
    dependencies = dependencies.replace(DEPENDENCY, f"stampede = {{ path = {str(ROOT)!r} }}")

    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    with tempfile.TemporaryDirectory(prefix="readme-quickstart-") as project:
        project = Path(project)
        (project / "src").mkdir()
        (project / "src" / "main.rs").write_text(program)
        (project / "Cargo.toml").write_text(
            '[package]\nname = "readme-quickstart"\nversion = "0.1.0"\nedition = "2024"\n\n'
            + dependencies
            + "\n[workspace]\n\n"
            + dev_profiles((ROOT / "Cargo.toml").read_text())
        )
        shutil.copy(ROOT / "Cargo.lock", project / "Cargo.lock")
        env = dict(os.environ, CARGO_TARGET_DIR=target)
        # The user's environment, not the repository's: no STAMPEDE_* of a caller.
        for name in [name for name in env if name.startswith("STAMPEDE_")]:
            del env[name]
        run = subprocess.run(
            ["cargo", "run", "--quiet", "--bin", "readme-quickstart"],
            cwd=project, env=env, stdout=subprocess.PIPE, text=True,
        )
    print(run.stdout, end="")
    if run.returncode != 0:
        sys.exit(f"the README's program failed (exit status {run.returncode})")
    if EXPECTED not in run.stdout:
        sys.exit(f"the README's program did not print `{EXPECTED}`")
    print(f"the README's five-minute start builds and runs: {EXPECTED}")


if __name__ == "__main__":
    main()
