#!/usr/bin/env python3
"""What first-touching fresh memory costs on this machine (issue 32).

Maps N MiB of anonymous memory, writes one byte in every 4 KiB page (each write faults a page
the kernel must zero) and unmaps it; ROUNDS times in one process, with 4 KiB pages and, where
the kernel allows it, with transparent huge pages (madvise). Prints milliseconds per round and
milliseconds per MiB, so the page-fault share of a whole command (`perf` puts it at a quarter
to a third of `copus analyze --json` on the 2-core VM) can be set against what the machine
itself charges.

    python3 scripts/bench_page_touch.py [MIB] [ROUNDS]
"""

import mmap
import sys
import time

PAGE = 4096


def touch(mib: int, huge: bool) -> float:
    n = mib << 20
    t0 = time.perf_counter()
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    for off in range(0, n, PAGE):
        m[off] = 1
    m.close()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    # The loop alone (same writes to memory already touched), to subtract.
    n = mib << 20
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for off in range(0, n, PAGE):
        m[off] = 1
    t0 = time.perf_counter()
    for off in range(0, n, PAGE):
        m[off] = 1
    loop = (time.perf_counter() - t0) * 1e3
    m.close()
    print(f"loop alone (pages already touched): {loop:.1f} ms for {mib} MiB")
    for huge in (False, True):
        times = [touch(mib, huge) - loop for _ in range(rounds)]
        label = "huge pages (madvise)" if huge else "4 KiB pages"
        print(
            f"{label}: " + ", ".join(f"{t:.1f}" for t in times)
            + f" ms per {mib} MiB; median {sorted(times)[len(times) // 2] / mib:.3f} ms/MiB"
        )


if __name__ == "__main__":
    main()
