#!/usr/bin/env python3
"""Black-box fuzzing of whole copus commands (docs/RELIABILITY.md, "Whole commands").

Mutates valid inputs (the shipped demo and paper sessions, a hardware and two model profiles,
a measurement CSV, an nccl-tests output, a stats stream with and without the Adam-preconditioned
pair, branch records, a calibration file, the explorer's configuration, gradient dump directories with random
damage) and runs them through
the commands that read them (snapshot, plan, plan --emit, grid, predict, calibrate, analyze,
cbs, watch --advise, config), and random key sequences through the explorer
(`snapshot --keys`) at random sizes. A case fails on exit status 101 (a Rust panic), death by
a signal, "panicked" on stderr, or no answer within --timeout-s. Each failure is written to
OUT/findings/ with its command and input; the totals are printed at the end.

  scripts/fuzz_commands.py --copus target/release/copus [--seconds 600] [--seed 1]
                           [--out DIR] [--timeout-s 30] [--only PREFIX]

Run from the repository root (the base inputs are read from sessions/ and assets/).
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

ARGS = None
BIN = ""
rng = random.Random(1)
DEADLINE = 0.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INTERESTING = ["0", "-1", "1", "-0", "1e308", "-1e308", "1e-320", "NaN", "inf", "-inf",
               "18446744073709551615", "18446744073709551616", "4294967295", "4294967296",
               "9223372036854775807", "-9223372036854775808", "2147483648", "0.5", "3",
               "65536", "1e20", "7", "\"\"", "\"x\"", "[]", "()", "None", "Some(0)", "true",
               "1048577", "999999999999"]


def mutate(text: str, n: int = None) -> str:
    n = n or rng.randint(1, 4)
    for _ in range(n):
        op = rng.random()
        nums = list(re.finditer(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text))
        lines = text.split("\n")
        if op < 0.45 and nums:
            m = rng.choice(nums)
            text = text[:m.start()] + rng.choice(INTERESTING) + text[m.end():]
        elif op < 0.55 and len(lines) > 1:
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif op < 0.62 and lines:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op < 0.68 and len(lines) > 2:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif op < 0.74:
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(["\x00", "\ufeff", "\r", ",", ":", "(", ")", "\"", "é", "\x1b[2J", " "]) + text[i:]
        elif op < 0.78:
            text = text[: rng.randrange(len(text) + 1)]
        else:
            # replace an identifier-ish word with another from the text
            words = list(re.finditer(r"[A-Za-z_][A-Za-z_0-9]*", text))
            if len(words) > 2:
                a, b = rng.choice(words), rng.choice(words)
                text = text[:a.start()] + b.group(0) + text[a.end():]
    return text


OK = [False]
WORK = ["."]


def run(argv, timeout=30):
    t = time.time()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=WORK[0],
                           env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired:
        return "timeout", b"", time.time() - t
    bad = None
    if p.returncode == 101 or p.returncode < 0 or b"panicked" in p.stderr:
        bad = f"rc={p.returncode}"
    OK[0] = p.returncode == 0
    return bad, p.stderr[-2000:], time.time() - t


def read(name):
    return open(os.path.join(REPO, name), encoding="utf-8").read()


MEAS = "batch,dp,tp,pp,mbs,step_time_s,recompute,zero\n" + "\n".join(
    f"{b},{dp},{tp},{pp},{m},{t},selective,1" for b, dp, tp, pp, m, t in [
        (512, 8, 1, 1, 2, 62.0), (512, 4, 2, 1, 2, 68.0), (512, 2, 2, 2, 1, 78.0),
        (256, 8, 1, 1, 1, 34.0), (1024, 4, 1, 2, 2, 130.0), (512, 2, 4, 1, 4, 72.0)])


def nccl_text():
    t = "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4294967296 step: 4(factor) warmup iters: 5 iters: 20\n#\n# Using devices\n"
    for r in range(16):
        t += f"#  Rank {r:2} Group  0 Pid  {4000+r} on gpu-node-{r//8:02} device  {r%8} [0x{r:02x}] NVIDIA H100 80GB HBM3\n"
    t += "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    s = 1024
    while s <= 1 << 30:
        us = 20 + 2 * 15 / 16 * s / 40e9 * 1e6
        t += f"{s:>12} {s//4:>12}     float     sum      -1 {us:8.2} 0.00 0.00 0 {us:8.2} 0.00 0.00 0\n"
        s *= 4
    return t + "# Avg bus bandwidth    : 0\n"


STATS = "\n".join(
    '{"v":1,"step":%d,"b_small":4,"b_big":32,"sq_small":%.4f,"sq_big":%.4f,"tokens":%d,"loss":%.3f,"lr":%g,'
    '"step_time_s":5.0,"config":{"dp":8,"tp":1,"pp":1,"mbs":4},"layers":{"a":{"sq_small":%.4f,"sq_big":%.4f},"b":{"sq_small":%.4f,"sq_big":%.4f}}}'
    % (i, 2.0 + 0.01 * (i % 7), 0.5 + 0.002 * i, 4096 * 32 * (i + 1), 3 - i / 400, 1e-3 if i < 150 else 5e-4,
       1.0 + 0.005 * (i % 7), 0.25 + 0.001 * i, 1.0 + 0.005 * (i % 5), 0.25 + 0.001 * i)
    for i in range(300)) + "\n"


def branch_text():
    """Synthetic branch records (docs/PROTOCOL.md, "Branch records"): two branch points, four
    batches, two seeds, losses falling with the samples and less per sample at larger batches."""
    lines = []
    for start in (30, 300):
        for batch in (8, 16, 32, 64):
            for seed in (0, 1):
                for k in range(1, 9):
                    samples = k * 256
                    loss = 2.5 - 0.3 * (1 - pow(2.718, -samples / (400 + 3 * batch))) + 0.003 * seed
                    lines.append('{"v":1,"branch":{"from_step":%d,"batch":%d,"seed":%d},"step":%d,'
                                 '"samples":%d,"tokens":%d,"loss":%.4f,"lr":%.4g}'
                                 % (start, batch, seed, samples // batch, samples, samples * 16,
                                    loss, 0.01 * (batch / 8) ** 0.5))
    return "\n".join(lines) + "\n"


BRANCHES = branch_text()


PRECOND_STATS = "\n".join(
    '{"v":1,"step":%d,"b_small":4,"b_big":32,"sq_small":%.4f,"sq_big":%.4f,'
    '"precond":{"sq_small":%.4f,"sq_big":%.4f}}'
    % (i, 2.0 + 0.01 * (i % 7), 0.5 + 0.002 * i, 9.0 + 0.03 * (i % 5), 1.5 + 0.004 * i)
    for i in range(1, 200)) + "\n"


KEYS = ["Left", "Right", "Up", "Down", "S-Left", "S-Right", "Home", "End", "PPage", "NPage", "Tab",
        "1", "2", "3", "4", "5", "x", "m", "n", "r", "[", "]", "<", ">", "l", "P", "R", "g", "/",
        "Escape", "Enter", "+", "-", "A", "c", "f", "?", "9", "0", "a", "e", "s"]


def ui_keys():
    n = rng.randint(5, 60)
    keys = [rng.choice(KEYS) for _ in range(n)]
    # never quit (q) or save (s asks): drop s; the snapshot draws after the keys
    keys = [k for k in keys if k not in ("s",)]
    w, h = rng.randint(20, 220), rng.randint(20, 70)  # snapshot draws 20 to 1000 a side
    return keys, f"{w}x{h}"


def st_bytes(tensors, samples="8"):
    """A .safetensors file: an 8-byte little-endian header length, the JSON header, the data."""
    header = {"__metadata__": {"samples": samples}} if samples is not None else {}
    blobs, off = [], 0
    for name, shape, vals in tensors:
        data = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def damaged_dump():
    """A gradient dump directory (steps of 2-4 sets) with random damage: files truncated,
    deleted, copied over each other, headers mutated as text, NaN values, empty or duplicate
    step directories, a FIFO or a directory where a set should be."""
    root = os.path.join(WORK[0], "dump")
    shutil.rmtree(root, ignore_errors=True)
    steps, k = rng.randint(1, 6), rng.randint(2, 4)
    shapes = [("model.layers.0.w", [rng.randint(1, 40)]), ("model.layers.1.w", [3, rng.randint(1, 9)]),
              ("lm_head.weight", [rng.randint(1, 20)])]
    files = []
    stride = rng.choice([1, 1, 5])
    # One sample count for the dump, now and then an invalid one (every set then fails).
    samples = rng.choice(["8"] * 24 + ["4", None, "0", "-1", "NaN", "1e400"])
    for step in range(0, steps * stride, stride):
        d = os.path.join(root, f"step_{step}")
        os.makedirs(d)
        for j in range(k):
            tensors = [(n, sh, [rng.gauss(0.01, 0.1) for _ in range(math.prod(sh))]) for n, sh in shapes]
            f = os.path.join(d, f"rank{j}.safetensors")
            with open(f, "wb") as out:
                out.write(st_bytes(tensors, samples if rng.random() < 0.97 else "16"))
            files.append(f)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        op, f = rng.random(), rng.choice(files)
        if not os.path.isfile(f):
            continue  # removed, or already a FIFO or directory (opening a FIFO would block)
        if op < 0.2:
            data = open(f, "rb").read()
            open(f, "wb").write(data[: rng.randrange(len(data) + 1)])
        elif op < 0.35:
            os.remove(f)
        elif op < 0.45:
            src = rng.choice(files)
            if os.path.isfile(src) and src != f:
                shutil.copyfile(src, f)
        elif op < 0.65:
            data = open(f, "rb").read()
            if len(data) < 8:
                continue  # truncated by an earlier operation
            n = struct.unpack("<Q", data[:8])[0]
            head = mutate(data[8:8 + n].decode("utf-8", "replace")).encode()
            open(f, "wb").write(struct.pack("<Q", len(head)) + head + data[8 + n:])
        elif op < 0.75:
            data = bytearray(open(f, "rb").read())
            if len(data) < 8:
                continue
            n = min(struct.unpack("<Q", data[:8])[0], len(data) - 8)
            at = 8 + n + 4 * rng.randrange(max(1, (len(data) - 8 - n) // 4))
            data[at:at + 4] = struct.pack("<f", rng.choice([float("nan"), float("inf"), 3e38]))
            open(f, "wb").write(bytes(data))
        elif op < 0.82:
            d = os.path.dirname(f)
            os.makedirs(os.path.join(root, "step_" + "0" + os.path.basename(d)[5:]), exist_ok=True)
        elif op < 0.9:
            os.makedirs(os.path.join(root, f"step_{10 ** rng.randint(1, 25)}"), exist_ok=True)
        elif op < 0.95:
            os.remove(f)
            os.mkfifo(f)
        else:
            os.remove(f)
            os.makedirs(f)
    return root


EDGE_NUMBERS = ["0", "-1", "1", "0.5", "1.5", "2", "3", "4", "1e308", "-0", "nan", "inf", "-inf",
                "18446744073709551616", "512", "1024", "8192", "1e-320", "", "x", "1,2", "0,0,3"]


def whatif_flags():
    """A random handful of the what-if flags of grid and plan, with edge-case values."""
    flags = ["--zero", "--cp", "--ep", "--b-crit-scale", "--stat-eff", "--current-batch",
             "--gemm-plateau", "--inter-link-scale", "--objective"]
    plan_only = ["--restart-cost", "--checkpoint-bw", "--reshard", "--switch-threshold"]
    command = rng.choice(["grid", "plan"])
    pool = flags + (plan_only if command == "plan" else [])
    argv = [BIN, command, "demo", "--json"]
    for flag in rng.sample(pool, rng.randint(1, 4)):
        words = {"--stat-eff": ["mccandlish", "pollux", "pollux:0", "pollux:nan", "pollux:512", "pollux:"],
                 "--objective": ["mccandlish", "lr-sqrt", "sqrt"],
                 "--reshard": ["in-place", "checkpoint-restart", "inplace"],
                 "--ep": ["any", "2,any", "8"]}.get(flag, [])
        argv += [flag, rng.choice(words + EDGE_NUMBERS)]
    return argv


def targets():
    demo, paper = read("sessions/demo.ron"), read("sessions/paper-7b-16xh100.ron")
    hw = read("assets/hardware/h100-sxm.ron")
    model, moe = read("assets/models/llama3-8b.ron"), read("assets/models/mixtral-8x7b.ron")
    config = subprocess.run([BIN, "config", "--print"], capture_output=True, text=True).stdout
    demo_path = os.path.join(REPO, "sessions/demo.ron")
    stats_path = os.path.join(WORK[0], "stats300.ndjson")
    with open(stats_path, "w", encoding="utf-8") as f:
        f.write(STATS)
    meas_path = os.path.join(WORK[0], "meas.csv")
    with open(meas_path, "w", encoding="utf-8") as f:
        f.write(MEAS)
    cal_path = os.path.join(WORK[0], "base-calibration.ron")
    subprocess.run([BIN, "calibrate", meas_path, "--hardware", "h100-sxm", "--model", "llama3-8b",
                    "--out", cal_path], capture_output=True, check=True)
    calibration = open(cal_path, encoding="utf-8").read()
    return [
        ("session-snapshot", lambda: (rng.choice([demo, paper]), "s.ron",
                                      [BIN, "snapshot", "s.ron", "--size", "80x24"])),
        ("session-plan", lambda: (rng.choice([demo, paper]), "s.ron", [BIN, "plan", "s.ron", "--json"])),
        ("session-grid", lambda: (rng.choice([demo, paper]), "s.ron", [BIN, "grid", "s.ron", "--json"])),
        ("session-emit", lambda: (rng.choice([demo, paper]), "s.ron",
                                  [BIN, "plan", "s.ron", "--emit", rng.choice(["megatron", "torchtitan", "deepspeed", "json"])])),
        ("hardware-predict", lambda: (hw, "hw.ron", [BIN, "predict", "--hardware", "hw.ron", "--model", "llama3-8b",
                                                      "--gpus", "64", "--batch", "256", "--tp", "2", "--json"])),
        ("model-predict", lambda: (rng.choice([model, moe]), "m.ron", [BIN, "predict", "--model", "m.ron",
                                                                        "--gpus", "64", "--batch", "256", "--json",
                                                                        "--ep", "auto", "--pp",
                                                                        rng.choice(["1", "4", "8", "16"]),
                                                                        "--stage-split",
                                                                        rng.choice(["ends", "balanced", "greedy"])])),
        ("model-grid", lambda: (model, "m.ron", [BIN, "grid", "demo", "--model", "m.ron", "--json"])),
        ("model-emit", lambda: (rng.choice([model, moe]), "m.ron",
                                [BIN, "plan", "demo", "--model", "m.ron", "--emit",
                                 rng.choice(["megatron", "torchtitan", "deepspeed"]), "--stack",
                                 rng.choice(["megatron-core", "torchtitan-fsdp2", "deepspeed",
                                             "deepspeed-2021"]),
                                 "--stage-split", rng.choice(["ends", "balanced", "greedy"])])),
        ("calibrate-csv", lambda: (MEAS, "m.csv", [BIN, "calibrate", "m.csv", "--hardware", "h100-sxm",
                                                   "--model", "llama3-8b", "--json"])),
        ("calibrate-nccl", lambda: (nccl_text(), "all_reduce_perf.txt",
                                    [BIN, "calibrate", "--nccl", "all_reduce_perf.txt", "--hardware", "h100-sxm", "--json"])),
        ("stats-analyze", lambda: (STATS, "r.ndjson", [BIN, "analyze", "r.ndjson", "--json"])),
        ("stats-snapshot", lambda: (STATS, "r.ndjson", [BIN, "snapshot", "r.ndjson", "--seq-len", "4096",
                                                        "--size", "100x30", "--keys", "x Tab 2 3 4 5 ]"])),
        ("stats-plan", lambda: (STATS, "r.ndjson", [BIN, "plan", "r.ndjson", "--seq-len", "4096", "--json"])),
        ("stats-watch-advise", lambda: (STATS, "r.ndjson", [BIN, "watch", "r.ndjson", "--headless", "--json",
                                                            "--until-steps", "300", "--timeout-s", "5",
                                                            "--advise", "adv.ndjson", "--force",
                                                            "--session", demo_path])),
        ("session-watch-advise", lambda: (rng.choice([demo, paper]), "s.ron",
                                          [BIN, "watch", stats_path, "--headless",
                                           "--until-steps", "300", "--timeout-s", "5", "--advise",
                                           "adv2.ndjson", "--force", "--session", "s.ron", "--seq-len", "4096"])),
        ("ui-keys-demo", lambda: (lambda kk: ("", "none.txt", [BIN, "snapshot", "--keys", " ".join(kk[0]),
                                                                "--size", kk[1]]))(ui_keys())),
        ("ui-keys-stats", lambda: (lambda kk: (STATS, "r.ndjson", [BIN, "snapshot", "r.ndjson", "--seq-len", "4096",
                                                                   "--keys", " ".join(kk[0]), "--size", kk[1]]))(ui_keys())),
        ("ui-keys-lesson", lambda: (lambda kk: ("", "none.txt", [BIN, "snapshot", "--lesson",
                                                                  rng.choice(["noise-scale", "coupling", "what-if"]),
                                                                  "--keys", " ".join(kk[0]), "--size", kk[1]]))(ui_keys())),
        ("config", lambda: (config, "c.ron", [BIN, "--config", "c.ron", "config"])),
        ("stats-calibrate", lambda: (STATS, "r.ndjson", [BIN, "calibrate", "r.ndjson", "--hardware", "h100-sxm",
                                                         "--model", "llama3-8b", "--json"])),
        ("branches-cbs", lambda: (BRANCHES, "b.ndjson", [BIN, "cbs", "b.ndjson", "--json"])),
        ("branches-analyze", lambda: (BRANCHES, "b.ndjson", [BIN, "analyze", stats_path, "--branches",
                                                             "b.ndjson", "--json", "--summary-only"])),
        ("branches-snapshot", lambda: (BRANCHES, "b.ndjson", [BIN, "snapshot", stats_path, "--seq-len", "4096",
                                                              "--branches", "b.ndjson", "--b-crit-from",
                                                              rng.choice(["b-noise", "threshold-cbs"]),
                                                              "--size", "120x40", "--keys", "4"])),
        ("stats-preconditioned", lambda: (PRECOND_STATS, "p.ndjson", [BIN, "analyze", "p.ndjson",
                                                                      "--preconditioned", "--json"])),
        ("calibration-predict", lambda: (calibration, "cal.ron", [BIN, "predict", "--model", "llama3-8b",
                                                                  "--gpus", "64", "--batch", "256",
                                                                  "--calibration", "cal.ron", "--json"])),
        ("calibration-snapshot", lambda: (calibration, "cal.ron", [BIN, "snapshot", demo_path,
                                                                   "--calibration", "cal.ron",
                                                                   "--size", "100x30", "--keys", "2 x"])),
        ("whatif-flags", lambda: ("", "none.txt", whatif_flags())),
        ("dump-analyze", lambda: ("", "none.txt", [BIN, "analyze", damaged_dump(), "--device", "cpu",
                                                   *rng.choice([["--json"], [], ["--json-lines"]])])),
        ("dump-snapshot", lambda: ("", "none.txt", [BIN, "snapshot", damaged_dump(), "--size", "100x30",
                                                    "--keys", rng.choice(["", "2", "x", "4 ]"])])),
    ]


def main():
    global ARGS, BIN, rng, DEADLINE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copus", required=True, help="the copus binary")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="fuzz-out", help="findings and scratch files go here")
    ap.add_argument("--timeout-s", type=float, default=30)
    ap.add_argument("--only", default="", help="run only the targets whose name starts with this")
    ARGS = ap.parse_args()
    BIN = os.path.abspath(ARGS.copus)
    rng = random.Random(ARGS.seed)
    DEADLINE = time.time() + ARGS.seconds
    out = os.path.abspath(ARGS.out)
    WORK[0] = os.path.join(out, "work")
    os.makedirs(os.path.join(out, "findings"), exist_ok=True)
    os.makedirs(WORK[0], exist_ok=True)
    os.chdir(out)
    ts = [t for t in targets() if t[0].startswith(ARGS.only)]
    if not ts:
        sys.exit(f"no target starts with {ARGS.only!r}")
    counts = {}
    oks = {}
    found = 0
    while time.time() < DEADLINE:
        name, make = rng.choice(ts)
        base, fname, argv = make()
        text = mutate(base)
        with open(os.path.join("work", fname), "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        bad, err, secs = run(argv, ARGS.timeout_s)
        counts[name] = counts.get(name, 0) + 1
        oks[name] = oks.get(name, 0) + int(OK[0])
        if bad:
            found += 1
            tag = f"{name}-{found}"
            with open(f"findings/{tag}.input", "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            with open(f"findings/{tag}.txt", "w") as f:
                f.write(f"{bad}\n{' '.join(argv)}\n{secs:.1f}s\n")
                f.write(err.decode("utf-8", "replace"))
            print(f"FOUND {tag}: {bad}", flush=True)
    print("cases:", counts, "ok:", oks, "findings:", found, flush=True)


if __name__ == "__main__":
    main()
