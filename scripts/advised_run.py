#!/usr/bin/env python3
"""A run that follows copus's batch advice beside a static run (issue 29, item 4).

Both runs train assets/python/tiny_gpt.py under 2-process gloo DDP on CPU with
copus_hook.DdpNoiseHook writing a stats file, from the same seed, micro batch and starting
accumulation, until the held-out eval loss (128 fixed windows, every --eval-every steps,
computed the same way in both) reaches --target or --max-steps.

  static:  micro batch m, accumulation a0 throughout.
  advised: the same start; `copus watch STATS --headless --advise ADVICE --session
           scripts/advised_run/session.ron` runs beside it and copus_hook.Advisor applies
           batch advice at step boundaries (more accumulation; lr scaled by --lr-scaling,
           default sqrt, relative to the starting batch).

Writes OUT/{static,advised}.ndjson (stats + applied lines), OUT/advice.ndjson, OUT/result.json
(--json also prints it) and a summary. See docs/ADVISED_RUN.md.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "assets", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import copus_hook  # noqa: E402
import tiny_gpt  # noqa: E402

WORLD = 2


def _train(rank, name, a, outdir):
    data = tiny_gpt.CharData(seed=a.seed)
    model = tiny_gpt.make_model(data.vocab, seed=a.seed)
    ddp = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    writer = copus_hook.open_writer(path=os.path.join(outdir, f"{name}.ndjson"))
    adv = None
    if name == "advised":
        adv = copus_hook.Advisor(os.path.join(outdir, "advice.ndjson"), micro_batch=a.micro,
                                 accumulation=a.acc, lr_scaling=a.lr_scaling)
        hook = copus_hook.DdpNoiseHook(ddp, writer, adv.samples_per_rank,
                                       flush_every=a.flush_every, advisor=adv).install()
    else:
        hook = copus_hook.DdpNoiseHook(ddp, writer, a.micro * a.acc,
                                       flush_every=a.flush_every).install()
    ev = data.eval_set()
    evals, batches = [], []
    samples = tokens = 0
    eval_s = 0.0
    reached = None
    t0 = time.perf_counter()
    step = 0
    while step < a.max_steps:
        acc = a.acc
        if adv is not None:
            adv.step_boundary(step)
            acc = adv.accumulation
            for g in opt.param_groups:
                g["lr"] = a.lr * adv.lr_factor
        ts = time.perf_counter()
        total = torch.zeros(())
        for i in range(acc):
            x, y = data.batch(rank, WORLD, step, i, a.micro)
            ctx = ddp.no_sync() if i < acc - 1 else _null()
            with ctx:
                loss = ddp(x, y) / acc
                loss.backward()
            total += loss.detach()
        step_samples = WORLD * a.micro * acc
        hook.step_end(step, loss=total, lr=opt.param_groups[0]["lr"],
                      tokens=step_samples * tiny_gpt.CONTEXT,
                      step_time_s=time.perf_counter() - ts)
        opt.step()
        opt.zero_grad(set_to_none=True)
        samples += step_samples
        tokens += step_samples * tiny_gpt.CONTEXT
        batches.append(step_samples)
        step += 1
        if step % a.eval_every == 0:
            te = time.perf_counter()
            el = tiny_gpt.eval_loss(model, ev)   # identical weights on every rank
            eval_s += time.perf_counter() - te
            evals.append({"step": step, "samples": samples, "tokens": tokens,
                          "eval_loss": el, "wall_s": time.perf_counter() - t0})
            if el <= a.target:
                reached = evals[-1]
                break
    wall = time.perf_counter() - t0
    hook.close()
    writer.close()
    applied = adv.applied if adv is not None else []
    if adv is not None:
        adv.close()
    if rank == 0:
        with open(os.path.join(outdir, f"{name}.result.json"), "w", encoding="utf-8") as f:
            json.dump({"steps": step, "samples": samples, "tokens": tokens, "wall_s": wall,
                       "eval_s": eval_s, "reached": reached, "evals": evals,
                       "applied": applied, "batches": _runs(batches)}, f)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _runs(batches):
    """[[batch, from_step, n_steps], ...]"""
    out = []
    for s, b in enumerate(batches):
        if out and out[-1][0] == b:
            out[-1][2] += 1
        else:
            out.append([b, s, 1])
    return out


def _worker(rank, store_dir, name, a, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/rdzv", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=600))
    try:
        _train(rank, name, a, outdir)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # As in assets/python/test_torch_advisor.py: mark the results, wait on the other rank,
    # leave without gloo's teardown (which can abort a rank on a loaded machine).
    with open(os.path.join(outdir, f"{name}.done.rank{rank}"), "w", encoding="utf-8") as f:
        f.write("ok\n")
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(outdir, f"{name}.done.rank{r}"))
                  for r in range(WORLD)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: the other rank did not finish")
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawn(name, a, outdir):
    with tempfile.TemporaryDirectory() as store:
        try:
            mp.spawn(_worker, args=(store, name, a, outdir), nprocs=WORLD, join=True)
        except mp.ProcessExitedException:
            if not all(os.path.exists(os.path.join(outdir, f"{name}.done.rank{r}"))
                       for r in range(WORLD)):
                raise
            print("note: a rank died after finishing; its results are complete",
                  file=sys.stderr)
    with open(os.path.join(outdir, f"{name}.result.json"), encoding="utf-8") as f:
        return json.load(f)


def copus_bin():
    if os.environ.get("COPUS_BIN"):
        return os.environ["COPUS_BIN"]
    return os.path.join(ROOT, "target", "release", "copus")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="advised-run-out")
    p.add_argument("--micro", type=int, default=8, help="micro batch per rank (samples)")
    p.add_argument("--acc", type=int, default=1, help="starting accumulation")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW lr at the starting batch")
    p.add_argument("--lr-scaling", default="sqrt", choices=["none", "sqrt", "linear"])
    p.add_argument("--target", type=float, default=2.3, help="held-out eval loss (nats/char)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--max-steps", type=int, default=3000)
    p.add_argument("--flush-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--session", default=os.path.join(ROOT, "scripts", "advised_run",
                                                     "session.ron"))
    p.add_argument("--min-dwell-steps", type=int, default=50)
    p.add_argument("--only", choices=["static", "advised"])
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        os.remove(os.path.join(a.out, f))
    result = {"machine": {"cpus": os.cpu_count(), "torch": torch.__version__,
                          "threads_per_rank": 1, "world": WORLD},
              "settings": {k: v for k, v in vars(a).items() if k not in ("json", "out")},
              "model": {"params": tiny_gpt.n_params(tiny_gpt.make_model(
                  tiny_gpt.CharData().vocab)), "layers": tiny_gpt.LAYERS,
                  "d_model": tiny_gpt.D_MODEL, "heads": tiny_gpt.HEADS,
                  "context": tiny_gpt.CONTEXT}}
    if a.only != "advised":
        result["static"] = _spawn("static", a, a.out)
    if a.only != "static":
        stats = os.path.join(a.out, "advised.ndjson")
        advice = os.path.join(a.out, "advice.ndjson")
        open(stats, "w").close()
        cmd = [copus_bin(), "watch", stats, "--headless", "--advise", advice, "--force",
               "--session", a.session, "--min-dwell-steps", str(a.min_dwell_steps),
               "--timeout-s", "3600"]
        result["watch_command"] = " ".join(cmd)
        with open(os.path.join(a.out, "watch.out"), "w") as wo, \
                open(os.path.join(a.out, "watch.err"), "w") as we:
            watch = subprocess.Popen(cmd, stdout=wo, stderr=we)
            try:
                result["advised"] = _spawn("advised", a, a.out)
            finally:
                time.sleep(1.0)
                watch.send_signal(signal.SIGINT)
                try:
                    watch.wait(10)
                except subprocess.TimeoutExpired:
                    watch.kill()
                    watch.wait()
        result["advice"] = []
        if os.path.exists(advice):
            with open(advice, encoding="utf-8") as f:
                result["advice"] = [json.loads(x)["advice"] for x in f if x.strip()]
        with open(os.path.join(a.out, "watch.err")) as f:
            result["watch_stderr_tail"] = f.read()[-2000:]
    with open(os.path.join(a.out, "result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    if a.json:
        print(json.dumps(result, indent=1))
    summary(result, a)


def summary(r, a):
    print(f"target eval loss {a.target} (held-out, 128 windows of {tiny_gpt.CONTEXT} chars)")
    print(f"{'run':8} {'reached':>7} {'steps':>6} {'samples':>8} {'tokens':>9} {'wall s':>7}"
          f" {'eval s':>6}  batches [batch, from step, steps]")
    for name in ("static", "advised"):
        x = r.get(name)
        if not x:
            continue
        hit = x["reached"]
        print(f"{name:8} {'yes' if hit else 'no':>7} {x['steps']:>6} {x['samples']:>8} "
              f"{x['tokens']:>9} {x['wall_s']:>7.1f} {x['eval_s']:>6.1f}  {x['batches']}")
    for adv in r.get("advice", []):
        print(f"advice at step {adv['at_step']}: batch {adv['batch']} (accumulation "
              f"{adv['accumulation']}, {adv['apply']}), {adv['reason']}")
    for ap in (r.get("advised") or {}).get("applied", []):
        print(f"applied at step {ap['at_step']}: batch {ap['batch']}, lr x {ap['lr_factor']:.3f}")


if __name__ == "__main__":
    main()
