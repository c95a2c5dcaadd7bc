"""The hook on a real small model against an exact oracle (torch on CPU, one process).

A tiny character GPT (``tiny_gpt.TinyGPT``, one block, d 32, 16-token windows) trains with
AdamW for STEPS steps of B = K x b samples: K micro-batches of b samples each, the loss
divided by K, measured by ``copus_hook.GradNoiseMeter`` (the hook's two-batch estimate:
micro-batch vs step gradient). On the same samples of every step the test computes each
sample's own gradient (``torch.func.functional_call`` on detached copies of the parameters,
so the hook never sees these passes) and writes the exact per-example stream: b_small 1,
b_big B, sq_small = mean_i |g_i|^2, sq_big = |mean_i g_i|^2. `copus analyze` of the two
streams must agree within 5 % on the run-wide B_simple and on the last window's. The
trainer's own gradient norm (``clip_grad_norm_`` before clipping) must equal the hook's
|G|^2 at every step (``copus_hook.grad_norm_mismatch``), and a doubled |G|^2 (what an FSDP
replica counted twice looks like) must be flagged.

Run from this directory: ``python -m unittest -v test_torch_oracle``; COPUS_BIN (or a
build in target/) is the copus binary.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.func import functional_call, grad, vmap  # noqa: E402

import copus_hook  # noqa: E402
import tiny_gpt  # noqa: E402
from test_torch_hook import copus_bin  # noqa: E402

STEPS, K, MB, CONTEXT = 240, 16, 2, 16
B = K * MB


def per_example_sq(model, x, y):
    """(mean_i |g_i|^2, |mean_i g_i|^2) over the samples of (x, y), in float64: each sample's
    own gradient (``torch.func.grad`` of its loss, vectorised over the samples by ``vmap``;
    equal to a loop of one-sample backward passes to 1e-12)."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_of_one(p, xi, yi):
        return functional_call(model, p, (xi.unsqueeze(0), yi.unsqueeze(0)))

    with warnings.catch_warnings():
        # vmap runs CPU attention through its generic batching: slower than native, correct.
        warnings.filterwarnings("ignore", message="There is a performance drop")
        grads = vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)
    flat = torch.cat([g.reshape(len(x), -1).double() for g in grads.values()], dim=1)
    mean = flat.mean(dim=0)
    return float((flat * flat).sum(dim=1).mean()), float(mean.dot(mean))


class OracleTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls._tmp = tempfile.TemporaryDirectory()
        d = cls._tmp.name
        cls.hook_path = os.path.join(d, "hook.ndjson")
        cls.exact_path = os.path.join(d, "exact.ndjson")
        data = tiny_gpt.CharData(context=CONTEXT, seed=0)
        torch.manual_seed(0)
        model = tiny_gpt.TinyGPT(data.vocab, d=32, layers=1, heads=2, context=CONTEXT)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        writer = copus_hook.open_writer(path=cls.hook_path)
        meter = copus_hook.GradNoiseMeter(model, writer, MB, K, flush_every=8,
                                          precondition=opt).install()
        cls.norms = []
        with open(cls.exact_path, "w", encoding="utf-8") as exact:
            for step in range(STEPS):
                xs, ys = [], []
                for m in range(K):
                    x, y = data.batch(0, 1, step, m, MB)
                    (model(x, y) / K).backward()
                    xs.append(x)
                    ys.append(y)
                meter.step_end(step, tokens=(step + 1) * B * CONTEXT)
                cls.norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)))
                small, big = per_example_sq(model, torch.cat(xs), torch.cat(ys))
                rec = copus_hook.make_record(step, 1, B, small, big, n_small=B,
                                             tokens=(step + 1) * B * CONTEXT)
                exact.write(copus_hook.dumps(rec) + "\n")
                opt.step()
                opt.zero_grad(set_to_none=True)
        meter.close()
        writer.close()

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def analyze(self, path):
        exe = copus_bin()
        if exe is None:
            raise unittest.SkipTest("no copus binary (set COPUS_BIN or cargo build)")
        out = subprocess.run([exe, "analyze", path, "--json", "--summary-only"],
                             capture_output=True, text=True, check=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)["summary"]

    def test_hook_estimate_within_5_percent_of_the_exact_per_example_estimate(self):
        hook, exact = self.analyze(self.hook_path), self.analyze(self.exact_path)
        self.assertEqual(hook["steps"], STEPS)
        self.assertEqual(exact["steps"], STEPS)
        for what in ("run-wide", "last window"):
            h = hook["b_simple"] if what == "run-wide" else hook["now"]["b_simple"]
            e = exact["b_simple"] if what == "run-wide" else exact["now"]["b_simple"]
            self.assertGreater(e, 0, what)
            print(f"\n{what}: hook B_simple {h:.2f}, exact per-example {e:.2f} "
                  f"({100 * (h / e - 1):+.2f} %)", file=sys.stderr)
            self.assertLess(abs(h / e - 1), 0.05, (what, h, e))

    def test_the_adam_preconditioned_scale_is_reported_beside_the_raw_one(self):
        exe = copus_bin()
        if exe is None:
            raise unittest.SkipTest("no copus binary (set COPUS_BIN or cargo build)")
        out = subprocess.run([exe, "analyze", self.hook_path, "--preconditioned", "--json",
                              "--summary-only"], capture_output=True, text=True, check=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        pre = json.loads(out.stdout)["summary"]
        raw = self.analyze(self.hook_path)
        self.assertEqual(pre["steps"], STEPS - 1)
        self.assertGreater(pre["b_simple"], 0)
        print(f"\nAdam-preconditioned B_simple {pre['b_simple']:.2f} (last window "
              f"{pre['now']['b_simple']:.2f}) beside raw {raw['b_simple']:.2f} "
              f"({raw['now']['b_simple']:.2f})", file=sys.stderr)

    def test_hook_g2_is_the_trainers_gradient_norm(self):
        with open(self.hook_path, encoding="utf-8") as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in recs], list(range(STEPS)))
        for r, norm in zip(recs, self.norms):
            self.assertIsNone(copus_hook.grad_norm_mismatch(r["sq_big"], norm, rtol=1e-4),
                              r["step"])
        # A |G|^2 counted twice (replicas summed) is flagged, naming the factor.
        why = copus_hook.grad_norm_mismatch(2 * recs[5]["sq_big"], self.norms[5])
        self.assertIn("x2", why)
        self.assertIn("more than once", why)


class PreconditionedTests(unittest.TestCase):
    """GradNoiseMeter(precondition=AdamW): the "precond" norms of every record against an
    independent recomputation from the micro-batches' own gradients and the optimizer state
    (P = 1 / (sqrt(exp_avg_sq / (1 - beta2^t)) + eps) before the step), to 1e-6 relative."""

    def test_adam_preconditioned_norms_match_a_recomputation(self):
        torch.set_num_threads(1)
        steps, k, mb = 12, 4, 2
        data = tiny_gpt.CharData(context=CONTEXT, seed=2)
        torch.manual_seed(2)
        model = tiny_gpt.TinyGPT(data.vocab, d=32, layers=1, heads=2, context=CONTEXT)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pre.ndjson")
            writer = copus_hook.open_writer(path=path)
            meter = copus_hook.GradNoiseMeter(model, writer, mb, k, flush_every=4,
                                              precondition=opt).install()
            want = []
            for step in range(steps):
                names = [n for n, _ in model.named_parameters()]
                pre = None
                if step > 0:
                    pre = []
                    for _, prm in model.named_parameters():
                        st = opt.state[prm]
                        t = float(st["step"])
                        v_hat = st["exp_avg_sq"].double() / (1 - 0.95 ** t)
                        pre.append((1.0 / (v_hat.sqrt() + 1e-8)).reshape(-1))
                    pre = torch.cat(pre)
                params = {n: v.detach().clone().requires_grad_()
                          for n, v in model.named_parameters()}
                micro = []
                for m in range(k):
                    x, y = data.batch(0, 1, step, m, mb)
                    (model(x, y) / k).backward()
                    loss = functional_call(model, params, (x, y))
                    gs = torch.autograd.grad(loss, [params[n] for n in names])
                    micro.append(torch.cat([g.reshape(-1).double() for g in gs]))
                if pre is not None:
                    small = sum(float((g * pre).dot(g * pre)) for g in micro) / k
                    mean = sum(micro) / k
                    want.append((small, float((mean * pre).dot(mean * pre))))
                else:
                    want.append(None)
                meter.step_end(step)
                opt.step()
                opt.zero_grad(set_to_none=True)
            meter.close()
            writer.close()
            with open(path, encoding="utf-8") as f:
                recs = [json.loads(line) for line in f]
            exe = copus_bin()
            if exe is not None:
                out = subprocess.run([exe, "analyze", path, "--preconditioned", "--json",
                                      "--summary-only"], capture_output=True, text=True,
                                     check=False)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("1 record without `precond` left out", out.stderr)
                self.assertEqual(json.loads(out.stdout)["summary"]["steps"], steps - 1)
        self.assertEqual(len(recs), steps)
        self.assertNotIn("precond", recs[0], "no optimizer state before the first step")
        for rec, w in zip(recs[1:], want[1:]):
            got = rec["precond"]
            for name, value in zip(("sq_small", "sq_big"), w):
                self.assertLess(abs(got[name] / value - 1), 1e-6, (rec["step"], name))
            # Preconditioning changes the statistics (Adam's rescaling is far from 1).
            self.assertNotAlmostEqual(got["sq_small"] / rec["sq_small"], 1.0, places=2)


