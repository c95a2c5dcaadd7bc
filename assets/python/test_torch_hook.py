"""copus_hook under real torch.distributed: the gloo backend on CPU, 2, 3 and 4 processes.

Scenarios: plain DDP; gradient accumulation under no_sync(); 3 ranks with one bucket per
parameter; GradScaler loss scaling with an overflowing step that the scaler skips; a fixed
loss scale; bf16 autocast; accumulation without no_sync() (flagged); FSDP2 (fully_shard)
with accumulation; the model-parallel mode on a hand-sharded tensor-parallel MLP (TP 2 x DP 2,
a replicated bias). Each scenario also counts, with patched torch methods, the host
read-backs (item, tolist, float(), int(), bool(), cpu, numpy) and collectives copus_hook makes:
none on the per-step path, one tolist (and the hook's all-reduce(s)) per flush, the flushes
every `flush_every` steps and at close(). Every record is checked against an independent
recomputation in the test process: each data-parallel rank's gradient is recomputed from the
saved (whole) parameters and the same data in float64 on a plain copy of the model, and
sq_small = mean_r |g_r|^2, sq_big = |mean_r g_r|^2 are formed from those.
DumpRoundTripTests check dump_gradients against `copus analyze`.

Needs torch (``scripts/python_env.sh`` makes a venv with it). Run from this directory:
``python -m unittest -v test_torch_hook``. With COPUS_TORCH_OUT=DIR the records are kept in
DIR (the Rust test `tests/python_torch.rs` then parses them with copus).

On a GPU machine (``scripts/gpu_check.sh``): COPUS_TORCH_DEVICE=cuda runs the ranks on the
GPUs (rank r on cuda:r mod n) and COPUS_TORCH_DIST_BACKEND=nccl uses NCCL, which needs a GPU
per rank: scenarios with more ranks than GPUs are then skipped, with the reason.
"""

import contextlib
import datetime
import json
import math
import os
import sys
import tempfile
import time
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import copus_hook  # noqa: E402

D_IN, D_H, D_OUT = 8, 16, 4
LR = 0.1
DEVICE = os.environ.get("COPUS_TORCH_DEVICE", "cpu")
BACKEND = os.environ.get("COPUS_TORCH_DIST_BACKEND", "gloo")

# name: world, micro-batch size, accumulation steps, optimizer steps, options
# (flush_every: the hooks' flush period, default FLUSH_EVERY, more than the steps: one flush
# at close(); tensor_inputs: the loss and the loss scale go to step_end as tensors)
FLUSH_EVERY = 64
SCENARIOS = {
    "ddp": dict(world=2, mbs=8, accum=1, steps=4, flush_every=3),
    # micro_batch given: the records carry the layout (config, dp = world size).
    "accum": dict(world=2, mbs=4, accum=3, steps=3, config=True),
    "accum_3ranks_buckets": dict(world=3, mbs=4, accum=2, steps=3, bucket_cap_mb=1e-5,
                                 flush_every=1),
    "grad_scaler_overflow": dict(world=2, mbs=4, accum=2, steps=4, scaler=2.0 ** 12,
                                 overflow_step=2, tensor_inputs=True),
    "fixed_scale": dict(world=2, mbs=8, accum=1, steps=3, fixed_scale=1024.0),
    "bf16_autocast": dict(world=2, mbs=8, accum=1, steps=3, autocast=torch.bfloat16),
    "accum_without_no_sync": dict(world=2, mbs=4, accum=2, steps=2, no_sync=False),
    # GradNoiseMeter (what the callbacks use) under DDP: micro-batches as the small batch.
    "meter_ddp": dict(world=2, mbs=4, accum=3, steps=2, kind="meter", scaler=2.0 ** 8,
                      tensor_inputs=True),
    # FSDP2: each Linear and the root sharded over 2 ranks, accumulation without sync.
    "fsdp2": dict(world=2, mbs=4, accum=2, steps=3, kind="fsdp2", config=True),
    # 3D-parallel-aware: a hand-sharded tensor-parallel MLP, TP=2 x DP=2 on 4 ranks.
    "tp2_dp2": dict(world=4, dp=2, mbs=4, accum=2, steps=3, kind="tp", flush_every=2),
}

# Collectives the hook's flush issues, by scenario kind (the model-parallel mode sums over the
# model-parallel group, then over the data-parallel one).
FLUSH_COLLECTIVES = {"ddp": 1, "meter": 1, "fsdp2": 1, "tp": 2}

HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "cpu", "numpy")
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter_tensor", "barrier",
               "broadcast_object_list", "all_gather_object")


