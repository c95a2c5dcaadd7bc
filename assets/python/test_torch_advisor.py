"""copus_hook.Advisor under real torch.distributed (gloo on CPU, 2 processes) and alone.

AdvisorDdpTests: two DDP trainings with DdpNoiseHook(advisor=...), one following an advice
file written before training, one a local TCP line server (whose first connection breaks
off in the middle of a line and whose later connections send the whole history again). The
advice: at step 3 the global batch doubles (accumulation 2 -> 4, applied); at step 5 a dry
run (not applied); at step 6 a new layout (restart: not applied, its recipe logged once).
Checked per rank: the backward passes of each step (counted by a gradient hook), the
learning rate (sqrt and linear rules), the change returned by step_boundary; in the stats
stream: one `applied` line in its place before the record of step 3 and b_small / b_big
doubled from step 3. AdvisorUnitTests: the file tail (a partial last line, junk lines), the
refusals (another micro batch, a batch that does not divide), check_every, the lr rules, the
applied line through a writer, GradNoiseMeter following the accumulation.

Run from this directory: ``python -m unittest -v test_torch_advisor`` (torch with gloo).
COPUS_BIN (or a build in target/) is used to show that `copus analyze` still reads a stream
holding an applied line.
"""

import contextlib
import datetime
import json
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import copus_hook  # noqa: E402

WORLD, MBS, ACC0, STEPS, LR = 2, 4, 2, 8, 0.1
D_IN, D_H, D_OUT = 8, 16, 4


def advice(at_step, batch, accumulation, apply="batch", dry_run=False, dp=WORLD, mbs=MBS):
    """One advice line as `copus watch --advise` writes it."""
    return json.dumps({"v": 1, "advice": {
        "at_step": at_step, "batch": batch, "micro_batch": mbs, "accumulation": accumulation,
        "layout": {"dp": dp, "tp": 1, "pp": 1}, "expected_gain": 0.12,
        "reason": "B_crit 310 samples; predicted goodput +12 %", "apply": apply,
        "dry_run": dry_run}}, separators=(",", ":"))


DOUBLE = advice(3, 2 * WORLD * MBS * ACC0, 2 * ACC0)          # batch 16 -> 32, applied
DRY = advice(5, 4 * WORLD * MBS * ACC0, 4 * ACC0, dry_run=True)
RESTART = advice(6, 64, 4, apply="restart", dp=4)
ADVICE = [DOUBLE, DRY, RESTART]
JUNK = ['{"v":1,"step":0,"b_small":4,"b_big":8,"sq_small":1.0,"sq_big":0.5}',
        '{"v":1,"advice":{"at_step":"soon"}}', "not json"]

# name: source kind, lr rule
SCENARIOS = {"file": dict(lr_scaling="sqrt"), "tcp": dict(lr_scaling="linear")}


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, D_H), torch.nn.Tanh(),
                               torch.nn.Linear(D_H, D_OUT))


def data(step, rank, micro):
    g = torch.Generator().manual_seed(step * 1009 + rank * 101 + micro)
    return torch.randn(MBS, D_IN, generator=g), torch.randint(0, D_OUT, (MBS,), generator=g)