class BranchTests(unittest.TestCase):
    """``copus_hook.branch_experiment`` from step 3 of the tiny GPT: branch records that
    `copus cbs` measures, and the run's state restored afterwards."""

    def test_branched_cbs_from_step_3(self):
        torch.set_num_threads(1)
        data = tiny_gpt.CharData(context=CONTEXT, seed=1)
        torch.manual_seed(1)
        model = tiny_gpt.TinyGPT(data.vocab, d=32, layers=1, heads=2, context=CONTEXT)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        for step in range(3):
            x, y = data.batch(0, 1, step, 0, 8)
            model(x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        held = data.eval_set(64)
        before = {k: v.clone() for k, v in model.state_dict().items()}

        def train_step(batch, seed, step):
            x, y = data.batch(0, 1, 10_000 + 100 * seed + step, seed, batch)
            model(x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "branches.ndjson")
            copus_hook.branch_experiment(
                path, model, opt, 3, [2, 4, 8, 16], train_step,
                lambda: tiny_gpt.eval_loss(model, held), seeds=2, budget_samples=256,
                eval_every=32, lr_scaling="sqrt", tokens_per_sample=CONTEXT)
            with open(path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual(len(lines), 4 * 2 * (256 // 32 + 1))
            # Every branch starts from the same state: the same loss at 0 samples.
            starts = {r["loss"] for r in lines if r["samples"] == 0}
            self.assertEqual(len(starts), 1, starts)
            exe = copus_bin()
            if exe is None:
                raise unittest.SkipTest("no copus binary (set COPUS_BIN or cargo build)")
            out = subprocess.run([exe, "cbs", path, "--json"], capture_output=True, text=True,
                                 check=False)
            self.assertEqual(out.returncode, 0, out.stderr)
            point = json.loads(out.stdout)["points"][0]
            self.assertEqual(point["from_step"], 3)
            th = point["threshold_cbs"]
            self.assertIn(th["batch"], [2, 4, 8, 16])
            # A threshold that is not measured (a bound against a poor reference) has no
            # interval; a measured one holds its batch.
            if th["measured"]:
                self.assertLessEqual(th["ci"][0], th["batch"])
                self.assertLessEqual(th["batch"], th["ci"][1])
            else:
                self.assertIsNone(th["ci"])
            self.assertEqual(len(point["branches"]), 4)
            print(f"\nbranched CBS from step 3: threshold {th['batch']} {th['ci']}, fitted "
                  f"B_noise {point['b_noise_fit']}", file=sys.stderr)
            # A second call with the same path refuses to replace the first point's records;
            # append=True adds its own.
            again = dict(seeds=2, budget_samples=64, eval_every=32, lr_scaling="sqrt",
                         tokens_per_sample=CONTEXT)
            with self.assertRaises(FileExistsError):
                copus_hook.branch_experiment(
                    path, model, opt, 5, [2, 4, 8, 16], train_step,
                    lambda: tiny_gpt.eval_loss(model, held), **again)
            copus_hook.branch_experiment(
                path, model, opt, 5, [2, 4, 8, 16], train_step,
                lambda: tiny_gpt.eval_loss(model, held), append=True, **again)
            with open(path, encoding="utf-8") as f:
                points = {json.loads(line)["branch"]["from_step"] for line in f}
            self.assertEqual(points, {3, 5})
        after = model.state_dict()
        for k, v in before.items():
            self.assertTrue(torch.equal(v, after[k]), k)


if __name__ == "__main__":
    unittest.main()