class SyncCounter:
    """Counts the host read-backs (HOST_READS, patched on torch.Tensor) and collectives
    (COLLECTIVES, patched on torch.distributed) made from copus_hook's code, by where:
    "flush" (inside a flush), "comm" (the comm hook and the measuring reduce-scatter, whose
    collectives are the gradient reduction itself) and "step" (the rest of the per-step path:
    step_end, local(), gradient hooks). Calls from anywhere else are not counted."""

    def __init__(self):
        self.counts = {"step": {}, "comm": {}, "flush": {}}
        self._saved = []
        self._file = os.path.abspath(copus_hook.__file__)

    def _where(self):
        f, where = sys._getframe(2), None
        while f is not None:
            if os.path.abspath(f.f_code.co_filename) == self._file:
                name = f.f_code.co_name
                if name == "flush":
                    return "flush"
                if name in ("_hook", "after", "__call__"):
                    where = "comm"
                elif where is None:
                    where = "step"
            f = f.f_back
        return where

    def _wrap(self, owner, name):
        orig = getattr(owner, name)
        self._saved.append((owner, name, orig))

        def counted(*args, **kwargs):
            where = self._where()
            if where is not None:
                c = self.counts[where]
                c[name] = c.get(name, 0) + 1
            return orig(*args, **kwargs)

        setattr(owner, name, counted)

    def __enter__(self):
        for name in HOST_READS:
            self._wrap(torch.Tensor, name)
        for name in COLLECTIVES:
            self._wrap(dist, name)
        return self

    def __exit__(self, *exc):
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)
        self._saved = []

    def save(self, outdir, name, rank):
        with open(os.path.join(outdir, f"{name}.syncs.rank{rank}.json"), "w",
                  encoding="utf-8") as f:
            json.dump(self.counts, f)


def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, D_H), torch.nn.Tanh(),
                               torch.nn.Linear(D_H, D_OUT))


def batch(name, step, rank, micro, n):
    """The data of one micro-batch: a pure function of where it is used."""
    seed = (zlib.crc32(name.encode()) % 10_000) * 1_000_003 + step * 10_007 + rank * 101 + micro
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_IN, generator=g)
    y = torch.randint(0, D_OUT, (n,), generator=g)
    return x, y


def _device(rank):
    if DEVICE == "cuda":
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _runnable(sc):
    """None when scenario `sc` can run here, else why not."""
    world = sc["world"]
    if BACKEND == "nccl" and world > torch.cuda.device_count():
        return f"NCCL needs a GPU per rank: {world} ranks, {torch.cuda.device_count()} GPU(s)"
    if sc.get("kind") == "fsdp2" and BACKEND == "gloo" and DEVICE == "cuda":
        # Seen on torch 2.11: gloo's all-gather of CUDA DTensors dies with SIGSEGV in
        # wait_tensor. FSDP2 on GPUs means NCCL, one GPU per rank.
        return "FSDP2 on CUDA tensors needs NCCL (gloo crashes on CUDA DTensors)"
    return None


