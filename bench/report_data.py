#!/usr/bin/env python3
"""Merges bench/run_data.sh's raw rounds (benches/data.rs and
bench/torch_data.py, one JSON per side per round) into data.json and
data.md. A workload's figure per side is the median over every timed epoch
of every round; ratio = tensorscope's samples/s / PyTorch's (above 1:
tensorscope is faster)."""

import argparse
import datetime
import glob
import json
import os
import statistics

from report_ops import cpuinfo

WHAT = {
    "io": "60 us sleep per sample (I/O), 3 ms step",
    "cpu": "20 us spin per sample (decode), 2 ms step",
    "fast": "no per-sample cost, no step (each loader's own cost: a write into the slot here; in PyTorch the sample's tensors, the collate and the transfer between processes)",
}


def main():
    ap = argparse.ArgumentParser()
    for a in ("--raw", "--out", "--command", "--note", "--load-before", "--load-after"):
        ap.add_argument(a, default="")
    a = ap.parse_args()
    sides = {}
    for lib in ("tensorscope", "torch"):
        for path in sorted(glob.glob(os.path.join(a.raw, f"{lib}-r*.json"))):
            d = json.load(open(path))
            for name, row in d["rows"].items():
                s = sides.setdefault(lib, {}).setdefault(name, {"epochs": [], "rows": []})
                s["epochs"].extend(row["epoch_s"])
                s["rows"].append(row)
            if lib == "torch":
                sides["torch_version"] = d.get("version")
    cpu = cpuinfo()
    lines = [
        "# Data loading: tensorscope's DataLoader against PyTorch's (issue 15)",
        "",
        f"Command: `{a.command}`, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        f"Machine: {cpu['model']}, {cpu['nproc']} cores, {cpu['mem_total']}; "
        f"PyTorch {sides.get('torch_version')}. Load before/after: {a.load_before} / {a.load_after}.",
    ]
    if a.note:
        lines.append(f"Note: {a.note}")
    lines += [
        "",
        "4096 samples of x [3, 32, 32] f32 + y i64, batch 64, shuffled; the same",
        "workers on both sides (threads here, processes in PyTorch, persistent);",
        "the model step is a spin on the loop's thread on both sides. Median over",
        "every timed epoch of every round (the first epoch of each run is not",
        "timed). Allocations: tensorscope's CPU allocator count over the timed",
        "epochs; PyTorch's ops that allocated under torch.profiler with",
        "num_workers=0 (with workers the same allocations happen in the worker",
        "processes). Overlap: the time saved against loading and stepping one",
        "after the other, as a share of the most overlapping can save (the",
        "shorter of the two; benches/data.rs has the formula).",
        "",
        "| workload | workers | tensorscope ms/epoch | PyTorch ms/epoch | tensorscope samples/s | PyTorch samples/s | ratio (samples/s) | allocations/batch tensorscope | allocations/batch PyTorch | overlap, share of the ideal (tensorscope) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    merged = {}
    for name in WHAT:
        ts, pt = sides["tensorscope"][name], sides["torch"][name]
        mt, mp = statistics.median(ts["epochs"]), statistics.median(pt["epochs"])
        ov = [r["overlap"] for r in ts["rows"] if r.get("overlap") is not None]
        row = {
            "tensorscope_ms": mt * 1e3,
            "torch_ms": mp * 1e3,
            "ratio": mp / mt,
            "allocs_ts": max(r["allocations_per_batch"] for r in ts["rows"]),
            "allocs_torch": statistics.median(r["allocations_per_batch"] for r in pt["rows"]),
            "hidden": statistics.median(ov) if ov else None,
            "workers": ts["rows"][0]["workers"],
        }
        merged[name] = row
        hidden = f"{100 * row['hidden']:.0f}%" if row["hidden"] is not None else "n/a"
        lines.append(
            f"| {name}: {WHAT[name]} | {row['workers']} | {mt * 1e3:.1f} | {mp * 1e3:.1f} | "
            f"{4096 / mt:.0f} | {4096 / mp:.0f} | **{row['ratio']:.2f}x** | {row['allocs_ts']:.2f} | "
            f"{row['allocs_torch']:.1f} | {hidden} |"
        )
    lines += ["", f"Raw log: `bench/results/data.log`; per-round JSON in `bench/results/raw-data/`.", ""]
    open(os.path.join(a.out, "data.md"), "w").write("\n".join(lines))
    json.dump({"command": a.command, "rows": merged}, open(os.path.join(a.out, "data.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
