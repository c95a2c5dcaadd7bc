#!/usr/bin/env python3
"""What the copus DDP hook costs a training step: a small transformer language model trained
under DDP (gloo, CPU, 2 processes by default), alternating rounds without the hook ("plain"),
with PyTorch's own Python all-reduce comm hook ("pyhook": what any Python comm hook costs
before measuring anything), with the current hook ("new", assets/python/copus_hook.py) and,
as the baseline, with the hook of an earlier commit ("old",
`git show REF:assets/python/copus_hook.py`).

Every mode has its own copy of the same model (same initial weights), its own DDP wrapper and
optimizer, all in one process group; rounds of --steps steps run in turn (the order rotates
every round), the first --warmup rounds are discarded, and every whole training step
(zero_grad, forward, backward, step_end, optimizer step) is timed on rank 0. Reported: the
median and mean step time of each mode, and the overhead of a hooked mode as the median over
rounds of (its round median / the plain round median of the same cycle - 1).

    ~/.cache/copus-ci-venv/bin/python scripts/bench_hook.py            # a table
    ~/.cache/copus-ci-venv/bin/python scripts/bench_hook.py --json     # one JSON object

Needs torch with gloo. Results and the command behind them: docs/HOOK_OVERHEAD.md.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit whose DdpNoiseHook read the norms back to the host every step.
OLD_REF = "20b3e23"


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_model(args):
    import torch
    torch.manual_seed(0)

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d
            self.tok = torch.nn.Embedding(args.vocab, d)
            self.pos = torch.nn.Embedding(args.seq, d)
            layer = torch.nn.TransformerEncoderLayer(d, args.heads, 4 * d, dropout=0.0,
                                                     batch_first=True, norm_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, args.layers,
                                                      enable_nested_tensor=False)
            self.norm = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, args.vocab)
            self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(
                args.seq), persistent=False)

        def forward(self, x):
            pos = torch.arange(x.shape[1], device=x.device)
            h = self.blocks(self.tok(x) + self.pos(pos), mask=self.mask, is_causal=True)
            return self.head(self.norm(h))

    return TinyLM()


def worker(rank, args, store, outdir, old_path):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(ROOT, "assets", "python"))
    import copus_hook
    dist.init_process_group("gloo", init_method=f"file://{store}/rdzv", rank=rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=600))
    modules = {"new": copus_hook}
    if old_path:
        modules["old"] = load_module(old_path, "copus_hook_old")
    modes = ["plain", "pyhook"] + [m for m in ("new", "old") if m in modules]
    modes = [m for m in modes if m in args.modes.split(",")]
    runs = {}
    for mode in modes:
        model = make_model(args)
        ddp = DDP(model)
        hook = writer = None
        if mode == "pyhook":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        elif mode != "plain":
            mod = modules[mode]
            path = os.path.join(outdir, f"{mode}.ndjson") if rank == 0 else None
            writer = mod.open_writer(path=path, rank=rank)
            kw = {"flush_every": args.flush_every} if mode == "new" else {}
            hook = mod.DdpNoiseHook(ddp, writer, samples_per_rank=args.batch, **kw).install()
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
        runs[mode] = dict(ddp=ddp, hook=hook, writer=writer, opt=opt, step=0,
                          calls={"step_end": [], "flush": []})
    gen = torch.Generator().manual_seed(1000 + rank)

    def train_step(run):
        x = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
        t0 = time.perf_counter()
        run["opt"].zero_grad(set_to_none=True)
        logits = run["ddp"](x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), x[:, 1:].reshape(-1))
        loss.backward()
        if run["hook"] is not None:
            # The new hook takes the loss as a tensor (read at its flush); the old one needs a
            # float, which is what its users passed (loss.item(), a sync of the caller's).
            new = run["hook"].__class__.__module__ == "copus_hook"
            t1 = time.perf_counter()
            run["hook"].step_end(run["step"], loss=loss.detach() if new else loss.item(),
                                 lr=1e-3)
            flushed = new and run["hook"].pending_steps() == 0
            run["calls"]["flush" if flushed else "step_end"].append(time.perf_counter() - t1)
        run["opt"].step()
        run["step"] += 1
        return time.perf_counter() - t0

    times = {m: [] for m in modes}   # per mode: one list of step times per round
    for r in range(args.warmup + args.rounds):
        k = r % len(modes)
        for mode in modes[k:] + modes[:k]:
            dist.barrier()
            ts = [train_step(runs[mode]) for _ in range(args.steps)]
            if r >= args.warmup:
                times[mode].append(ts)
    for run in runs.values():
        if run["hook"] is not None:
            if hasattr(run["hook"], "close"):
                run["hook"].close()
            run["writer"].close()
    parts = {}
    if rank == 0:
        # The measurement work alone, on a flat tensor as large as the model (the hook runs
        # it twice per step, on each bucket before and after its all-reduce): the fused norm
        # and, for comparison, the old squared copy.
        flat = torch.cat([p.detach().reshape(-1) for p in runs["plain"]["ddp"].parameters()])
        for name, fn in (("fused_norm_ms", lambda: copus_hook._sq(flat)),
                         ("squared_copy_ms", lambda: flat.float().pow(2).sum())):
            fn()
            ts = []
            for _ in range(200):
                t1 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t1)
            parts[name] = 1e3 * statistics.median(ts)
    if rank == 0:
        with open(os.path.join(outdir, "times.json"), "w", encoding="utf-8") as f:
            json.dump({"times": times, "parts": parts,
                       "calls": {m: r["calls"] for m, r in runs.items()},
                       "params": sum(p.numel() for p in runs["plain"]["ddp"].parameters())}, f)
    # Leave without gloo's teardown (it can abort a rank at exit on a loaded machine); wait
    # on marker files so that no rank closes its sockets while a peer is still working.
    with open(os.path.join(outdir, f"done.rank{rank}"), "w", encoding="utf-8") as f:
        f.write("ok\n")
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(outdir, f"done.rank{q}"))
                  for q in range(args.world)):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def summarise(times):
    """Per mode: median and mean step time (ms) over all kept steps; per hooked mode: the
    median over rounds of (round median / plain round median of the same cycle - 1), %."""
    out = {}
    plain_rounds = [statistics.median(ts) for ts in times["plain"]]
    for mode, rounds in times.items():
        flat = [t for ts in rounds for t in ts]
        row = {"median_ms": 1e3 * statistics.median(flat), "mean_ms": 1e3 * statistics.fmean(flat),
               "steps": len(flat), "rounds": len(rounds)}
        if mode != "plain":
            per_round = [100 * (statistics.median(ts) / p - 1)
                         for ts, p in zip(rounds, plain_rounds)]
            row["overhead_pct"] = statistics.median(per_round)
            row["overhead_pct_rounds"] = per_round
            row["overhead_pct_of_means"] = 100 * (statistics.fmean(flat) / statistics.fmean(
                [t for ts in times["plain"] for t in ts]) - 1)
        out[mode] = row
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2, help="DDP processes (gloo, CPU)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=128, help="model width")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64, help="tokens per sample")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    ap.add_argument("--rounds", type=int, default=12, help="kept rounds per mode")
    ap.add_argument("--warmup", type=int, default=2, help="discarded rounds per mode")
    ap.add_argument("--steps", type=int, default=16, help="steps per round")
    ap.add_argument("--flush-every", type=int, default=16, help="the new hook's flush period")
    ap.add_argument("--old-ref", default=OLD_REF,
                    help="git commit of the baseline hook ('' to leave it out)")
    ap.add_argument("--modes", default="plain,pyhook,new,old",
                    help="comma-separated: plain (always), pyhook, new, old")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if "plain" not in args.modes.split(","):
        args.modes = "plain," + args.modes

    import torch
    import torch.multiprocessing as mp

    load0 = [round(x, 2) for x in os.getloadavg()]  # other work on the machine adds noise
    with tempfile.TemporaryDirectory() as tmp:
        old_path = None
        if args.old_ref:
            text = subprocess.run(["git", "show", f"{args.old_ref}:assets/python/copus_hook.py"],
                                  cwd=ROOT, capture_output=True, text=True, check=True).stdout
            old_path = os.path.join(tmp, "copus_hook_old.py")
            with open(old_path, "w", encoding="utf-8") as f:
                f.write(text)
        store = os.path.join(tmp, "store")
        os.makedirs(store)
        t0 = time.monotonic()
        try:
            mp.spawn(worker, args=(args, store, tmp, old_path), nprocs=args.world, join=True)
        except mp.ProcessExitedException:
            if not os.path.exists(os.path.join(tmp, "times.json")):
                raise
        with open(os.path.join(tmp, "times.json"), encoding="utf-8") as f:
            got = json.load(f)
        with open(os.path.join(tmp, "new.ndjson"), encoding="utf-8") as f:
            new_records = sum(1 for _ in f)
    summary = summarise(got["times"])
    for mode, calls in got["calls"].items():
        # step_end's own time (including the old hook's per-step all-reduce and read-back);
        # for the new hook the steps that flushed are timed apart.
        for kind, ts in calls.items():
            if ts:
                summary[mode][f"{kind}_median_ms"] = 1e3 * statistics.median(ts)
                summary[mode][f"{kind}_calls"] = len(ts)
    parts = got["parts"]
    new = summary.get("new", {})
    if "step_end_median_ms" in new:
        # What the new hook adds to a step, counted from its parts: two norms of the model's
        # gradient, step_end, and a flush every flush_every steps; against the plain median.
        added = (2 * parts["fused_norm_ms"] + new["step_end_median_ms"]
                 + new.get("flush_median_ms", 0.0) / args.flush_every)
        parts["new_added_ms"] = added
        parts["new_added_pct"] = 100 * added / summary["plain"]["median_ms"]
    report = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs",
        "world": args.world, "threads_per_rank": args.threads,
        "model": {"layers": args.layers, "d": args.d, "heads": args.heads, "seq": args.seq,
                  "vocab": args.vocab, "batch_per_rank": args.batch, "params": got["params"]},
        "rounds": args.rounds, "warmup_rounds": args.warmup, "steps_per_round": args.steps,
        "flush_every": args.flush_every, "old_ref": args.old_ref or None,
        "new_hook_records": new_records, "wall_s": round(time.monotonic() - t0, 1),
        "loadavg_before": load0, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "modes": summary, "parts": parts,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"torch {report['torch']}, {report['machine']}, {args.world} ranks x "
          f"{args.threads} thread(s), {got['params']:,} parameters, "
          f"{args.rounds} rounds x {args.steps} steps per mode ({args.warmup} warm-up "
          f"rounds discarded), {report['wall_s']} s, load average {load0[0]} -> "
          f"{report['loadavg_after'][0]}")
    print(f"{'mode':<6} {'median ms':>10} {'mean ms':>9} {'overhead (median of rounds)':>28}"
          f" {'overhead of means':>18}")
    for mode, row in summary.items():
        over = f"{row['overhead_pct']:+.2f} %" if "overhead_pct" in row else "-"
        means = f"{row['overhead_pct_of_means']:+.2f} %" if "overhead_pct" in row else "-"
        print(f"{mode:<6} {row['median_ms']:>10.2f} {row['mean_ms']:>9.2f} {over:>28} "
              f"{means:>18}")
    for mode, row in summary.items():
        parts = [f"{k.replace('_median_ms', '')} {row[k]:.3f} ms (median of "
                 f"{row[k.replace('_median_ms', '_calls')]})"
                 for k in ("step_end_median_ms", "flush_median_ms") if k in row]
        if parts:
            print(f"{mode}: " + ", ".join(parts))
    p = report["parts"]
    print(f"norm of the whole gradient: fused {p['fused_norm_ms']:.3f} ms, squared copy "
          f"{p['squared_copy_ms']:.3f} ms")
    if "new_added_ms" in p:
        print(f"new hook, counted from its parts (2 norms + step_end + flush/"
              f"{args.flush_every}): {p['new_added_ms']:.3f} ms per step = "
              f"{p['new_added_pct']:.2f} % of the plain median")


if __name__ == "__main__":
    main()
