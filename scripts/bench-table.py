#!/usr/bin/env python3
"""Turns one `cargo bench -p stampede-benches` run into the benchmark tables of docs/performance.md.

Reads criterion's output (`target/criterion/<group>/<contestant>/new/{benchmark,estimates}.json`)
and the counts the miss-storm and churn groups leave beside it (`<group>/notes.json`), and
prints Markdown: the machine line, one table per group, and the targets as ratios.

    cargo bench -p stampede-benches
    python3 scripts/bench-table.py                       # print the tables
    python3 scripts/bench-table.py --memory              # also run the memory measurement
    python3 scripts/bench-table.py --memory --write docs/performance.md
                                      # replace the text between the page's markers

Standard library only. Times are criterion's median estimate for each contestant.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = "<!-- bench-table:start -->"
END = "<!-- bench-table:end -->"

# Contestants in the order the benches define them; anything else follows, sorted.
ORDER = {
    "fresh_hit": ["moka::sync get", "moka::sync get, ttl", "moka::future get, ttl",
                  "stampede", "stampede, bare load", "cached", "cached by_key"],
    "contended_hit": ["moka::sync get", "moka::sync get, ttl", "moka::future get, ttl",
                      "stampede", "cached", "cached by_key"],
    "miss_storm": ["stampede", "moka::future get_with", "cached by_key", "cached", "no cache"],
    "churn": ["stampede", "moka::sync get_with", "moka::future get_with", "cached",
              "cached by_key"],
    "shared_hit": ["raw redis GET, same bytes", "stampede redis backend hit",
                   "stampede redis backend hit, 3-master cluster", "stampede memory hit",
                   "stampede tiered hit"],
}
CONTENDED_TASKS = 8
STORM_CALLERS = 10_000
STORM_ORIGIN_NS = 50e6
TARGETS = {"fresh vs moka": 1.15, "fresh vs by_key": 0.6, "storm": 1.2, "redis vs GET": 1.2,
           "churn vs moka": 1.2}


def criterion_dir():
    if os.environ.get("CRITERION_HOME"):
        return Path(os.environ["CRITERION_HOME"])
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else ROOT / "target") / "criterion"


def load_group(base, group):
    """{contestant: median ns per iteration}, and the newest estimate's mtime."""
    results, newest = {}, 0.0
    group_dir = base / group
    if not group_dir.is_dir():
        return results, newest
    for bench in group_dir.glob("*/new/benchmark.json"):
        estimates = bench.with_name("estimates.json")
        if not estimates.exists():
            continue
        meta = json.loads(bench.read_text())
        name = meta["function_id"] or meta["full_id"].split("/", 1)[-1]
        if meta.get("value_str"):
            name = f"{name}/{meta['value_str']}"
        results[name] = json.loads(estimates.read_text())["median"]["point_estimate"]
        newest = max(newest, estimates.stat().st_mtime)
    return results, newest


def ordered(group, results):
    known = [n for n in ORDER.get(group, []) if n in results]
    return known + sorted(n for n in results if n not in known)


def load_notes(base, group):
    path = base / group / "notes.json"
    return json.loads(path.read_text()) if path.exists() else {}


def duration(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.0f} {unit}"
    return f"{ns:.3g} ns" if ns < 100 else f"{ns:.0f} ns"


