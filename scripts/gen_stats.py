#!/usr/bin/env python3
"""Write a synthetic stats protocol v1 file for the ingest benchmark (scripts/bench_ingest.sh).

Usage: gen_stats.py OUT LINES [--layers K] [--repeat-step] [--cosine-lr] [--seed S]

Each line is one record like the built-in trainer's (n_small, tokens, loss, lr, step time and
K layers), about 480 bytes with four layers. --repeat-step gives every line the same step
number (the worst case of the two-sided smoother before issue 15). --cosine-lr gives the run
a linear warmup over its first 1% and a cosine decay to a tenth after it (lr changes at every
step), instead of a constant lr.
"""
import math
import argparse
import json
import random


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("lines", type=int)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--repeat-step", action="store_true")
    p.add_argument("--cosine-lr", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    names = [f"layer{i}" for i in range(a.layers)]
    with open(a.out, "w") as f:
        for i in range(a.lines):
            step = 7 if a.repeat_step else i
            b_small, b_big = 16.0, 128.0
            # |G|^2 shrinks and tr(Sigma) grows slowly: B_simple drifts as in training.
            g2 = 0.05 / (1.0 + i / 20000.0)
            tr = 1.0 + i / 50000.0
            sq_small = (g2 + tr / b_small) * rng.uniform(0.8, 1.2)
            sq_big = (g2 + tr / b_big) * rng.uniform(0.8, 1.2)
            layers = {}
            for n in names:
                share = rng.uniform(0.5, 1.5) / a.layers
                layers[n] = {"sq_small": sq_small * share, "sq_big": sq_big * share}
            lr = 3e-4
            if a.cosine_lr:
                warm = max(1, a.lines // 100)
                if i < warm:
                    lr *= (i + 1) / warm
                else:
                    x = (i - warm) / max(1, a.lines - warm)
                    lr *= 0.1 + 0.45 * (1.0 + math.cos(math.pi * x))
            rec = {
                "v": 1,
                "step": step,
                "b_small": b_small,
                "b_big": b_big,
                "sq_small": sq_small,
                "sq_big": sq_big,
                "n_small": 8,
                "tokens": 128.0 * 4096 * (i + 1),
                "loss": rng.uniform(2.0, 4.0),
                "lr": lr,
                "step_time_s": rng.uniform(0.2, 0.3),
                "layers": layers,
            }
            f.write(json.dumps(rec, separators=(",", ":")))
            f.write("\n")


if __name__ == "__main__":
    main()
