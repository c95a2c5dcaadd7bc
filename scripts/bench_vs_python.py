#!/usr/bin/env python3
"""Whole commands as a user runs them, beside Python's `json` and polars in the same run
(issue 32).

Each round runs every command once, in an order shuffled from round to round (seeded, so runs
repeat), with its standard output going to a file (as `copus analyze F --json > out` does for a
user), and prints, per command, the median and best wall time, lines/s of the median and the
median's ratio to the Python loop's median. The baselines are whole processes too:

  python-json   python -c "import json; [json.loads(l) for l in open(F)]"
  polars        python -c "import polars; polars.read_ndjson(F)"   (skipped without polars)

and `cat` of `analyze --json`'s output into the same file: what writing those bytes costs alone,
the floor of any command that writes them (on a VM whose page cache throttles writers this
swings from run to run).

  scripts/bench_vs_python.py FILE [--rounds N] [--settle-ms MS] [--copus PATH]
                              [--copus-before PATH] [--python PATH] [--json]

FILE: a stats protocol file, e.g. `python3 scripts/gen_stats.py FILE 100000 --layers 4`.
--copus-before: an earlier build whose commands run in the same rounds (named "before: ...").
--python: the interpreter of the baselines (default: this one); polars is looked for there.
--settle-ms: before each timed command, keep every core busy this long, untimed (default 0).
  On a virtual machine whose host parks idle virtual CPUs, a command that starts after a core
  sat idle (after the single-threaded Python loop, or after a pause) runs its first
  parallel work on a core that is still waking: copus measured 184-335 ms after 1-3 s idle
  against 130-160 ms after busy work (issue 32). A fixed rotation put the same command after
  the Python loop every round; the shuffle spreads that, and --settle-ms 200 starts every
  command, baselines included, from busy cores (the steady state of a machine doing work).
--json: print the figures as one JSON object instead of a table.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time


def copus_commands(copus, path, lines):
    """(name, argv) of the copus commands timed."""
    steps = str(lines)
    return [
        ("analyze --json", [copus, "analyze", path, "--json"]),
        ("analyze --json-lines", [copus, "analyze", path, "--json-lines"]),
        ("analyze --json --summary-only", [copus, "analyze", path, "--json", "--summary-only"]),
        ("watch --headless --json",
         [copus, "watch", path, "--headless", "--until-steps", steps, "--json"]),
    ]


def commands(copus, before, python, path, lines):
    """(name, argv) of every command timed; polars only where the interpreter has it."""
    cmds = copus_commands(copus, path, lines)
    if before:
        cmds += [("before: " + name, argv) for name, argv in copus_commands(before, path, lines)]
    cmds += [
        ("python-json", [python, "-c",
                         "import json, sys\n[json.loads(l) for l in open(sys.argv[1])]", path]),
    ]
    has_polars = subprocess.run([python, "-c", "import polars"], capture_output=True)
    if has_polars.returncode == 0:
        cmds.append(("polars read_ndjson",
                     [python, "-c", "import polars, sys\npolars.read_ndjson(sys.argv[1])", path]))
    else:
        print(f"note: {python} has no polars; its baseline is left out", file=sys.stderr)
    return cmds


def settle(ms):
    """Keep every core busy for `ms` milliseconds (one spinning process per core)."""
    if ms <= 0:
        return
    spin = f"import time\nend = time.perf_counter() + {ms / 1000}\nwhile time.perf_counter() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.wait()


def time_once(argv, out_path):
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited with {done.returncode}")
    return elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--settle-ms", type=int, default=0)
    p.add_argument("--copus", default="target/release/copus")
    p.add_argument("--copus-before", default=None)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with open(a.file, "rb") as f:
        lines = sum(1 for _ in f)
    cmds = commands(a.copus, a.copus_before, a.python, a.file, lines)
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "out")
        # The floor of any command that writes analyze's output: `cat` of the same bytes (read
        # from the page cache) into the same file, timed in the same rounds.
        reference = os.path.join(tmp, "analyze.json")
        time_once([a.copus, "analyze", a.file, "--json"], reference)
        cmds.append(("cat analyze's output", ["cat", reference]))
        times = {name: [] for name, _ in cmds}
        for r in range(a.rounds):
            order = list(cmds)
            random.Random(r).shuffle(order)
            for name, argv in order:
                settle(a.settle_ms)
                times[name].append(time_once(argv, out_path))
                sizes[name] = os.path.getsize(out_path)
    base = statistics.median(times["python-json"])
    rows = []
    for name, _ in cmds:
        v = sorted(times[name])
        med = statistics.median(v)
        rows.append({"command": name, "median_s": med, "best_s": v[0], "rounds": len(v),
                     "lines_per_s": lines / med, "ratio_to_python_json": med / base,
                     "output_bytes": sizes[name]})
    if a.json:
        print(json.dumps({"file": a.file, "lines": lines, "settle_ms": a.settle_ms, "rows": rows},
                         indent=2))
        return
    print(f"{a.file}: {lines} lines, {a.rounds} rounds (shuffled), cores kept busy "
          f"{a.settle_ms} ms before each, output to a file")
    for row in rows:
        print(f"{row['command']:<32} median {row['median_s'] * 1000:7.1f} ms  "
              f"best {row['best_s'] * 1000:7.1f} ms  {row['lines_per_s'] / 1000:6.0f}k lines/s  "
              f"{row['ratio_to_python_json']:.3f}x python-json  "
              f"out {row['output_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
