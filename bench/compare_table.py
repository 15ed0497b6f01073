#!/usr/bin/env python3
"""The table of bench/compare.sh: one Markdown table from the records of bench/compare_run.py
(stdlib only).

  compare_table.py RESULTS.jsonl [--out compare.md] [--meta "key: value"]...

Rows: every run, grouped by shape and precision, in the order they ran; a failed, timed-out or
skipped run keeps its row and says so. Columns: ms/step (median of the timed steps), tokens/s,
model TFLOP/s, the fraction of the physical limit, peak GPU and host memory. Then the ratios that
issue 12's targets name, each with its target, and the limit itself.

FLOPs, the same for every system of a shape: 6 x N x tokens (N parameters, tied embedding counted
once, from the shape) and, stated separately, causal attention 6 x n_layer x T x C x tokens.
Recomputed forwards are not counted (work the model does not need). The limit: those FLOPs at
51 TFLOP/s, the FP32 SGEMM ceiling measured on the H200 (DESIGN.md); TF32 GEMMs run far above it,
so the TF32 rows show no fraction.
"""
import argparse
import json
import sys
import time

SGEMM_CEILING_TFLOPS = 51.0
GIB = 2**30

# n_layer, n_embd, vocabulary of the shapes the benches know (bench/gpt_step.cpp, torch_bench_common.py)
SHAPES = {"tiny": (2, 64, 257), "124M": (12, 768, 50257), "350M": (24, 1024, 50257),
          "774M": (36, 1280, 50257), "1.5B": (48, 1600, 50257)}

SYSTEM_NAMES = {
    "strata-resident-recompute": "strata resident, recompute",
    "strata-resident-keep": "strata resident, keep activations",
    "strata-streamed-keep": "strata streamed (state in host RAM), keep",
    "strata-streamed-recompute": "strata streamed (state in host RAM), recompute",
    "pytorch-eager-sdpa": "PyTorch eager, SDPA",
    "pytorch-fsdp2-offload": "PyTorch FSDP2, CPUOffloadPolicy, 1 rank",
}


def parameters(model, seq):
    """GPT-2 parameters with the LM head tied to the token embedding: wte, wpe, per block
    (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj: 12 C^2 + 13 C), ln_f."""
    L, C, V = SHAPES[model]
    return V * C + max(1024, seq) * C + L * (12 * C * C + 13 * C) + 2 * C


def flops(model, batch, seq):
    """(model FLOPs, causal attention FLOPs) of one step of batch x seq tokens."""
    L, C, _ = SHAPES[model]
    tokens = batch * seq
    return 6.0 * parameters(model, seq) * tokens, 6.0 * L * seq * C * tokens


def fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def load(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                print(f"compare_table: {path}:{n} is not JSON, skipped", file=sys.stderr)
    return records


def ok(r):
    return r.get("status") == "ok" and isinstance(r.get("result"), dict) and r["result"].get("ms_per_step", 0) > 0


def row_cells(r):
    """The cells of one run after its name."""
    if not ok(r):
        status = r.get("status", "failed")
        return [f"**{status}**" if status != "skipped" else "skipped"] + ["-"] * 6 + [r.get("reason", "")]
    res = r["result"]
    ms = res["ms_per_step"]
    model_flops, attention_flops = flops(r["model"], res["batch"], res["seq"])
    tflops = model_flops / ms * 1e-9
    attn_tflops = attention_flops / ms * 1e-9
    limit_ms = (model_flops + attention_flops) / (SGEMM_CEILING_TFLOPS * 1e12) * 1e3
    of_limit = f"{limit_ms / ms:.0%}" if r["precision"] == "fp32" else "-"
    gpu_own = res.get("device_peak_bytes")
    gpu = fmt(gpu_own / GIB if gpu_own is not None else None, ".1f")
    if r.get("gpu_used_peak_mib") is not None:
        gpu += f" / {r['gpu_used_peak_mib'] / 1024:.1f}"
    host_sys = r.get("host_used_peak_bytes")
    host = fmt(host_sys / GIB if host_sys is not None else None, ".1f")
    rss = res.get("host_peak_rss_bytes")
    if rss is not None:
        host += f" / {rss / GIB:.1f}"
    notes = []
    if "transfer_hidden_fraction" in res and res.get("placement") == "streamed":
        notes.append(f"transfers hidden {res['transfer_hidden_fraction']:.0%}")
    if res.get("optimizer"):
        notes.append(f"AdamW {res['optimizer']}")
    if res.get("init_s") is not None:
        notes.append(f"init {res['init_s']:.0f} s")
    return [f"{ms:.1f}", f"{res['batch'] * res['seq'] / ms * 1e3:,.0f}", f"{tflops:.1f}", f"{attn_tflops:.1f}",
            of_limit, gpu, host, ", ".join(notes)]


def best(records, model, precision, prefix):
    """The fastest ok run of the systems named prefix* for this shape and precision, or None."""
    runs = [r for r in records if ok(r) and r["model"] == model and r["precision"] == precision
            and r["system"].startswith(prefix)]
    return min(runs, key=lambda r: r["result"]["ms_per_step"], default=None)


# Issue 12's targets, as speed ratios; comparisons of other shapes and precisions are shown without one.
TARGETS = {
    ("124M", "fp32", "resident vs eager"): 1.10, ("124M", "tf32", "resident vs eager"): 1.10,
    ("1.5B", "fp32", "resident vs eager"): 1.05, ("1.5B", "fp32", "streamed vs resident"): 0.95,
    ("1.5B", "fp32", "streamed vs eager"): 1.0, ("1.5B", "fp32", "streamed vs fsdp2"): 2.3,
}


def ratio_lines(records):
    """(comparison, ratio, target, verdict) rows: speed ratios (the other's ms / this run's ms)."""
    lines = []

    def compare(model, precision, target_key, a_prefix, a_label, b_prefix, b_label):
        target = TARGETS.get((model, precision, target_key)) if target_key else None
        a, b = best(records, model, precision, a_prefix), best(records, model, precision, b_prefix)
        what = f"{model} {precision.upper()}: {a_label} vs {b_label}"
        if a and b:
            ratio = b["result"]["ms_per_step"] / a["result"]["ms_per_step"]
            chosen = [SYSTEM_NAMES.get(run["system"], run["system"]) for run, label in ((a, a_label), (b, b_label))
                      if "fastest" in label]
            if chosen:
                what += f" (fastest: {', '.join(chosen)})"
            verdict = "-" if target is None else ("met" if ratio >= target else "**not met**")
            lines.append((what, f"{ratio:.2f}", fmt(target, ".2f"), verdict))
        else:
            missing = " and ".join(label for run, label in ((a, a_label), (b, b_label)) if run is None)
            lines.append((what, "-", fmt(target, ".2f"), f"no result for {missing}"))

    groups = []
    for r in records:
        if (r["model"], r["precision"]) not in groups:
            groups.append((r["model"], r["precision"]))
    for model, precision in groups:
        systems = {r["system"] for r in records if r["model"] == model and r["precision"] == precision}
        eager, fsdp2 = "PyTorch eager SDPA", "PyTorch FSDP2 CPU offload"
        compare(model, precision, "resident vs eager", "strata-resident", "strata resident (fastest)", "pytorch-eager", eager)
        for policy in ("recompute", "keep"):
            if f"strata-resident-{policy}" in systems:
                compare(model, precision, None, f"strata-resident-{policy}", f"strata resident {policy}", "pytorch-eager", eager)
        if any(s.startswith("strata-streamed") for s in systems):
            compare(model, precision, "streamed vs resident", "strata-streamed", "strata streamed", "strata-resident",
                    "strata resident (fastest)")
            compare(model, precision, "streamed vs eager", "strata-streamed", "strata streamed", "pytorch-eager",
                    eager + " (resident)")
            if "pytorch-fsdp2-offload" in systems:
                compare(model, precision, "streamed vs fsdp2", "strata-streamed", "strata streamed", "pytorch-fsdp2", fsdp2)
    return lines


def table(records, meta):
    out = ["# strata vs PyTorch: GPT-2 training steps, one call", ""]
    out += [f"- {m}" for m in meta]
    out += [f"- table made {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from {len(records)} runs",
            "- ms/step: median of the timed steps; TFLOP/s: 6 x parameters x tokens per second (model FLOPs, "
            "no recompute counted); attention: causal attention's 6 x n_layer x T x C x tokens per second, "
            f"apart; of limit: (model + attention FLOPs) at {SGEMM_CEILING_TFLOPS:g} TFLOP/s (the FP32 SGEMM "
            "ceiling) / ms per step",
            "- GPU GiB: the run's own peak (strata's device tier; torch max_memory_allocated) / nvidia-smi's peak; "
            "host GiB: the host's used memory (MemTotal - MemAvailable, pinned buffers included) above its level "
            "before the run / the process's peak RSS", ""]
    out += ["| run | ms/step | tokens/s | TFLOP/s | attention TFLOP/s | of limit | GPU GiB | host GiB | notes |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    groups = []
    for r in records:
        key = (r.get("model", "?"), r.get("precision", "?"))
        if key not in groups:
            groups.append(key)
    for model, precision in groups:
        for r in records:
            if (r.get("model", "?"), r.get("precision", "?")) != (model, precision):
                continue
            name = f"{model} {precision.upper()}: {SYSTEM_NAMES.get(r.get('system'), r.get('system', r.get('run', '?')))}"
            if ok(r):
                name += f", B={r['result']['batch']}"
            out.append("| " + " | ".join([name] + row_cells(r)) + " |")

    out += ["", "## Ratios (speed: the other run's ms/step over this run's; issue 12's targets)", "",
            "| comparison | ratio | target | verdict |", "| --- | --- | --- | --- |"]
    out += ["| " + " | ".join(line) + " |" for line in ratio_lines(records)]

    out += ["", f"## The physical limit: model + attention FLOPs at {SGEMM_CEILING_TFLOPS:g} TFLOP/s (strict FP32)", "",
            "| shape | tokens/step | model GFLOP/step | attention GFLOP/step | limit ms/step | limit tokens/s | "
            "fastest FP32 run | its ms/step | x of the limit's time |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    seen = []
    for r in records:
        if not ok(r) or r["model"] in seen:
            continue
        seen.append(r["model"])
        res = r["result"]
        tokens = res["batch"] * res["seq"]
        model_flops, attention_flops = flops(r["model"], res["batch"], res["seq"])
        limit_ms = (model_flops + attention_flops) / (SGEMM_CEILING_TFLOPS * 1e12) * 1e3
        fastest = min((x for x in records if ok(x) and x["model"] == r["model"] and x["precision"] == "fp32"),
                      key=lambda x: x["result"]["ms_per_step"], default=None)
        cells = [r["model"], f"{tokens:,}", f"{model_flops * 1e-9:,.0f}", f"{attention_flops * 1e-9:,.0f}",
                 f"{limit_ms:.1f}", f"{tokens / limit_ms * 1e3:,.0f}"]
        if fastest:
            ms = fastest["result"]["ms_per_step"]
            cells += [SYSTEM_NAMES.get(fastest["system"], fastest["system"]), f"{ms:.1f}", f"{ms / limit_ms:.2f}"]
        else:
            cells += ["-", "-", "-"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out")
    ap.add_argument("--meta", action="append", default=[], help="a line for the header, e.g. 'commit: abc123'")
    a = ap.parse_args()
    try:
        records = load(a.results)
    except OSError as e:
        print(f"compare_table: cannot read {a.results}: {e.strerror}", file=sys.stderr)
        return 1
    text = table(records, a.meta)
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