def _worker(rank, world, store_dir, names, outdir):
    torch.set_num_threads(1)
    if DEVICE == "cuda":
        torch.cuda.set_device(_device(rank))
    dist.init_process_group(BACKEND, init_method=f"file://{store_dir}/rdzv", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        for name in names:
            _run_scenario(rank, world, name, SCENARIOS[name], outdir)
            dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every rank's results are on disk: mark it, then leave without tearing gloo down. Its
    # teardown can abort ("terminate called without an active exception") on a loaded
    # machine after all the work is done, which would fail a run whose results are right.
    with open(os.path.join(outdir, f"done.w{world}.rank{rank}"), "w", encoding="utf-8") as f:
        f.write("ok\n")
    # Wait on the files, not on gloo, so that no rank closes its sockets while a peer is
    # still inside the last collective.
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(outdir, f"done.w{world}.rank{r}"))
                  for r in range(world)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: the other ranks did not finish")
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_scenario(rank, world, name, sc, outdir):
    kind = sc.get("kind", "ddp")
    if kind == "fsdp2":
        return _run_fsdp2(rank, world, name, sc, outdir)
    if kind == "tp":
        return _run_tp(rank, world, name, sc, outdir)
    dev = _device(rank)
    model = make_model().to(dev)
    ddp = DDP(model, bucket_cap_mb=sc.get("bucket_cap_mb", 25),
              device_ids=[dev.index] if dev.type == "cuda" else None)
    writer = copus_hook.open_writer(path=os.path.join(outdir, f"{name}.ndjson"))
    mbs, accum = sc["mbs"], sc["accum"]
    every = sc.get("flush_every", FLUSH_EVERY)
    if kind == "meter":
        hook = copus_hook.GradNoiseMeter(ddp, writer, mbs, accum, flush_every=every).install()
    else:
        hook = copus_hook.DdpNoiseHook(ddp, writer, samples_per_rank=mbs * accum,
                                       flush_every=every,
                                       micro_batch=mbs if sc.get("config") else None).install()
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    scaler = (torch.amp.GradScaler(dev.type, init_scale=sc["scaler"], growth_interval=1000)
              if "scaler" in sc else None)
    snapshots, scales, losses = [], [], []
    counter = SyncCounter().__enter__()
    for step in range(sc["steps"]):
        snapshots.append({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
        total, total_t = 0.0, None
        for i in range(accum):
            x, y = batch(name, step, rank, i, mbs)
            x, y = x.to(dev), y.to(dev)
            sync = sc.get("no_sync", True) and i < accum - 1
            ctx = ddp.no_sync() if sync else contextlib.nullcontext()
            amp = (torch.autocast(dev.type, dtype=sc["autocast"]) if "autocast" in sc
                   else contextlib.nullcontext())
            with ctx:
                with amp:
                    loss = F.cross_entropy(ddp(x), y) / accum
                total += loss.item()
                total_t = loss.detach() if total_t is None else total_t + loss.detach()
                if step == sc.get("overflow_step") and rank == 1 and i == accum - 1:
                    loss = loss * float("inf")  # an overflow on one rank
                if scaler is not None:
                    scaler.scale(loss).backward()
                elif "fixed_scale" in sc:
                    (loss * sc["fixed_scale"]).backward()
                else:
                    loss.backward()
        scale = (scaler.get_scale() if scaler is not None else sc.get("fixed_scale"))
        scales.append(scale)
        losses.append(total)
        if sc.get("tensor_inputs"):
            # Read at the flush; the scaler's scale tensor is copied now (update() changes it).
            hook.step_end(step, loss=total_t, lr=LR, loss_scale=copus_hook.scaler_scale(scaler))
        else:
            hook.step_end(step, loss=total, lr=LR, loss_scale=scale)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            if "fixed_scale" in sc:
                for p in model.parameters():
                    p.grad.div_(sc["fixed_scale"])
            opt.step()
        opt.zero_grad(set_to_none=True)
    hook.close()
    counter.__exit__()
    counter.save(outdir, name, rank)
    writer.close()
    if rank == 0:
        torch.save({"snapshots": snapshots, "scales": scales, "losses": losses},
                   os.path.join(outdir, f"{name}.pt"))


def _run_fsdp2(rank, world, name, sc, outdir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    dev = _device(rank)
    model = make_model().to(dev)
    # The mesh of the device the ranks run on: without one, FSDP2 builds a CUDA mesh whenever
    # a GPU is present, also for CPU tensors (which crashes gloo on a GPU host).
    mesh = init_device_mesh(dev.type, (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    writer = copus_hook.open_writer(path=os.path.join(outdir, f"{name}.ndjson"))
    mbs, accum = sc["mbs"], sc["accum"]
    hook = copus_hook.FsdpNoiseHook(model, writer, samples_per_rank=mbs * accum,
                                    micro_batch=mbs if sc.get("config") else None,
                                    flush_every=sc.get("flush_every", FLUSH_EVERY)).install()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    snapshots, losses = [], []
    counter = SyncCounter().__enter__()
    for step in range(sc["steps"]):
        # The whole parameters (a collective: every rank gathers its shards).
        snapshots.append({k: v.full_tensor().detach().cpu().clone()
                          for k, v in model.state_dict().items()})
        total = 0.0
        for i in range(accum):
            model.set_requires_gradient_sync(i == accum - 1)
            x, y = batch(name, step, rank, i, mbs)
            loss = F.cross_entropy(model(x.to(dev)), y.to(dev)) / accum
            total += loss.item()
            loss.backward()
        losses.append(total)
        hook.step_end(step, loss=total, lr=LR)
        opt.step()
        opt.zero_grad(set_to_none=True)
    hook.close()
    counter.__exit__()
    counter.save(outdir, name, rank)
    writer.close()
    if rank == 0:
        torch.save({"snapshots": snapshots, "scales": [None] * sc["steps"], "losses": losses},
                   os.path.join(outdir, f"{name}.pt"))


class _ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's row-parallel output: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _run_tp(rank, world, name, sc, outdir):
    """TP x DP by hand: layer 1 column-parallel (rows of W1 and b1 split), layer 2
    row-parallel (columns of W2 split, partial outputs all-reduced), its bias b2 replicated
    on both tensor-parallel ranks. The data-parallel reduction is done by hand after
    ``local()``."""
    tp_size = world // sc["dp"]
    tp_groups = [dist.new_group(list(range(d * tp_size, (d + 1) * tp_size)))
                 for d in range(sc["dp"])]
    dp_groups = [dist.new_group(list(range(t, world, tp_size))) for t in range(tp_size)]
    dp_rank, tp_rank = divmod(rank, tp_size)
    tp, dp = tp_groups[dp_rank], dp_groups[tp_rank]
    full = make_model()
    h = D_H // tp_size
    cut = slice(tp_rank * h, (tp_rank + 1) * h)
    params = {
        "w1": torch.nn.Parameter(full[0].weight.detach()[cut].clone()),
        "b1": torch.nn.Parameter(full[0].bias.detach()[cut].clone()),
        "w2": torch.nn.Parameter(full[2].weight.detach()[:, cut].clone()),
        "b2": torch.nn.Parameter(full[2].bias.detach().clone()),
    }
    writer = copus_hook.open_writer(path=os.path.join(outdir, f"{name}.ndjson"))
    mbs, accum = sc["mbs"], sc["accum"]
    hook = copus_hook.ModelParallelNoiseHook(params.items(), writer, mbs * accum, dp_group=dp,
                                             mp_group=tp, replicated={"b2"},
                                             flush_every=sc.get("flush_every", FLUSH_EVERY))
    shards, losses = [], []
    counter = SyncCounter().__enter__()
    for step in range(sc["steps"]):
        shards.append({k: v.detach().clone() for k, v in params.items()})
        total = 0.0
        for i in range(accum):
            x, y = batch(name, step, dp_rank, i, mbs)
            hid = torch.tanh(x @ params["w1"].T + params["b1"])
            out = _ReduceFromTensorParallel.apply(hid @ params["w2"].T, tp) + params["b2"]
            loss = F.cross_entropy(out, y) / accum
            total += loss.item()
            loss.backward()
        losses.append(total)
        hook.local()
        for p in params.values():  # the data-parallel reduction
            dist.all_reduce(p.grad, group=dp)
            p.grad.div_(sc["dp"])
        hook.step_end(step, loss=total, lr=LR)
        with torch.no_grad():
            for p in params.values():
                p -= LR * p.grad
                p.grad = None
    hook.close()
    counter.__exit__()
    counter.save(outdir, name, rank)
    writer.close()
    torch.save({"shards": shards, "losses": losses},
               os.path.join(outdir, f"{name}.rank{rank}.pt"))
    dist.barrier()
    if rank == 0:  # the whole model of data-parallel rank 0, from its tensor-parallel shards
        parts = [torch.load(os.path.join(outdir, f"{name}.rank{r}.pt")) for r in range(tp_size)]
        snapshots = []
        for step in range(sc["steps"]):
            s = [p["shards"][step] for p in parts]
            for other in s[1:]:
                assert torch.equal(other["b2"], s[0]["b2"]), "replicated b2 diverged"
            snapshots.append({"0.weight": torch.cat([x["w1"] for x in s], 0),
                              "0.bias": torch.cat([x["b1"] for x in s], 0),
                              "2.weight": torch.cat([x["w2"] for x in s], 1),
                              "2.bias": s[0]["b2"]})
        torch.save({"snapshots": snapshots, "scales": [None] * sc["steps"], "losses": losses},
                   os.path.join(outdir, f"{name}.pt"))


def _spawn(world, names, outdir):
    for r in range(world):  # a kept output folder may hold the markers of an earlier run
        marker = os.path.join(outdir, f"done.w{world}.rank{r}")
        if os.path.exists(marker):
            os.remove(marker)
    with tempfile.TemporaryDirectory() as store:
        try:
            mp.spawn(_worker, args=(world, store, names, outdir), nprocs=world, join=True)
        except mp.ProcessExitedException:
            done = [os.path.exists(os.path.join(outdir, f"done.w{world}.rank{r}"))
                    for r in range(world)]
            if not all(done):
                raise
            # Every rank finished and wrote its results; one died in the exit path.
            print(f"note: a rank of the {world}-rank run died after finishing; its results "
                  "are complete and checked below", file=sys.stderr)


def reference_grads(name, sc, step, snapshot, rank, dtype=torch.float64, autocast=None):
    """One rank's accumulated gradient, recomputed on a plain copy of the model."""
    model = make_model()
    model.load_state_dict(snapshot)
    model = model.to(dtype)
    for i in range(sc["accum"]):
        x, y = batch(name, step, rank, i, sc["mbs"])
        ctx = (torch.autocast("cpu", dtype=autocast) if autocast is not None
               else contextlib.nullcontext())
        with ctx:
            loss = F.cross_entropy(model(x.to(dtype)), y) / sc["accum"]
        loss.backward()
    return torch.cat([p.grad.reshape(-1).to(torch.float64) for p in model.parameters()])


def expected(name, sc, step, snapshot, dtype=torch.float64, autocast=None):
    gs = [reference_grads(name, sc, step, snapshot, r, dtype, autocast)
          for r in range(sc.get("dp", sc["world"]))]
    sq_small = sum(float(g.pow(2).sum()) for g in gs) / len(gs)
    sq_big = float(torch.stack(gs).mean(0).pow(2).sum())
    return sq_small, sq_big


def expected_micro(name, sc, step, snapshot):
    """GradNoiseMeter's pair: micro-batch gradients of every rank, the step's per rank."""
    small, big = [], []
    for r in range(sc["world"]):
        gs = []
        for i in range(sc["accum"]):
            m = make_model()
            m.load_state_dict(snapshot)
            m = m.double()
            x, y = batch(name, step, r, i, sc["mbs"])
            F.cross_entropy(m(x.double()), y).backward()
            gs.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
        small += [float(g.pow(2).sum()) for g in gs]
        big.append(float(torch.stack(gs).mean(0).pow(2).sum()))
    return sum(small) / len(small), sum(big) / len(big)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


class TorchDdpHookTests(unittest.TestCase):
    outdir = None

    @classmethod
    def setUpClass(cls):
        keep = os.environ.get("COPUS_TORCH_OUT")
        if keep:
            os.makedirs(keep, exist_ok=True)
            cls._tmp, cls.outdir = None, keep
        else:
            cls._tmp = tempfile.TemporaryDirectory()
            cls.outdir = cls._tmp.name
        by_world = {}
        for name, sc in SCENARIOS.items():
            if _runnable(sc) is None:
                by_world.setdefault(sc["world"], []).append(name)
        for world, names in sorted(by_world.items()):
            _spawn(world, names, cls.outdir)

    @classmethod
    def tearDownClass(cls):
        if cls._tmp is not None:
            cls._tmp.cleanup()

    def load(self, name):
        why = _runnable(SCENARIOS[name])
        if why is not None:
            self.skipTest(why)
        with open(os.path.join(self.outdir, f"{name}.ndjson"), encoding="utf-8") as f:
            recs = [json.loads(line) for line in f]
        saved = torch.load(os.path.join(self.outdir, f"{name}.pt"))
        return recs, saved

    def check_scenario(self, name, tol=1e-5, autocast=None):
        sc = SCENARIOS[name]
        recs, saved = self.load(name)
        self.assertEqual([r["step"] for r in recs], list(range(sc["steps"])))
        checked = 0
        for rec, snap, loss in zip(recs, saved["snapshots"], saved["losses"]):
            self.assertEqual(rec["v"], 1)
            ranks = sc.get("dp", sc["world"])
            if sc.get("kind") == "meter":
                self.assertEqual((rec["b_small"], rec["b_big"], rec["n_small"]),
                                 (sc["mbs"], sc["mbs"] * sc["accum"], sc["accum"] * ranks))
            else:
                self.assertEqual(rec["b_small"], sc["mbs"] * sc["accum"])
                self.assertEqual(rec["b_big"], sc["mbs"] * sc["accum"] * ranks)
                self.assertEqual(rec["n_small"], ranks)
            if sc.get("config"):
                self.assertEqual(rec["config"], {"dp": ranks, "tp": 1, "pp": 1,
                                                 "mbs": sc["mbs"]})
            elif sc.get("kind", "ddp") in ("ddp", "fsdp2"):
                self.assertNotIn("config", rec, "no micro batch given: no layout claimed")
            self.assertEqual(rec["lr"], LR)
            if rec["step"] == sc.get("overflow_step"):
                self.assertIn("non-finite", rec.get("skipped", ""), rec)
                self.assertEqual((rec["sq_small"], rec["sq_big"]), (0.0, 0.0))
                continue
            self.assertNotIn("skipped", rec, rec)
            self.assertAlmostEqual(rec["loss"], loss, places=5)
            step = rec["step"]
            if sc.get("kind") == "meter":
                small, big = expected_micro(name, sc, step, snap)
            else:
                small, big = expected(name, sc, step, snap)
            if autocast is None:
                self.assertLess(rel(rec["sq_small"], small), tol, (name, rec, small))
                self.assertLess(rel(rec["sq_big"], big), tol, (name, rec, big))
            else:
                # Same arithmetic as the run (CPU autocast), summed independently in float64
                # (on a GPU its bf16 kernels differ: only the float64 comparison applies) ...
                if DEVICE == "cpu":
                    small_a, big_a = expected(name, sc, step, snap, torch.float32, autocast)
                    self.assertLess(rel(rec["sq_small"], small_a), tol, (name, rec, small_a))
                    self.assertLess(rel(rec["sq_big"], big_a), tol, (name, rec, big_a))
                # ... and close to the exact float64 values (bf16 keeps ~3 digits).
                self.assertLess(rel(rec["sq_small"], small), 0.05, (name, rec, small))
                self.assertLess(rel(rec["sq_big"], big), 0.05, (name, rec, big))
            checked += 1
        return recs, saved, checked

    def test_plain_ddp_two_ranks(self):
        _, _, n = self.check_scenario("ddp")
        self.assertEqual(n, 4)

    def test_accumulation_under_no_sync(self):
        _, _, n = self.check_scenario("accum")
        self.assertEqual(n, 3)

    def test_three_ranks_one_bucket_per_parameter(self):
        _, _, n = self.check_scenario("accum_3ranks_buckets")
        self.assertEqual(n, 3)

    def test_grad_scaler_scale_divided_out_and_overflow_step_skipped(self):
        recs, saved, n = self.check_scenario("grad_scaler_overflow")
        self.assertEqual(n, 3)
        scales = saved["scales"]
        # The scaler skipped the overflowing step: the scale halved and the parameters did
        # not move, and the records after it are still right with the new scale.
        self.assertEqual(scales[:3], [2.0 ** 12] * 3)
        self.assertEqual(scales[3], 2.0 ** 11)
        a, b = saved["snapshots"][2], saved["snapshots"][3]
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)

    def test_fixed_loss_scale(self):
        _, _, n = self.check_scenario("fixed_scale")
        self.assertEqual(n, 3)

    def test_bf16_autocast(self):
        _, _, n = self.check_scenario("bf16_autocast", tol=1e-4, autocast=torch.bfloat16)
        self.assertEqual(n, 3)

    def test_grad_noise_meter_under_ddp_with_a_loss_scale(self):
        _, _, n = self.check_scenario("meter_ddp")
        self.assertEqual(n, 2)

    def test_fsdp2_fully_shard_with_accumulation(self):
        _, _, n = self.check_scenario("fsdp2")
        self.assertEqual(n, 3)

    def test_tensor_parallel_model_parallel_mode(self):
        # Shard norms summed over the tensor-parallel group, the replicated bias counted once,
        # the data-parallel group giving the batch sizes: equal to the unsharded model's.
        _, _, n = self.check_scenario("tp2_dp2")
        self.assertEqual(n, 3)

    def test_no_host_read_back_on_the_per_step_path(self):
        # Per step the hooks keep their norms on the device: no item/tolist/float/cpu ...
        # and no collective of their own; each flush reads back once (one tolist) after the
        # hook's all-reduce(s), every flush_every steps and at close().
        checked = 0
        for name, sc in SCENARIOS.items():
            if _runnable(sc) is not None:
                continue
            flushes = math.ceil(sc["steps"] / sc.get("flush_every", FLUSH_EVERY))
            per_flush = FLUSH_COLLECTIVES[sc.get("kind", "ddp")]
            for r in range(sc["world"]):
                with open(os.path.join(self.outdir, f"{name}.syncs.rank{r}.json"),
                          encoding="utf-8") as f:
                    counts = json.load(f)
                where = (name, r, counts)
                self.assertEqual(counts["step"], {}, where)
                self.assertTrue(set(counts["comm"]) <= set(COLLECTIVES), where)
                self.assertEqual(counts["flush"],
                                 {"tolist": flushes, "all_reduce": flushes * per_flush}, where)
                checked += 1
        self.assertGreaterEqual(checked, 20 if BACKEND == "gloo" else 1)

    def test_accumulation_without_no_sync_is_flagged(self):
        recs, _ = self.load("accum_without_no_sync")
        self.assertEqual(len(recs), 2)
        for r in recs:
            self.assertIn("no_sync()", r.get("skipped", ""), r)


def copus_bin():
    """The copus binary: COPUS_BIN (the Rust test passes its own), else a build in target/."""
    path = os.environ.get("COPUS_BIN")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    builds = [os.path.join(root, "target", profile, "copus") for profile in ("release", "debug")]
    builds = [p for p in builds if os.path.exists(p)]
    return max(builds, key=os.path.getmtime) if builds else None


def analyze(directory):
    import subprocess
    exe = copus_bin()
    if exe is None:
        raise unittest.SkipTest("no copus binary (set COPUS_BIN or cargo build)")
    out = subprocess.run([exe, "analyze", directory, "--json", "--device", "cpu"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise AssertionError(f"copus analyze {directory} failed: {out.stderr}")
    return json.loads(out.stdout)


class DumpRoundTripTests(unittest.TestCase):
    """dump_gradients writes what copus reads: a real torch model's micro-batch gradients,
    analysed by `copus analyze`, agree with an independent per-example recomputation."""

    M, D, H, C = 1024, 16, 32, 5

    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        M, D, H, C = cls.M, cls.D, cls.H, cls.C
        cls.X = torch.randn(M, D)
        cls.Y = (cls.X @ torch.randn(D, C) + torch.randn(M, C)).argmax(1)
        cls.model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(),
                                        torch.nn.Linear(H, C))
        keep = os.environ.get("COPUS_TORCH_OUT")
        cls._tmp = None if keep else tempfile.TemporaryDirectory()
        cls.outdir = keep or cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        if cls._tmp is not None:
            cls._tmp.cleanup()

    def micro_grads(self, idx):
        """The mean gradient of one micro-batch, by a real backward pass."""
        self.model.zero_grad()
        F.cross_entropy(self.model(self.X[idx]), self.Y[idx]).backward()
        return self.model

    def flat(self, path, dtype=torch.float64):
        """A dumped file read back independently: header, then each tensor as float64."""
        import struct
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual((8 + n) % 8, 0, "data starts 8-byte aligned")
        header = json.loads(data[8:8 + n])
        meta = header.pop("__metadata__")
        body = data[8 + n:]
        kinds = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
        parts = []
        for name in sorted(header):
            h = header[name]
            a, b = h["data_offsets"]
            t = torch.frombuffer(bytearray(body[a:b]), dtype=kinds[h["dtype"]])
            parts.append(t.to(dtype))
        return torch.cat(parts), header, meta

    def test_f32_dump_analyzed_by_copus_matches_per_example_truth(self):
        n, K, S = 16, 8, 200
        d = os.path.join(self.outdir, "dump_f32")
        gen = torch.Generator().manual_seed(1)
        for step in range(S):
            idx = torch.randint(0, self.M, (K, n), generator=gen)
            for k in range(K):
                copus_hook.dump_gradients(self.micro_grads(idx[k]), d, step, f"mb{k}",
                                          samples=n)
        # Per-example truth at the same (fixed) parameters.
        params = list(self.model.parameters())
        per = []
        for i in range(self.M):
            self.model.zero_grad()
            F.cross_entropy(self.model(self.X[i:i + 1]), self.Y[i:i + 1]).backward()
            per.append(torch.cat([p.grad.reshape(-1) for p in params]).double())
        G = torch.stack(per)
        gbar = G.mean(0)
        truth = float(((G - gbar) ** 2).sum(1).mean() / (gbar ** 2).sum())

        report = analyze(d)
        self.assertTrue(report["backend"].startswith("cpu"))
        self.assertEqual(len(report["steps"]), S)
        # Every step's sums equal the ones formed from the files, read back independently.
        for row in report["steps"][:5]:
            gs = [self.flat(os.path.join(d, f"step_{row['step']}", f"mb{k}.safetensors"))[0]
                  for k in range(K)]
            small = sum(float(g.pow(2).sum()) for g in gs) / K
            big = float(torch.stack(gs).mean(0).pow(2).sum())
            self.assertLess(rel(row["sq_small"], small), 1e-9)
            self.assertLess(rel(row["sq_big"], big), 1e-9)
            self.assertEqual((row["b_small"], row["b_big"]), (n, n * K))
        est = report["summary"]["b_simple"]
        self.assertLess(rel(est, truth), 0.05, f"copus {est:.2f} vs per-example {truth:.2f}")

    def test_bf16_and_f16_dumps_and_the_loss_scale(self):
        gen = torch.Generator().manual_seed(2)
        for dt, kind in (("bf16", torch.bfloat16), ("f16", torch.float16)):
            d = os.path.join(self.outdir, f"dump_{dt}")
            ref = []
            for step in range(3):
                idx = torch.randint(0, self.M, (3, 8), generator=gen)
                gs = []
                for k in range(3):
                    m = self.micro_grads(idx[k])
                    # The gradients of a loss scaled by 1024, divided out on the way.
                    for p in m.parameters():
                        p.grad.mul_(1024.0)
                    path = copus_hook.dump_gradients(m, d, step, f"rank{k}", samples=8,
                                                     dtype=dt, loss_scale=1024.0)
                    flat, header, meta = self.flat(path)
                    self.assertEqual(meta, {"samples": "8"})
                    self.assertEqual({h["dtype"] for h in header.values()},
                                     {"BF16" if dt == "bf16" else "F16"})
                    want = torch.cat([p.grad.reshape(-1) / 1024.0 for p in m.parameters()])
                    # What was written is the unscaled gradient rounded to the dtype.
                    by_name = [p.grad.reshape(-1) / 1024.0 for _, p in
                               sorted(m.named_parameters())]
                    self.assertTrue(torch.equal(flat, torch.cat(by_name).to(kind).double()))
                    self.assertEqual(flat.numel(), want.numel())
                    gs.append(flat)
                ref.append((sum(float(g.pow(2).sum()) for g in gs) / 3,
                            float(torch.stack(gs).mean(0).pow(2).sum())))
            report = analyze(d)
            for row, (small, big) in zip(report["steps"], ref):
                self.assertLess(rel(row["sq_small"], small), 1e-9, dt)
                self.assertLess(rel(row["sq_big"], big), 1e-9, dt)

    def test_names_layout_and_refusals(self):
        ddp_like = torch.nn.Module()
        ddp_like.module = torch.nn.Linear(3, 2)
        ddp_like.module.weight.grad = torch.ones(2, 3)  # bias has no gradient yet: zeros
        with tempfile.TemporaryDirectory() as d:
            path = copus_hook.dump_gradients(ddp_like, d, 7, "rank0", samples=4)
            self.assertEqual(path, os.path.join(d, "step_7", "rank0.safetensors"))
            flat, header, meta = self.flat(path)
            self.assertEqual(sorted(header), ["bias", "weight"], "DDP's module. prefix dropped")
            self.assertEqual(header["weight"]["shape"], [2, 3])
            self.assertEqual(float(flat.sum()), 6.0)
            self.assertEqual(os.listdir(os.path.join(d, "step_7")), ["rank0.safetensors"])
            for bad in (dict(samples=0), dict(samples=4, dtype="f64"),
                        dict(samples=4, loss_scale=0.0)):
                with self.assertRaises(ValueError):
                    copus_hook.dump_gradients(ddp_like, d, 0, "x", **bad)


def _micro_reference(seen, k):
    """Per step: (sq_small, sq_big) recomputed in float64 from the parameters at the step's
    first micro-batch and the micro-batches the model saw."""
    out = []
    for start in range(0, len(seen) - k + 1, k):
        snap = seen[start][0]
        gs = []
        for _, x, y in seen[start:start + k]:
            m = make_model()
            m.load_state_dict(snap)
            m = m.double()
            F.cross_entropy(m(x.double()), y).backward()
            gs.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
        out.append((sum(float(g.pow(2).sum()) for g in gs) / k,
                    float(torch.stack(gs).mean(0).pow(2).sum())))
    return out


class CallbackTests(unittest.TestCase):
    """The Lightning and Hugging Face Trainer callbacks (GradNoiseMeter: micro-batches as the
    small batch), one process on CPU with accumulation; records against a recomputation from
    the micro-batches the model really saw."""

    K, MBS, STEPS = 3, 4, 3

    def data(self):
        g = torch.Generator().manual_seed(5)
        return torch.randn(64, D_IN, generator=g), torch.randint(0, D_OUT, (64,), generator=g)

    def check(self, path, seen):
        with open(path, encoding="utf-8") as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in recs], list(range(self.STEPS)))
        ref = _micro_reference(seen, self.K)
        self.assertEqual(len(ref), self.STEPS)
        for r, (small, big) in zip(recs, ref):
            self.assertEqual((r["b_small"], r["b_big"], r["n_small"]),
                             (self.MBS, self.MBS * self.K, self.K))
            self.assertNotIn("skipped", r)
            self.assertLess(rel(r["sq_small"], small), 1e-5, (r, small))
            self.assertLess(rel(r["sq_big"], big), 1e-5, (r, big))
            self.assertAlmostEqual(r["lr"], LR)
        return recs

    def test_lightning_callback(self):
        try:
            import lightning.pytorch as pl
        except ImportError:
            self.skipTest("lightning is not installed")
        seen = []

        class Lit(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = make_model()

            def training_step(self, batch, idx):
                x, y = batch
                seen.append(({k: v.detach().clone() for k, v in self.net.state_dict().items()},
                             x.clone(), y.clone()))
                return F.cross_entropy(self.net(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=LR)

        X, Y = self.data()
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y),
                                             batch_size=self.MBS, shuffle=False)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "lightning.ndjson")
            trainer = pl.Trainer(max_steps=self.STEPS, accumulate_grad_batches=self.K,
                                 accelerator="cpu", devices=1, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False, gradient_clip_val=1e-3,
                                 callbacks=[copus_hook.lightning_callback(path=path)])
            trainer.fit(Lit(), loader)
            self.check(path, seen)

    def test_hf_trainer_callback(self):
        try:
            from transformers import Trainer, TrainingArguments
        except ImportError:
            self.skipTest("transformers is not installed")
        seen = []

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = make_model()

            def forward(self, x, labels):
                if self.training:
                    seen.append(({k: v.detach().clone()
                                  for k, v in self.net.state_dict().items()},
                                 x.clone(), labels.clone()))
                return {"loss": F.cross_entropy(self.net(x), labels)}

        X, Y = self.data()

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return len(X)

            def __getitem__(self, i):
                return {"x": X[i], "labels": Y[i]}

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hf.ndjson")
            args = TrainingArguments(output_dir=d, per_device_train_batch_size=self.MBS,
                                     gradient_accumulation_steps=self.K, max_steps=self.STEPS,
                                     learning_rate=LR, lr_scheduler_type="constant",
                                     optim="sgd", weight_decay=0.0, max_grad_norm=1e-3,
                                     report_to=[], use_cpu=True, save_strategy="no",
                                     logging_strategy="no", disable_tqdm=True,
                                     remove_unused_columns=False)
            trainer = Trainer(model=Net(), args=args, train_dataset=Data())
            trainer.add_callback(copus_hook.hf_trainer_callback(path=path, trainer=trainer))
            trainer.train()
            self.check(path, seen)

    def test_the_meter_refuses_no_accumulation(self):
        with self.assertRaises(ValueError):
            copus_hook.GradNoiseMeter(make_model(), copus_hook.StatsWriter(), 4, 1)

    def test_no_writer_is_refused_at_once_naming_open_writer(self):
        # `writer = open_writer(...) if rank == 0 else None` ran 16 steps, then died in the
        # first flush with "'NoneType' object has no attribute 'write'".
        with self.assertRaises(TypeError) as caught:
            copus_hook.GradNoiseMeter(make_model(), None, 4, 2)
        self.assertIn("open_writer", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