def spread(counts):
    """`1`, or `0–3` when the count varied between runs."""
    low, high = counts["min"], counts["max"]
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def machine_line(newest):
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rustc = "rustc (unknown version)"
    when = datetime.datetime.fromtimestamp(newest).strftime("%Y-%m-%d") if newest else "unknown"
    return (f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, {rustc}. Run: {when} (criterion's medians).")


def fresh_table(results):
    moka, by_key = results.get("moka::sync get"), results.get("cached by_key")
    rows = ["| fresh hit, one task | time per hit | × `moka::sync` get | × `cached` by_key |",
            "|---|---:|---:|---:|"]
    for name in ordered("fresh_hit", results):
        ns = results[name]
        rows.append(f"| {label(name)} | {duration(ns)} | {ratio(ns, moka)} | {ratio(ns, by_key)} |")
    return rows


def contended_table(results):
    by_key = results.get("cached by_key")
    rows = [f"| contended hits, {CONTENDED_TASKS} tasks on 2 workers | time per {CONTENDED_TASKS} hits "
            "| hits per second | throughput × `cached` by_key |",
            "|---|---:|---:|---:|"]
    for name in ordered("contended_hit", results):
        ns = results[name]
        per_second = CONTENDED_TASKS / ns * 1e9
        rows.append(f"| {label(name)} | {duration(ns)} | {per_second / 1e6:.1f} M "
                    f"| {ratio(by_key, ns)} |")
    return rows


def storm_table(results, notes):
    rows = [f"| miss storm, {STORM_CALLERS:,} callers, one cold key, 50 ms origin | wall time "
            "| × origin latency | origin calls per storm |",
            "|---|---:|---:|---:|"]
    for name in ordered("miss_storm", results):
        ns = results[name]
        calls = notes.get(name, {}).get("origin calls")
        if calls:
            counted = f"{spread(calls)} (in all {notes[name]['runs']} storms)"
        else:
            counted = "not recorded"
        rows.append(f"| {label(name)} | {duration(ns)} | {ns / STORM_ORIGIN_NS:.2f}× | {counted} |")
    return rows


def churn_table(results, notes):
    moka = results.get("moka::future get_with")
    rows = ["| churn, 100,000 keys through 10,000 entries | time per call | "
            "× `moka::future` get_with | origin calls per call |",
            "|---|---:|---:|---:|"]
    for name in ordered("churn", results):
        ns = results[name]
        note = notes.get(name, {})
        loads, calls = note.get("loads", {}).get("total"), note.get("origin calls", {}).get("total")
        misses = f"{calls / loads:.2f}" if loads and calls is not None else "not recorded"
        rows.append(f"| {label(name)} | {duration(ns)} | {ratio(ns, moka)} | {misses} |")
    return rows


def shared_table(results):
    get, memory = results.get("raw redis GET, same bytes"), results.get("stampede memory hit")
    rows = ["| a hit on the shared store (its own `redis-server`) | time per hit | × raw `GET` "
            "| × memory hit |",
            "|---|---:|---:|---:|"]
    for name in ordered("shared_hit", results):
        ns = results[name]
        on_redis = "redis" in name
        rows.append(f"| `{name}` | {duration(ns)} | {ratio(ns, get) if on_redis else '–'} "
                    f"| {'–' if on_redis else ratio(ns, memory)} |")
    return rows


def label(name):
    if name == "stampede":
        return "**stampede** (the `#[cached]` shape)"
    if name == "stampede, bare load":
        return "stampede, bare `Cache::load`"
    return f"`{name}`"


def verdict(met, how):
    return ("met" if met else "**missed**") + f" ({how})"


def targets(fresh, contended, storm, storm_notes, churn, shared):
    lines = []
    ours, moka, by_key = fresh.get("stampede"), fresh.get("moka::sync get"), fresh.get("cached by_key")
    if ours and moka:
        r = ours / moka
        lines.append(f"- Fresh hit within {TARGETS['fresh vs moka']}× of `moka::sync::Cache::get`: "
                     + verdict(r <= TARGETS["fresh vs moka"], f"{r:.2f}×"))
    if ours and by_key:
        r = ours / by_key
        lines.append(f"- Fresh hit at most {TARGETS['fresh vs by_key']}× the `cached` by_key hit: "
                     + verdict(r <= TARGETS["fresh vs by_key"], f"{r:.2f}×"))
    ours, by_key = contended.get("stampede"), contended.get("cached by_key")
    if ours and by_key:
        r = by_key / ours
        lines.append("- Contended hit throughput at least `cached` by_key's: "
                     + verdict(r >= 1.0, f"{r:.2f}× its throughput"))
    ours, floor = storm.get("stampede"), storm.get("no cache")
    calls = storm_notes.get("stampede", {}).get("origin calls")
    if calls:
        lines.append("- Miss storm makes exactly one origin call: "
                     + verdict(calls["min"] == calls["max"] == 1,
                               f"{spread(calls)} per storm, in all "
                               f"{storm_notes['stampede']['runs']} storms"))
    if ours and floor:
        # Scheduling: what the uncached storm takes beyond the origin's latency (spawning and
        # waking 10,000 tasks), which no cache can save.
        scheduling = max(floor - STORM_ORIGIN_NS, 0.0)
        bound = TARGETS["storm"] * STORM_ORIGIN_NS + scheduling
        lines.append(f"- Miss storm within {TARGETS['storm']}× the origin latency plus scheduling "
                     f"({TARGETS['storm']} × 50 ms + {duration(scheduling)} = {duration(bound)}): "
                     + verdict(ours <= bound, f"{duration(ours)}"))
    ours, moka = churn.get("stampede"), churn.get("moka::future get_with")
    if ours and moka:
        r = ours / moka
        lines.append(f"- Churn within {TARGETS['churn vs moka']}× `moka::future` get_with: "
                     + verdict(r <= TARGETS["churn vs moka"], f"{r:.2f}×"))
    ours, get = shared.get("stampede redis backend hit"), shared.get("raw redis GET, same bytes")
    if ours and get:
        r = ours / get
        lines.append(f"- Redis-backend hit within {TARGETS['redis vs GET']}× a raw `GET` of the "
                     "same bytes: " + verdict(r <= TARGETS["redis vs GET"],
                                               f"{r:.2f}×, {duration(ours - get)} of our own"))
    return lines


def memory_tables():
    run = subprocess.run(["cargo", "run", "--quiet", "--release", "-p", "stampede-benches",
                          "--bin", "memory"],
                         cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"the memory example failed:\n{run.stderr}")
    return run.stdout.strip().splitlines()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="criterion's output directory (default: target/criterion)")
    parser.add_argument("--memory", action="store_true",
                        help="also run the memory measurement (package stampede-benches, `--bin memory`) and add its tables")
    parser.add_argument("--note", default="",
                        help="a sentence about the run, printed under the machine line")
    parser.add_argument("--write", type=Path, metavar="PAGE",
                        help=f"replace the text between {START} and {END} in this file")
    args = parser.parse_args()
    base = args.dir or criterion_dir()

    fresh, t1 = load_group(base, "fresh_hit")
    contended, t2 = load_group(base, "contended_hit")
    storm, t3 = load_group(base, "miss_storm")
    churn, t4 = load_group(base, "churn")
    shared, t5 = load_group(base, "shared_hit")
    storm_notes, churn_notes = load_notes(base, "miss_storm"), load_notes(base, "churn")
    if not (fresh or contended or storm or churn or shared):
        sys.exit(f"no criterion results under {base}: run `cargo bench -p stampede-benches` first")

    out = [machine_line(max(t1, t2, t3, t4, t5)),
           "The figures are one run on this 2-core machine; the ratios are what carries over."
           + (f" {args.note}" if args.note else ""),
           ""]
    for table in (fresh_table(fresh) if fresh else None,
                  contended_table(contended) if contended else None,
                  storm_table(storm, storm_notes) if storm else None,
                  churn_table(churn, churn_notes) if churn else None,
                  shared_table(shared) if shared else None):
        if table:
            out += table + [""]
    out += ["Targets, as ratios from this run:", ""]
    out += targets(fresh, contended, storm, storm_notes, churn, shared) + [""]
    if args.memory:
        out += ["Memory (`cargo run --release -p stampede-benches --bin memory`, same machine):", ""]
        out += memory_tables() + [""]
    text = "\n".join(out).rstrip() + "\n"

    if args.write:
        readme = args.write.read_text()
        pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
        if not pattern.search(readme):
            sys.exit(f"{args.write} has no {START} … {END} markers")
        args.write.write_text(pattern.sub(lambda _: f"{START}\n{text}{END}", readme))
        print(f"updated {args.write}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
