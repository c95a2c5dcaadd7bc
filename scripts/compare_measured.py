#!/usr/bin/env python3
"""Predict the training steps scripts/measure_gpu.py measured, with copus, and compare.

    python3 scripts/compare_measured.py MEASURE_JSON --copus BIN [--hardware NAME] [--csv OUT]

Every training row of MEASURE_JSON (the `train` part) is predicted with `copus predict` on one
GPU with the stack it ran (torchtitan-fsdp2: eager, PyTorch's loss; `--attention fused` for
SDPA's flash backend, `cudnn` for cuDNN's) and printed beside the measurement: step time, the
throughput error (predicted/measured - 1, as docs/MODEL.md counts it), PyTorch's reserved peak
against copus's memory, and for a run that went out of memory whether copus calls it fitting.
--csv writes the rows that ran in the format of assets/validation/*.csv (split test), with
tflops = copus's model FLOPs per token x the measured tokens/s. The hardware profile is taken
from the device name (H200 -> h200, H100 -> h100-sxm) unless --hardware names one. Exits 1
when no row could be predicted.
"""
import argparse
import json
import subprocess
import sys

PROFILES = (("H200", "h200"), ("H100", "h100-sxm"), ("A100", "a100-80g"), ("H800", "h800"))


def predict(copus, hw, row):
    attention = "cudnn" if row["attention"].endswith("cudnn") else "fused"
    args = [copus, "predict", "--json", "--hardware", hw, "--gpus", "1", "--gpus-per-node", "1",
            "--layers", str(row["layers"]), "--hidden", str(row["h"]), "--heads", str(row["heads"]),
            "--kv-heads", str(row["kv_heads"]), "--ffn", str(row["ffn"]),
            "--vocab", str(row["vocab"]), "--swiglu", "--tied-embeddings",
            "--seq", str(row["seq"]), "--batch", str(row["local_batch"]),
            "--mbs", str(row["local_batch"]), "--recompute", row["recompute"], "--zero", "3",
            "--stack", "torchtitan-fsdp2", "--attention", attention]
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=False)
    except OSError as e:
        sys.exit(f"compare_measured: cannot run copus ({copus}): {e}")
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout), attention


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("measure_json")
    p.add_argument("--copus", required=True, help="the copus binary")
    p.add_argument("--hardware", help="copus hardware profile (default: from the device name)")
    p.add_argument("--csv", help="write the rows that ran as validation CSV rows here")
    args = p.parse_args()
    try:
        with open(args.measure_json) as f:
            m = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"compare_measured: {args.measure_json}: {e}")
    device = str(m.get("env", {}).get("device", ""))
    hw = args.hardware or next((h for key, h in PROFILES if key in device), None)
    if hw is None:
        sys.exit(f"compare_measured: no copus profile for device '{device}': give --hardware")
    rows = m.get("train")
    if not isinstance(rows, list):
        sys.exit("compare_measured: no training rows in " + args.measure_json)
    print(f"{'run':44} {'measured':>9} {'copus':>9} {'error':>7}  memory (reserved / copus GiB)")
    csv, done = [], 0
    for r in rows:
        label = (f"{r['model']} {r['local_batch']}x{r['seq']} rc:{r['recompute']} "
                 f"{r['attention']} {r.get('precision', 'amp')}")
        if r.get("error") not in (None, "oom"):
            print(f"{label:44} not measured: {r['error'][:60]}")
            continue
        try:
            d, attention = predict(args.copus, hw, r)
        except (RuntimeError, json.JSONDecodeError) as e:
            print(f"{label:44} copus could not predict it: {e}")
            continue
        done += 1
        mem = d["memory_per_gpu_bytes"] / 2**30
        if r.get("error") == "oom":
            verdict = "fits" if d["fits"] else "cannot run"
            print(f"{label:44} {'OOM':>9} {d['step_time_s']:8.3f}s {'':>7}  copus {mem:.1f} GiB: "
                  f"{verdict}{' (a miss)' if d['fits'] else ''}")
            continue
        if not d["fits"]:
            # It ran; copus calls it "cannot run" (its throughput figures are null then).
            print(f"{label:44} {r['step_s']:8.3f}s copus: cannot run ({d['reason']}; a miss), "
                  f"{mem:.1f} GiB predicted")
            continue
        err = r["step_s"] / d["step_time_s"] - 1.0  # throughput: predicted/measured - 1
        print(f"{label:44} {r['step_s']:8.3f}s {d['step_time_s']:8.3f}s {err * 100:+6.1f}%  "
              f"{r.get('max_reserved_gib', float('nan')):.1f} / {mem:.1f}")
        flops_per_token = d["model_tflops_per_gpu"] * 1e12 / d["tokens_per_s_per_gpu"]
        tflops = flops_per_token * r["local_batch"] * r["seq"] / r["step_s"] / 1e12
        csv.append(",".join(map(str, [
            "measured", r["model"], hw, "torchtitan-fsdp2", r["layers"], r["h"], r["heads"],
            r["vocab"], r["seq"], 1, 1, 1, 1, r["local_batch"], 1, 3, r["recompute"],
            r["local_batch"], f"{tflops:.1f}", "model", "test", r["kv_heads"], r["ffn"], "yes",
            "yes", 1, "bf16", "fsdp2", attention, f"{r.get('max_reserved_gib', 0):.1f}"])))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("set,model,hardware,stack,layers,hidden,heads,vocab,seq,gpus_per_node,dp,tp,"
                    "pp,mbs,vpp,zero,recompute,batch,tflops,basis,split,kv_heads,ffn,swiglu,tied,"
                    "cp,precision,sharding,attention,memory_gib\n")
            f.write("".join(line + "\n" for line in csv))
    if done == 0:
        sys.exit("compare_measured: no row could be predicted")


if __name__ == "__main__":
    main()
