#!/usr/bin/env python3
"""Instructions per fresh hit: the function `#[cached]` makes against a raw
`moka::sync::Cache::get` with moka's default settings, both `u64 -> String`.

Builds `benches/hit_instructions.rs` and runs each contestant under callgrind
(`valgrind --tool=callgrind`) at two run lengths, counting only the frame that makes the
hits; the difference divided by the difference in hits is the cost of one hit, with
start-up cancelled out. Instruction counts do not move with the machine's load, so this
is the figure to compare across changes; criterion's times are the wall-clock view.

    python3 scripts/hit-instructions.py [--hits 20000 200000] [--keep DIR]

Standard library only; needs valgrind.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTESTANTS = ("stampede", "stampede-load", "stampede-tagged", "moka", "moka-ttl")


def build():
    # The bench profile: release code generation with debug symbols for callgrind_annotate.
    subprocess.run(
        ["cargo", "build", "--quiet", "--profile", "bench", "-p", "stampede-benches",
         "--bin", "hit-instructions"],
        cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR")
    binary = (Path(target) if target else ROOT / "target") / "release" / "hit-instructions"
    if not binary.exists():
        sys.exit(f"built, but {binary} is missing")
    return binary


def instructions(binary, contestant, hits, out_dir):
    out = Path(out_dir) / f"callgrind.{contestant}.{hits}.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--toggle-collect=*hit_instructions*measured*",
         "--dump-instr=yes", f"--callgrind-out-file={out}", str(binary), contestant, str(hits)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Only `measured` and what it calls: the stampede-clock thread ticks with wall time,
    # not with hits, and is left out.
    text = out.read_text()
    match = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.MULTILINE)
    if not match:
        sys.exit(f"no instruction total in {out}")
    return int(match.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hits", nargs=2, type=int, default=[20_000, 200_000],
                        metavar=("SHORT", "LONG"), help="the two run lengths")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep callgrind's output files here (for callgrind_annotate)")
    args = parser.parse_args()
    short, long = args.hits
    if not 0 < short < long:
        sys.exit("--hits takes two run lengths, the shorter first")
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    binary = build()
    out_dir = args.keep or tempfile.mkdtemp(prefix="hit-instructions.")
    os.makedirs(out_dir, exist_ok=True)
    per_hit = {}
    for contestant in CONTESTANTS:
        counts = [instructions(binary, contestant, hits, out_dir) for hits in (short, long)]
        per_hit[contestant] = (counts[1] - counts[0]) / (long - short)
    if not args.keep:
        shutil.rmtree(out_dir)
    print(f"instructions per fresh hit (callgrind, {short:,} and {long:,} hits):")
    print(f"  stampede (#[cached])      {per_hit['stampede']:8,.0f}")
    print(f"  moka::sync get (default)  {per_hit['moka']:8,.0f}")
    print(f"  ratio                     {per_hit['stampede'] / per_hit['moka']:8.2f}x")
    print("for reference:")
    print(f"  stampede, Cache::load     {per_hit['stampede-load']:8,.0f}")
    print(f"  the same, a tagged entry  {per_hit['stampede-tagged']:8,.0f}")
    print(f"  moka::sync get, ttl       {per_hit['moka-ttl']:8,.0f}")


if __name__ == "__main__":
    main()