def _train(rank, name, source, outdir):
    sc = SCENARIOS[name]
    log = logging.getLogger("copus_hook")
    handler = logging.FileHandler(os.path.join(outdir, f"{name}.rank{rank}.log"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    model = make_model()
    ddp = DDP(model)
    writer = copus_hook.open_writer(path=os.path.join(outdir, f"{name}.ndjson"))
    # check_every=1: the test holds the change to the advised step exactly (the default
    # checks every 16 steps; test_default_checks_every_16_steps).
    adv = copus_hook.Advisor(source, micro_batch=MBS, accumulation=ACC0,
                             lr_scaling=sc["lr_scaling"], reconnect_s=0.05, check_every=1)
    hook = copus_hook.DdpNoiseHook(ddp, writer, adv.samples_per_rank, flush_every=4,
                                   advisor=adv).install()
    if name == "tcp" and adv.reader:
        # Wait until the server's advice is in (not on the training path), so that the step
        # of the change does not depend on how fast the connection comes up.
        deadline = time.monotonic() + 60
        while adv.poll() < len(ADVICE):
            if time.monotonic() > deadline:
                raise TimeoutError("no advice from the TCP source")
            time.sleep(0.01)
    backwards = [0]
    model[0].weight.register_hook(lambda g: backwards.__setitem__(0, backwards[0] + 1))
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    per_step, lrs, changes = [], [], []
    for step in range(STEPS):
        change = adv.step_boundary(step)
        if change is not None:
            changes.append(change)
            for g in opt.param_groups:
                g["lr"] = LR * adv.lr_factor
        backwards[0] = 0
        acc = adv.accumulation
        for i in range(acc):
            x, y = data(step, rank, i)
            ctx = ddp.no_sync() if i < acc - 1 else contextlib.nullcontext()
            with ctx:
                (F.cross_entropy(ddp(x), y) / acc).backward()
        per_step.append(backwards[0])
        lrs.append(opt.param_groups[0]["lr"])
        hook.step_end(step, lr=lrs[-1])
        opt.step()
        opt.zero_grad(set_to_none=True)
        if name == "tcp":
            time.sleep(0.02)   # let the source reconnect and resend its history meanwhile
    hook.close()
    writer.close()
    adv.close()
    log.removeHandler(handler)
    handler.close()
    with open(os.path.join(outdir, f"{name}.rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump({"backwards": per_step, "lrs": lrs, "changes": changes,
                   "restart": adv.restart, "shown": adv.shown, "reader": adv.reader,
                   "skipped_lines": adv.skipped_lines, "accumulation": adv.accumulation}, f)


def _no_numpy(tensor, *args, **kwargs):
    raise RuntimeError("Tensor.numpy() called: NumPy is no dependency of copus_hook")


def _worker(rank, store_dir, sources, outdir):
    torch.set_num_threads(1)
    # `pip install torch` brings no NumPy, so nothing on the Advisor's path may read a tensor
    # through it (broadcast_object_list unpickles through Tensor.numpy(): without NumPy the
    # first check killed the job).
    torch.Tensor.numpy = _no_numpy
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/rdzv", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    try:
        for name, source in sources.items():
            _train(rank, name, source, outdir)
            dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # As in test_torch_hook: mark the results, wait on the files, leave without gloo's
    # teardown (which can abort a rank on a loaded machine after all the work is done).
    with open(os.path.join(outdir, f"done.rank{rank}"), "w", encoding="utf-8") as f:
        f.write("ok\n")
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(outdir, f"done.rank{r}")) for r in range(WORLD)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: the other ranks did not finish")
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawn(sources, outdir):
    with tempfile.TemporaryDirectory() as store:
        try:
            mp.spawn(_worker, args=(store, sources, outdir), nprocs=WORLD, join=True)
        except mp.ProcessExitedException:
            if not all(os.path.exists(os.path.join(outdir, f"done.rank{r}"))
                       for r in range(WORLD)):
                raise
            print("note: a rank died after finishing; its results are complete and checked "
                  "below", file=sys.stderr)


class LineServer:
    """A local line server: its first client gets half an advice line and is cut off; every
    later client gets all the lines (the history, as a stats server sends it), the second
    one then a closed connection, the later ones an open one."""

    def __init__(self, lines):
        self.data = "".join(ln + "\n" for ln in lines).encode()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._open = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            try:
                if self.connections == 1:
                    conn.sendall(self.data[:len(self.data) // 3])
                    conn.close()
                elif self.connections == 2:
                    conn.sendall(self.data)
                    conn.close()
                else:
                    conn.sendall(self.data)
                    self._open.append(conn)
            except OSError:
                conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        for c in self._open:
            c.close()
        self.sock.close()


def copus_bin():
    path = os.environ.get("COPUS_BIN")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    builds = [os.path.join(root, "target", p, "copus") for p in ("release", "debug")]
    builds = [p for p in builds if os.path.exists(p)]
    return max(builds, key=os.path.getmtime) if builds else None


class AdvisorDdpTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.outdir = cls._tmp.name
        path = os.path.join(cls.outdir, "advice.ndjson")
        with open(path, "w", encoding="utf-8") as f:
            # junk and a partial last line (still being written) around the advice
            f.write("\n".join(JUNK[:1] + ADVICE[:2] + JUNK[1:] + ADVICE[2:]) + "\n")
            f.write('{"v":1,"advice":{"at_step":1,"ba')
        cls.server = LineServer(ADVICE)
        try:
            _spawn({"file": path, "tcp": f"tcp://127.0.0.1:{cls.server.port}"}, cls.outdir)
        finally:
            cls.server.close()

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def ranks(self, name):
        out = []
        for r in range(WORLD):
            with open(os.path.join(self.outdir, f"{name}.rank{r}.json"), encoding="utf-8") as f:
                out.append(json.load(f))
        return out

    def stream(self, name):
        with open(os.path.join(self.outdir, f"{name}.ndjson"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def check(self, name, factor):
        ranks = self.ranks(name)
        want_change = {"at_step": 3, "batch": 2 * WORLD * MBS * ACC0, "micro_batch": MBS,
                       "accumulation": 2 * ACC0, "advice_step": 3, "lr_factor": factor}
        restart = copus_hook.parse_advice(RESTART)
        for r, got in enumerate(ranks):
            # Every rank changes its accumulation at step 3, and only then.
            self.assertEqual(got["backwards"], [ACC0] * 3 + [2 * ACC0] * (STEPS - 3), r)
            self.assertEqual(got["changes"], [want_change], r)
            for step, lr in enumerate(got["lrs"]):
                self.assertAlmostEqual(lr, LR * (factor if step >= 3 else 1.0), places=12)
            # Neither the dry run nor the restart was applied; both are kept.
            self.assertEqual(got["accumulation"], 2 * ACC0)
            self.assertEqual(got["restart"], restart)
            self.assertEqual(got["shown"], [copus_hook.parse_advice(DRY)])
            self.assertEqual(got["reader"], r == 0)
        # The stats stream: one record per step, the applied line in its place.
        lines = self.stream(name)
        kinds = ["applied" if "applied" in x else x["step"] for x in lines]
        self.assertEqual(kinds, [0, 1, 2, "applied", 3, 4, 5, 6, 7])
        self.assertEqual(lines[3], {"v": 1, "applied": want_change})
        for rec in (x for x in lines if "step" in x):
            k = ACC0 if rec["step"] < 3 else 2 * ACC0
            self.assertEqual((rec["b_small"], rec["b_big"], rec["n_small"]),
                             (MBS * k, MBS * k * WORLD, WORLD), rec)
            self.assertGreater(rec["sq_small"], rec["sq_big"])
            self.assertAlmostEqual(rec["lr"], LR * (factor if rec["step"] >= 3 else 1.0))
        # Rank 0 logged the dry run and the restart recipe once each; rank 1 nothing.
        with open(os.path.join(self.outdir, f"{name}.rank0.log"), encoding="utf-8") as f:
            log = f.read()
        self.assertEqual(log.count("dry run, not applied"), 1, log)
        self.assertEqual(log.count("restart, not applied in place"), 1, log)
        self.assertIn("relaunch with dp=4 tp=1 pp=1, micro batch 4, accumulation 4", log)
        self.assertEqual(log.count("applied at step 3"), 1, log)
        with open(os.path.join(self.outdir, f"{name}.rank1.log"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "")
        return ranks, lines

    def test_file_source_doubles_the_batch_at_step_3_on_every_rank(self):
        ranks, _ = self.check("file", math.sqrt(2.0))
        # The stats record and the two malformed lines; the partial last line waits.
        self.assertEqual(ranks[0]["skipped_lines"], len(JUNK))

    def test_tcp_source_with_a_broken_first_connection(self):
        ranks, _ = self.check("tcp", 2.0)
        self.assertGreaterEqual(self.server.connections, 3, "reconnected after the lost ones")
        self.assertEqual(ranks[0]["skipped_lines"], 0)

    def test_copus_analyze_reads_the_stream_with_the_applied_line(self):
        exe = copus_bin()
        if exe is None:
            self.skipTest("no copus binary (set COPUS_BIN or cargo build)")
        out = subprocess.run([exe, "analyze", os.path.join(self.outdir, "file.ndjson"),
                              "--json"], capture_output=True, text=True, check=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        report = json.loads(out.stdout)
        self.assertEqual([s["step"] for s in report["steps"]], list(range(STEPS)))


class MemorySink:
    def __init__(self):
        self.lines = []

    def write_line(self, line):
        self.lines.append(line)

    def close(self):
        pass


class AdvisorUnitTests(unittest.TestCase):
    """One process, no torch.distributed: the Advisor reads its source itself."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self._tmp.name, "advice.ndjson")

    def tearDown(self):
        self._tmp.cleanup()

    def append(self, text):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)

    def advisor(self, **kw):
        args = dict(micro_batch=MBS, accumulation=ACC0, check_every=1)
        args.update(kw)
        adv = copus_hook.Advisor(self.path, **args)
        self.addCleanup(adv.close)
        return adv

    def test_a_growing_file_with_a_partial_line_and_junk(self):
        adv = self.advisor()
        self.assertEqual(adv.poll(), 0, "no file yet")
        one = advice(2, 4 * MBS, 4, dp=1)
        self.append(JUNK[0] + "\n" + one[:20])
        self.assertEqual(adv.poll(), 0)
        self.assertEqual(adv.step_boundary(0), None)
        self.append(one[20:] + "\n" + JUNK[2] + "\n")
        self.assertEqual(adv.poll(), 1)
        self.assertEqual(adv.skipped_lines, 2)
        self.assertEqual(adv.step_boundary(1), None, "not due before its step")
        change = adv.step_boundary(2)
        self.assertEqual(change, {"at_step": 2, "batch": 4 * MBS, "micro_batch": MBS,
                                  "accumulation": 4, "advice_step": 2, "lr_factor": 1.0})
        self.assertEqual((adv.accumulation, adv.batch, adv.samples_per_rank), (4, 16, 16))
        self.append(one + "\n")   # the same advice again (a resend): skipped
        self.assertEqual(adv.step_boundary(3), None)
        self.assertEqual(adv.applied, [change])

    def test_lr_rules(self):
        for rule, want in (("none", 1.0), ("sqrt", 2.0), ("linear", 4.0)):
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(advice(0, 4 * MBS * ACC0, 4 * ACC0, dp=1) + "\n")
            adv = self.advisor(lr_scaling=rule)
            self.assertEqual(adv.lr_factor, 1.0)
            self.assertEqual(adv.step_boundary(0)["lr_factor"], want)
            self.assertEqual(adv.lr_factor, want)
            adv.close()
        with self.assertRaises(ValueError):
            self.advisor(lr_scaling="cubic")

    def test_check_every_and_the_applied_line_through_a_writer(self):
        sink = MemorySink()
        writer = copus_hook.StatsWriter([sink])
        self.append(advice(3, 4 * MBS, 4, dp=1) + "\n"
                    + advice(0, 8 * MBS, 8, dp=1, dry_run=True) + "\n")
        adv = self.advisor(writer=writer, check_every=2)
        with self.assertLogs("copus_hook", "WARNING") as logs:
            self.assertIsNone(adv.step_boundary(0))     # the dry run: logged only
        self.assertIn("dry run, not applied", logs.output[0])
        for step in (1, 2, 3):
            self.assertIsNone(adv.step_boundary(step))
        self.assertEqual(adv.accumulation, ACC0)
        self.assertEqual(adv.step_boundary(4)["at_step"], 4, "the next check after step 3")
        self.assertEqual(sink.lines, ['{"v":1,"applied":{"at_step":4,"batch":16,'
                                      '"micro_batch":4,"accumulation":4,"advice_step":3,'
                                      '"lr_factor":1.0}}'])

    def test_default_checks_every_16_steps(self):
        # The default cadence matches the hooks' flush_every: one check (one broadcast when
        # distributed) per 16 steps, the advice applied at the first check after its step.
        self.append(advice(3, 4 * MBS, 4, dp=1) + "\n")
        adv = copus_hook.Advisor(self.path, micro_batch=MBS, accumulation=ACC0)
        self.addCleanup(adv.close)
        self.assertEqual(adv.check_every, 16)
        for step in range(16):
            self.assertIsNone(adv.step_boundary(step), step)
        self.assertEqual(adv.accumulation, ACC0)
        change = adv.step_boundary(16)
        self.assertEqual((change["at_step"], change["advice_step"], adv.accumulation),
                         (16, 3, 4))

    def test_refusals_are_treated_as_restarts(self):
        self.append(advice(0, 8 * 2, 8, dp=1, mbs=2) + "\n"       # another micro batch
                    + advice(1, 30, 7, dp=1) + "\n"               # 30 is not a multiple of 4
                    + advice(2, 64, 4, apply="restart", dp=4) + "\n")
        adv = self.advisor()
        for step, words in ((0, "micro batch 2 differs"), (1, "not a multiple"),
                            (2, "relaunch with dp=4 tp=1 pp=1")):
            with self.assertLogs("copus_hook", "WARNING") as logs:
                self.assertIsNone(adv.step_boundary(step))
            self.assertEqual(len(logs.output), 1)
            self.assertIn(words, logs.output[0])
            self.assertEqual(adv.restart["at_step"], step)
        self.assertEqual((adv.accumulation, adv.applied), (ACC0, []))

    def test_a_smaller_batch_is_refused_unless_allowed(self):
        # The run's batch is micro batch MBS x ACC0 on one process; advice halving it is no
        # advice copus writes (its plans only grow the batch): refused, unless allow_shrink.
        half = ACC0 // 2
        self.append(advice(3, MBS * half, half, dp=1) + "\n")
        adv = self.advisor()
        with self.assertLogs("copus_hook", "WARNING") as logs:
            self.assertIsNone(adv.step_boundary(16))
        self.assertIn("ignored", logs.output[0])
        self.assertIn("shrinks the global batch", logs.output[0])
        self.assertNotIn("relaunch", logs.output[0])
        self.assertEqual((adv.accumulation, adv.applied, adv.restart, adv.ignored[0]["at_step"]),
                         (ACC0, [], None, 3))
        ok = self.advisor(allow_shrink=True)
        change = ok.step_boundary(16)
        self.assertEqual((change["accumulation"], ok.accumulation), (half, half))

    def test_a_job_relaunched_as_a_restart_said_keeps_its_batch(self):
        # The advice file holds batch advice (batch 64 on dp 4) and then a restart (batch 128
        # on dp 8). The job relaunched as the restart said reads both again at its first
        # check: the newest supersedes the older, and the run already follows it, so nothing
        # changes, nothing is logged and the batch does not shrink to the older 64.
        self.append(advice(217, 64, 2, dp=4, mbs=8) + "\n"
                    + advice(300, 128, 2, apply="restart", dp=8, mbs=8) + "\n")
        adv = self.advisor(micro_batch=8, accumulation=2, dp_world=8, tp=1, pp=1,
                           check_every=16)
        with self.assertNoLogs("copus_hook", "WARNING"):
            for step in range(305, 340):
                self.assertIsNone(adv.step_boundary(step), step)
        self.assertEqual((adv.batch, adv.applied, adv.restart), (128, [], None))
        # The same file read by the job before the restart (dp 4, batch 32): the newest advice
        # due is the restart, which it is told to follow; the older batch advice is not
        # applied on the way.
        old = self.advisor(micro_batch=8, accumulation=1, dp_world=4, check_every=16)
        with self.assertLogs("copus_hook", "WARNING") as logs:
            self.assertIsNone(old.step_boundary(304))
        self.assertIn("relaunch with dp=8", logs.output[0])
        self.assertEqual((old.batch, old.applied, old.restart["at_step"]), (32, [], 300))
        # Another pipeline depth than the restart's is not following it.
        other = self.advisor(micro_batch=8, accumulation=2, dp_world=8, pp=2, check_every=16)
        with self.assertLogs("copus_hook", "WARNING"):
            other.step_boundary(320)
        with self.assertRaises(ValueError):
            self.advisor(tp=0)
        # close() is idempotent and a context manager closes it; a closed Advisor reads no more.
        with copus_hook.Advisor(self.path, micro_batch=8, accumulation=2) as ctx:
            pass
        ctx.close()
        self.assertEqual(ctx.poll(), 0)

    def test_parse_advice_refuses_mistyped_fields(self):
        good = json.loads(DOUBLE)
        self.assertEqual(copus_hook.parse_advice(DOUBLE)["batch"], good["advice"]["batch"])
        for field, bad in (("batch", True), ("batch", 0), ("at_step", -1), ("apply", "now"),
                           ("dry_run", "no"), ("layout", {"dp": 2}), ("micro_batch", 4.5)):
            obj = json.loads(DOUBLE)
            obj["advice"][field] = bad
            self.assertIsNone(copus_hook.parse_advice(json.dumps(obj)), (field, bad))
        self.assertIsNone(copus_hook.parse_advice(JUNK[0]))

    def test_grad_noise_meter_follows_the_accumulation(self):
        self.append(advice(1, 4 * MBS, 4, dp=1) + "\n")
        adv = self.advisor()
        sink = MemorySink()
        model = make_model()
        meter = copus_hook.GradNoiseMeter(model, copus_hook.StatsWriter([sink]), MBS, ACC0,
                                          advisor=adv).install()
        for step in range(3):
            adv.step_boundary(step)
            for i in range(adv.accumulation):
                x, y = data(step, 0, i)
                (F.cross_entropy(model(x), y) / adv.accumulation).backward()
            meter.step_end(step, loss=torch.tensor(1.5))
            model.zero_grad(set_to_none=True)
        meter.close()
        lines = [json.loads(s) for s in sink.lines]
        self.assertEqual(["applied" if "applied" in x else x["step"] for x in lines],
                         [0, "applied", 1, 2])
        recs = [x for x in lines if "step" in x]
        self.assertEqual([(r["b_small"], r["b_big"], r["n_small"]) for r in recs],
                         [(MBS, 2 * MBS, 2), (MBS, 4 * MBS, 4), (MBS, 4 * MBS, 4)])
        self.assertTrue(all("skipped" not in r and r["loss"] == 1.5 for r in recs))


if __name__ == "__main__":
    unittest.main()
