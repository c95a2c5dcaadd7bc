#!/usr/bin/env python3
"""Whole-process speed of the copus dump reduction against numpy, side by side.

Generates a one-step F32 safetensors dump of K=4 files (about --size-mb MB in total) unless
--dir already holds one, warms the page cache, then alternates whole-process runs of
  copus:  target/release/copus analyze DIR --json --device cpu   (or --copus "CMD {dir}")
  numpy:  python3 this_script.py --numpy-worker DIR
and prints the best and median times, GB/s and the ratio. The numpy worker memory-maps the
same files and, per tensor, takes float32 np.dot(g_k, g_k) for each file plus the
sample-weighted sum across files for the big batch and its np.dot (the obvious numpy way).

Needs numpy (pip install numpy). Build first: cargo build --release --bin copus
"""
import argparse, glob, json, mmap, os, statistics, struct, subprocess, sys, time


def numpy_worker(step_dir):
    import numpy as np
    files = sorted(glob.glob(os.path.join(step_dir, "*.safetensors")))
    maps, heads, samples = [], [], []
    for f in files:
        with open(f, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack("<Q", mm[:8])[0]
        h = json.loads(mm[8:8 + n])
        samples.append(float(h.get("__metadata__", {}).get("samples", 1)))
        maps.append((mm, 8 + n))
        heads.append(h)
    total = sum(samples)
    w = [np.float32(s / total) for s in samples]
    small = big = 0.0
    for name, info in heads[0].items():
        if name == "__metadata__":
            continue
        arrs = []
        for (mm, base), h in zip(maps, heads):
            a, b = h[name]["data_offsets"]
            arrs.append(np.frombuffer(mm, dtype=np.float32, count=(b - a) // 4, offset=base + a))
        for x in arrs:
            small += float(np.dot(x, x))
        g = arrs[0] * w[0]
        for wk, x in zip(w[1:], arrs[1:]):
            g += wk * x
        big += float(np.dot(g, g))
    print(json.dumps({"sq_small": small / len(files), "sq_big": big}))


def generate(step_dir, size_mb, k=4):
    import numpy as np
    os.makedirs(step_dir, exist_ok=True)
    per_file = size_mb * (1 << 20) // k // 4            # f32 elements per file
    sizes, left = [], per_file
    mix = [4096 * 4096, 4096 * 1376 + 3, 1_000_003, 4099, 7]  # round-robin, some odd
    while left >= mix[-1] and len(sizes) < 400:
        for s in mix:
            if left >= s:
                sizes.append(s)
                left -= s
    if left:
        sizes.append(left)
    rng = np.random.default_rng(0)
    mus = [None] * len(sizes)
    for kk in range(k):
        header, off = {"__metadata__": {"samples": "8"}}, 0
        for i, n in enumerate(sizes):
            header[f"model.layers.{i}.weight"] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + 4 * n]}
            off += 4 * n
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(step_dir, f"rank{kk}.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb)
            for i, n in enumerate(sizes):
                if mus[i] is None:
                    mus[i] = (0.01 * rng.standard_normal(n)).astype(np.float32)
                (mus[i] + 0.05 * rng.standard_normal(n, dtype=np.float32)).tofile(f)


def timed(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numpy-worker", metavar="DIR")
    ap.add_argument("--dir", default="/tmp/copus-numpy-bench/step_0")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--copus", default="target/release/copus analyze {dir} --json --device cpu")
    a = ap.parse_args()
    if a.numpy_worker:
        return numpy_worker(a.numpy_worker)
    if not glob.glob(os.path.join(a.dir, "*.safetensors")):
        print(f"generating {a.size_mb} MB in {a.dir} ...", file=sys.stderr)
        generate(a.dir, a.size_mb)
    nbytes = sum(os.path.getsize(f) for f in glob.glob(os.path.join(a.dir, "*.safetensors")))
    copus = a.copus.format(dir=a.dir).split()
    numpy = [sys.executable, os.path.abspath(__file__), "--numpy-worker", a.dir]
    _, c_out = timed(copus)          # warm the page cache and check agreement
    _, n_out = timed(numpy)
    try:
        c = json.loads(c_out)
    except json.JSONDecodeError:
        c = json.loads(c_out.splitlines()[0])
    if "steps" in c:  # `copus analyze --json`: the per-step rows
        c = c["steps"][0]
    n = json.loads(n_out)
    for key in ("sq_small", "sq_big"):
        if abs(c[key] - n[key]) > 1e-4 * abs(n[key]):
            sys.exit(f"disagree on {key}: copus {c[key]} numpy {n[key]}")
    tc, tn = [], []
    for _ in range(a.reps):
        tc.append(timed(copus)[0])
        tn.append(timed(numpy)[0])
    gb = nbytes / 1e9
    print(f"dump: {gb:.3f} GB, {len(glob.glob(os.path.join(a.dir, '*.safetensors')))} files, {a.reps} reps, page cache warm")
    for name, t in (("copus", tc), ("numpy", tn)):
        print(f"{name:6} best {min(t):.3f} s  median {statistics.median(t):.3f} s  ({gb / min(t):.2f} GB/s best)")
    print(f"ratio numpy/copus: best {min(tn) / min(tc):.2f}x  median {statistics.median(tn) / statistics.median(tc):.2f}x")
    print(f"agreement: sq_small copus {c['sq_small']:.9e} numpy {n['sq_small']:.9e}; sq_big {c['sq_big']:.9e} vs {n['sq_big']:.9e}")


if __name__ == "__main__":
    main()
