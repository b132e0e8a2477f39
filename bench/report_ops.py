#!/usr/bin/env python3
"""Merges the per-round raw results of bench/run_ops.sh (the op matrix) or
bench/run_e2e.sh (the end-to-end programs) into NAME.json and NAME.md.

    python3 bench/report_ops.py --kind ops --raw DIR --out bench/results --command "..." [--note ...]

Each raw file is `LEVEL/tensorscope-rN.json` or `LEVEL/torch-rN.json` in
the format of benches/common/timing.rs's write_json, LEVEL being the
dispatch level both libraries were capped to (v4: AVX-512, v3: AVX2+FMA;
see bench/run_pair.sh). A row's figure is the median of its rounds'
medians; ratio = tensorscope / PyTorch at the same level (below 1:
tensorscope is faster). The tables carry one column pair per level.
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import statistics
import subprocess

LIBS = ("tensorscope", "torch")
SIZES = ("small", "medium", "large")


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"unavailable ({e})"


def cpuinfo():
    model, flags, family, model_id = None, "", "?", "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model is None:
            model = line.split(":", 1)[1].strip()
        if line.startswith("cpu family") and family == "?":
            family = line.split(":", 1)[1].strip()
        if re.match(r"model\s*:", line) and model_id == "?":
            model_id = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = line.split(":", 1)[1]
    simd = [f for f in ("avx512f", "avx2", "fma", "neon", "asimd") if f in flags.split()]
    return {
        "model": model or platform.processor(),
        "family": family,
        "model_id": model_id,
        "simd": simd,
        "nproc": int(sh("nproc") or 0),
        "kernel": platform.release(),
        "mem_total": next((l.split(":", 1)[1].strip() for l in open("/proc/meminfo") if l.startswith("MemTotal")), None),
    }


LEVEL_NAMES = {"v4": "AVX-512", "v3": "AVX2", "neon": "NEON", "scalar": "baseline"}


def levels_in(raw):
    return [lv for lv in ("v4", "v3", "neon", "scalar") if glob.glob(os.path.join(raw, lv, "*-r*.json"))]


def load_raw(raw):
    per = {l: {} for l in LIBS}
    head = {}
    order = []
    for path in sorted(glob.glob(os.path.join(raw, "*-r*.json"))):
        lib = re.match(r"(.*)-r\d+\.json", os.path.basename(path)).group(1)
        if lib not in per:
            continue
        doc = json.load(open(path))
        head[lib] = {k: v for k, v in doc.items() if k != "workloads"}
        for name, w in doc["workloads"].items():
            if name not in order:
                order.append(name)
            per[lib].setdefault(name, []).append(w)
    # tensorscope's order first (it defines the rows), then rows only PyTorch has.
    ts_order = [n for n in order if n in per["tensorscope"]]
    return per, head, ts_order + [n for n in order if n not in per["tensorscope"]]


def fmt_t(s):
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=("ops", "e2e", "interop", "amp"), required=True)
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", help="the results' file name, NAME.md and NAME.json (default: the kind)")
    p.add_argument("--command", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--load-before", default="")
    p.add_argument("--load-after", default="")
    p.add_argument("--busy", default="", help="the busiest processes before the run (ps)")
    p.add_argument("--level-caps", default="", help="how each level was capped on both sides (bench/levels.sh)")
    a = p.parse_args()
    a.name = a.name or a.kind
    levels = levels_in(a.raw)
    loaded = {lv: load_raw(os.path.join(a.raw, lv)) for lv in levels}
    head = loaded[levels[0]][1]
    order = []
    for lv in levels:
        order += [n for n in loaded[lv][2] if n not in order]
    rows = {}
    for name in order:
        at = {lv: r for lv in levels if (r := row_of(loaded[lv][0], name))}
        rows[name] = {"levels": at, "what": next(iter(at.values()))["what"]}
    per = loaded[levels[0]][0]
    main_doc(a, levels, head, per, rows)


def row_of(per, name):
    if not any(per[lib].get(name) for lib in LIBS):
        return None
    r = {"libraries": {}}
    for lib in LIBS:
        rounds = per[lib].get(name)
        if not rounds:
            continue
        meds = [x["median_s"] for x in rounds]
        r["libraries"][lib] = {
            "median_s": statistics.median(meds),
            "rounds_median_s": meds,
            "rounds_min_s": [x["min_s"] for x in rounds],
            "samples_per_round": [x["samples"] for x in rounds],
            "what": rounds[0]["what"],
        }
        peaks = [x["peak_bytes"] for x in rounds if x.get("peak_bytes") is not None]
        if peaks:
            r["libraries"][lib]["peak_bytes"] = max(peaks)
    ts, th = (r["libraries"].get(l, {}).get("median_s") for l in LIBS)
    r["ratio"] = ts / th if ts and th else None
    r["what"] = next(iter(r["libraries"].values()))["what"]
    return r


def main_doc(a, levels, head, per, rows):
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": a.command,
        "note": a.note,
        "loadavg_before": a.load_before,
        "loadavg_after": a.load_after,
        "busy_before": a.busy.splitlines(),
        "git_commit": sh("git rev-parse HEAD"),
        # Changes to tracked files outside bench/results: the run itself has
        # rewritten its raw results there before this report is written.
        "git_dirty": bool(sh("git status --porcelain --untracked-files=no -- . ':!bench/results'")),
        "cpu": cpuinfo(),
        "versions": {
            "rustc": sh("rustc --version"),
            "python": platform.python_version(),
            **{l: head[l].get("version") for l in LIBS if l in head},
        },
        "threads": {l: head[l].get("threads") for l in LIBS if l in head},
        "rounds": max((len(v) for lib in per.values() for v in lib.values()), default=0),
        "levels": levels,
        "level_caps": a.level_caps,
        "method": "per library and row: one cold call, one timed call as the estimate t, batch = ceil(1 ms / t) "
        "calls per sample, batch - 1 more warm-up calls, samples filling the row's budget (min 3-10, max 50); each "
        "round's figure is the median sample, the reported figure the median of the rounds; ratio = "
        "tensorscope / PyTorch (below 1: tensorscope is faster).",
        "rows": rows,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{a.name}.json"), "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")

    c, v = doc["cpu"], doc["versions"]
    title = {
        "ops": "Op matrix: tensorscope against PyTorch (CPU, f32)",
        "e2e": "End-to-end programs: tensorscope against PyTorch (CPU, f32)",
        "interop": "Hugging Face models: tensorscope against PyTorch + transformers (CPU, f32)",
        "amp": "Mixed precision: training steps in f32 and under bf16 autocast, tensorscope against PyTorch (CPU)",
    }[a.kind]
    lines = [
        f"# {title}",
        "",
        *([f"**{a.note}**", ""] if a.note else []),
        f"{doc['date']}, `{doc['command']}`, commit `{doc['git_commit'][:12]}`{' (dirty)' if doc['git_dirty'] else ''}.",
        "",
        f"CPU: {c['model']}, family {c['family']}, model {c['model_id']} ({', '.join(c['simd']) or 'no AVX2/AVX-512'}), "
        f"{c['nproc']} cores, {c['mem_total']}, "
        f"Linux {c['kernel']}. Threads: {', '.join(f'{k} {t}' for k, t in doc['threads'].items())}.",
        f"Versions: tensorscope {v.get('tensorscope')}, PyTorch {v.get('torch')}, {v['rustc']}, Python {v['python']}.",
        f"Load average (1, 5, 15 min) before: {a.load_before or '?'}; after: {a.load_after or '?'}.",
        "",
        f"Levels: {', '.join(f'{lv} ({LEVEL_NAMES.get(lv, lv)})' for lv in levels)}; each capped on both sides "
        f"({doc['level_caps']}).",
        "",
        f"{doc['rounds']} round(s), the libraries interleaved. {doc['method']}",
        "",
    ]
    if a.kind == "ops":
        lines += ops_table(rows, levels)
    elif a.kind == "interop":
        lines += interop_table(rows, levels)
    elif a.kind == "amp":
        lines += amp_table(rows, levels)
    else:
        lines += e2e_table(rows, levels)
    if doc["busy_before"]:
        lines += ["", "Busiest processes before the run (`ps`, %CPU):", "", "```", *doc["busy_before"], "```"]
    lines.append("")
    with open(os.path.join(a.out, f"{a.name}.md"), "w") as f:
        f.write("\n".join(lines))


def times(r, lv):
    x = r["levels"].get(lv)
    if not x:
        return None, None, None
    ts, th = (x["libraries"].get(l, {}).get("median_s") for l in LIBS)
    return ts, th, x["ratio"]


def ops_table(rows, levels):
    ops, by = [], {}
    for name, r in rows.items():
        op, _, size = name.rpartition("/")
        if op not in by:
            ops.append(op)
            by[op] = {}
        by[op][size] = r
    head = "| op | size | shape | " + " | ".join(f"tensorscope {lv} | PyTorch {lv} | ratio {lv}" for lv in levels) + " | > 1.0 |"
    out = [head, "|---|---|---|" + "---|---|---|" * len(levels) + "---|"]
    over = []
    per_size = {(lv, s): [] for lv in levels for s in SIZES}
    for op in ops:
        for size in sorted(by[op], key=lambda s: SIZES.index(s) if s in SIZES else 9):
            r = by[op][size]
            cells, marks = [], []
            for lv in levels:
                ts, th, ratio = times(r, lv)
                if ratio is not None:
                    per_size.setdefault((lv, size), []).append(ratio)
                    if ratio > 1.0 and size in ("medium", "large"):
                        marks.append(f"**✗ {lv}**")
                        over.append(f"{op}/{size} at {lv} ({ratio:.2f}×)")
                elif ts is None:
                    marks.append(f"not in this build ({lv})")
                cells.append(f"{fmt_t(ts)} | {fmt_t(th)} | {'—' if ratio is None else f'{ratio:.2f}×'}")
            out.append(f"| {op} | {size} | {r['what']} | " + " | ".join(cells) + f" | {' '.join(marks)} |")
    summary = [
        "## Summary",
        "",
        *(f"* {lv} {s}: {len(x)} rows, geometric mean ratio {gmean(x):.2f}×, {sum(1 for y in x if y > 1.0)} above 1.0"
          for (lv, s), x in per_size.items() if x),
        f"* medium and large rows above 1.0× (the issue's target is ≤ 1.0×): {len(over)}"
        + (f": {', '.join(over)}" if over else ""),
        "",
        "## Rows",
        "",
    ]
    return summary + out


def e2e_table(rows, levels):
    out = ["| program | what | " + " | ".join(f"tensorscope {lv} | PyTorch {lv} | ratio {lv}" for lv in levels) + " | ≤ 0.8× |",
           "|---|---|" + "---|---|---|" * len(levels) + "---|"]
    for name, r in rows.items():
        cells, met = [], []
        for lv in levels:
            ts, th, ratio = times(r, lv)
            cells.append(f"{fmt_t(ts)} | {fmt_t(th)} | {'—' if ratio is None else f'{ratio:.2f}×'}")
            met.append(f"{lv} —" if ratio is None else (f"{lv} yes" if ratio <= 0.8 else f"**{lv} no**"))
        out.append(f"| {name} | {r['what']} | " + " | ".join(cells) + f" | {', '.join(met)} |")
    return out


def interop_table(rows, levels):
    """Time and peak memory per row; the goals are time <= 1.0x and a peak
    no higher than PyTorch's (peak: in a fresh process, the resident set's
    high-water mark over loading the model and one call, less its size
    before the load; the largest over the rounds, at the first level)."""
    mib = lambda b: "—" if b is None else f"{b / 2**20:.1f} MiB"
    out = ["| workload | what | " + " | ".join(f"tensorscope {lv} | PyTorch {lv} | ratio {lv}" for lv in levels)
           + " | peak (load + one call), tensorscope | PyTorch | time ≤ 1.0×, peak ≤ PyTorch's |",
           "|---|---|" + "---|---|---|" * len(levels) + "---|---|---|"]
    for name, r in rows.items():
        cells, met = [], []
        for lv in levels:
            ts, th, ratio = times(r, lv)
            cells.append(f"{fmt_t(ts)} | {fmt_t(th)} | {'—' if ratio is None else f'{ratio:.2f}×'}")
            met.append(f"{lv} —" if ratio is None else (f"{lv} yes" if ratio <= 1.0 else f"**{lv} no**"))
        lv0 = r["levels"].get(levels[0], {}).get("libraries", {})
        pt, pp = (lv0.get(l, {}).get("peak_bytes") for l in LIBS)
        if pt is not None and pp is not None:
            met.append("peak yes" if pt <= pp else "**peak no**")
        out.append(f"| {name} | {r['what']} | " + " | ".join(cells) + f" | {mib(pt)} | {mib(pp)} | {', '.join(met)} |")
    return out


def amp_table(rows, levels):
    """Each training row's time and peak against PyTorch, then each library's
    bf16-autocast row over its f32 row (a row NAME_bf16 pairs with NAME).
    Peak: in a fresh process, the resident set's high-water mark over 3
    steps less its size before the model, at the first level."""
    mib = lambda b: "—" if b is None else f"{b / 2**20:.1f} MiB"
    ratio = lambda x, y: "—" if x is None or y is None else f"{x / y:.2f}×"

    def peaks(r):
        lv0 = r["levels"].get(levels[0], {}).get("libraries", {})
        return tuple(lv0.get(l, {}).get("peak_bytes") for l in LIBS)

    out = ["| program | what | " + " | ".join(f"tensorscope {lv} | PyTorch {lv} | ratio {lv}" for lv in levels)
           + " | peak, tensorscope | PyTorch | ratio |",
           "|---|---|" + "---|---|---|" * len(levels) + "---|---|---|"]
    for name, r in rows.items():
        cells = []
        for lv in levels:
            ts, th, rt = times(r, lv)
            cells.append(f"{fmt_t(ts)} | {fmt_t(th)} | {'—' if rt is None else f'{rt:.2f}×'}")
        pt, pp = peaks(r)
        out.append(f"| {name} | {r['what']} | " + " | ".join(cells) + f" | {mib(pt)} | {mib(pp)} | {ratio(pt, pp)} |")
    out += ["", "bf16 autocast over f32, within each library (below 1: autocast is faster or smaller):", "",
            "| program | " + " | ".join(f"time, tensorscope {lv} | PyTorch {lv}" for lv in levels)
            + " | peak, tensorscope | PyTorch |",
            "|---|" + "---|---|" * len(levels) + "---|---|"]
    for name, r in rows.items():
        h = rows.get(f"{name}_bf16")
        if h is None:
            continue
        cells = []
        for lv in levels:
            (fs, fh, _), (hs, hh, _) = times(r, lv), times(h, lv)
            cells.append(f"{ratio(hs, fs)} | {ratio(hh, fh)}")
        (fpt, fpp), (hpt, hpp) = peaks(r), peaks(h)
        out.append(f"| {name} | " + " | ".join(cells) + f" | {ratio(hpt, fpt)} | {ratio(hpp, fpp)} |")
    return out


if __name__ == "__main__":
    main()
