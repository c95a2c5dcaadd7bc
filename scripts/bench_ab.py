#!/usr/bin/env python3
"""Whole-command A/B timing of two builds (issue 15): runs `A ARGS` and `B ARGS` alternately
(A first on even rounds, B first on odd ones), output to /dev/null, and prints the median,
mean, 25th percentile and best wall time of each, and lines/s of the medians when LINES is
given. Alternating runs keep both builds in the same host conditions: on this shared 2-core
machine the same binary runs 8-14 % slower in busy periods, so only figures measured side by
side are compared.

  scripts/bench_ab.py ROUNDS A B [--lines N] -- ARGS...
  scripts/bench_ab.py 30 /tmp/copus-before target/release/copus --lines 100000 -- \
      analyze FILE --json
"""
import statistics
import subprocess
import sys
import time


def main(argv):
    if "--" not in argv or len(argv) < 4:
        sys.exit(__doc__)
    split = argv.index("--")
    head, args = argv[:split], argv[split + 1:]
    rounds, a, b = int(head[0]), head[1], head[2]
    lines = int(head[head.index("--lines") + 1]) if "--lines" in head else None
    times = {a: [], b: []}
    for i in range(rounds):
        for binary in (a, b) if i % 2 == 0 else (b, a):
            t0 = time.perf_counter()
            done = subprocess.run([binary] + args, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            times[binary].append(time.perf_counter() - t0)
            if done.returncode != 0:
                sys.exit(f"{binary} exited with {done.returncode}")
    for binary in (a, b):
        v = sorted(times[binary])
        med = statistics.median(v)
        rate = f"  {lines / med / 1000:.0f}k lines/s" if lines else ""
        print(f"{binary}: median {med * 1000:.1f} ms, mean {statistics.mean(v) * 1000:.1f}, "
              f"p25 {v[len(v) // 4] * 1000:.1f}, best {v[0] * 1000:.1f} (n {len(v)}){rate}")


if __name__ == "__main__":
    main(sys.argv[1:])
