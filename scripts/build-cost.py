#!/usr/bin/env python3
"""What `#[cached]` functions cost a user's build: a new binary crate depending on this
repository's `stampede` (default features) and Tokio, with N cached functions, each
returning a value type of its own, built once for its dependencies and then rebuilt
alone for each N. Prints the wall and CPU time of each rebuild.

    python3 scripts/build-cost.py [--release] [N ...]     (default: 1 11 21)

The crate starts from the repository's `Cargo.lock` (the versions the tests use) and
builds with Cargo's default profiles, as a user's crate would. The dependencies' first
build takes a few minutes; measure with nothing else running.
"""
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def source(n):
    lines = [
        "use stampede::cached;",
        "#[derive(Clone, Debug)]",
        "pub struct AppError;",
        "impl From<stampede::Error> for AppError {",
        "    fn from(_: stampede::Error) -> Self { AppError }",
        "}",
    ]
    for i in range(n):
        lines.append(
            f"#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)] pub struct V{i}(pub u64);"
        )
        lines.append('#[cached(fresh = "60s")]')
        lines.append(f"async fn f{i}(id: u64) -> Result<V{i}, AppError> {{ Ok(V{i}(id)) }}")
    lines.append("#[tokio::main]")
    lines.append("async fn main() {")
    for i in range(n):
        lines.append(f"    assert!(f{i}(1).await.is_ok());")
    lines.append("}")
    return "\n".join(lines) + "\n"


def build(project, release):
    command = ["cargo", "build", "-q"] + (["--release"] if release else [])
    env = dict(os.environ, CARGO_INCREMENTAL="0", CARGO_TARGET_DIR=str(project / "target"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(command, cwd=project, env=env, check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    args = sys.argv[1:]
    release = "--release" in args
    counts = [int(a) for a in args if a != "--release"] or [1, 11, 21]
    with tempfile.TemporaryDirectory(prefix="stampede-build-cost-") as tmp:
        project = pathlib.Path(tmp)
        (project / "src").mkdir()
        (project / "Cargo.toml").write_text(
            "[package]\nname = \"build-cost\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n"
            "[dependencies]\n"
            f"stampede = {{ path = \"{ROOT}\" }}\n"
            "tokio = { version = \"1\", features = [\"rt-multi-thread\", \"macros\"] }\n"
            "serde = { version = \"1\", features = [\"derive\"] }\n\n[workspace]\n"
        )
        shutil.copy(ROOT / "Cargo.lock", project / "Cargo.lock")
        (project / "src" / "main.rs").write_text(source(1))
        print("building the dependencies once ...", flush=True)
        build(project, release)
        for n in counts:
            (project / "src" / "main.rs").write_text(source(n))
            wall, cpu = build(project, release)
            print(f"{n:4} cached functions, a value type each: {wall:6.1f} s wall, {cpu:6.1f} s CPU")


if __name__ == "__main__":
    main()
