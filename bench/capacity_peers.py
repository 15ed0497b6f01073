#!/usr/bin/env python3
"""strata against PyTorch FSDP2 with CPUOffloadPolicy on one GPU, at scale (issue 27, item 5):

1. speed at a shape both can run (default 20 x 4608, ~5.3B parameters, B=4, T=1024, strict FP32):
   bench/torch_fsdp2_offload_step.py and strata-gpt train (its default planner), ms/step each;
2. FSDP2's capacity: the deepest GPT of that width it trains one step of, by bisection of the depth.
   Each try is a subprocess with a time limit (a try that runs out of host memory is killed by the
   kernel: each asks to be the OOM killer's first choice). The upper end starts where FSDP2's
   16 bytes per parameter on the host (pinned weights and grads, AdamW m, v) exceed the available
   RAM; tries above it are not run;
3. strata --plan at FSDP2's first failing depth: the plan strata makes for it on this machine.

Stops bisecting when the deadline (default 530 s from the start) would be passed, and says so.
Prints every try, then a Markdown table, also written to OUT/capacity_peers.md.

  python3 bench/capacity_peers.py --strata build/cuda-release/examples/strata-gpt --data shared-copy --out OUT
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 50257


def parameters(n_layer, C, seq=1024):
    """GPT-2's parameter count (tied head): blocks, token and position embeddings, final norm."""
    block = 12 * C * C + 13 * C
    return n_layer * block + VOCAB * C + seq * C + 2 * C


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def be_the_oom_victim():
    """Runs in the child before exec: a try that overruns the RAM is killed, not the bench."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


class Clock:
    def __init__(self, deadline):
        self.start, self.deadline = time.monotonic(), deadline

    def left(self):
        return self.deadline - (time.monotonic() - self.start)

    def now(self):
        return time.monotonic() - self.start


def run(cmd, limit, log):
    """Runs cmd with a time limit; returns (rc, seconds, stdout). rc -9/-15 or 'timeout'."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=out, text=True, timeout=limit,
                               preexec_fn=be_the_oom_victim)
            rc, stdout = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, stdout = "timeout", (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or "")
        out.write(stdout or "")
    return rc, time.monotonic() - t0, stdout or ""


def why(rc, log):
    if rc == 0:
        return "trained"
    if rc == "timeout":
        return "time limit"
    if rc in (-9, 137):
        return "killed (SIGKILL: out of host memory)"
    tail = open(log, errors="replace").read().strip().splitlines()[-3:]
    return f"rc {rc}: " + " | ".join(tail)[-300:]


def fsdp2(args, n_layer, warmup, steps, limit, tag):
    log = os.path.join(args.out, f"fsdp2-{tag}-{n_layer}.log")
    cmd = [sys.executable, os.path.join(HERE, "torch_fsdp2_offload_step.py"), "--batch", str(args.batch),
           "--seq", str(args.seq), "--n-layer", str(n_layer), "--n-embd", str(args.width), "--n-head", str(args.heads),
           "--warmup", str(warmup), "--steps", str(steps)]
    print(f"--- FSDP2 {tag} {n_layer} x {args.width}: {' '.join(cmd)}", flush=True)
    rc, seconds, stdout = run(cmd, limit, log)
    line = next((json.loads(l) for l in reversed(stdout.splitlines()) if l.startswith("{")), None)
    ok = rc == 0 and line is not None
    print(f"    {why(rc, log) if not ok else 'trained'} in {seconds:.0f} s" +
          (f": {line['ms_per_step']} ms/step" if ok else ""), flush=True)
    return ok, line, why(rc, log), seconds


def strata_common(args):
    return ["--device", "cuda", "--data", os.path.join(args.data, "corpus", "nlp-corpus.txt"), "--tokenizer",
            "gpt2:" + os.path.join(args.data, "gpt2"), "--seq-len", str(args.seq), "--batch", str(args.batch),
            "--n-embd", str(args.width), "--n-head", str(args.heads), "--host-budget", args.host_budget]


def strata_speed(args, n_layer, limit):
    tag = f"strata-{n_layer}"
    metrics = os.path.join(args.out, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.strata, "train", *strata_common(args), "--n-layer", str(n_layer), "--steps", str(args.strata_steps),
           "--eval-every", "0", "--save", "none", "--overwrite", "--out", os.path.join(args.out, "run-" + tag),
           "--metrics", metrics]
    print(f"--- strata {n_layer} x {args.width}: {' '.join(cmd)}", flush=True)
    log = os.path.join(args.out, tag + ".log")
    rc, seconds, _ = run(cmd, limit, log)
    steps = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    steps = [s for s in steps if "tokens_per_s" in s]
    if not steps:
        print(f"    {why(rc, log)} in {seconds:.0f} s", flush=True)
        return None
    later = steps[1:] or steps
    ms = statistics.median(1000.0 * s["tokens"] / s["tokens_per_s"] for s in later)
    plan = [l.strip() for l in open(log, errors="replace") if l.startswith(("memory plan:", "homes:", "predicted step:"))]
    print(f"    {len(steps)} steps, {ms:.0f} ms/step (rc {rc}, {seconds:.0f} s)", flush=True)
    return {"ms": ms, "steps": len(steps), "plan": plan, "tokens": steps[0]["tokens"]}


def strata_plan(args, n_layer):
    cmd = [args.strata, "train", *strata_common(args), "--n-layer", str(n_layer), "--plan", "--out",
           os.path.join(args.out, "run-plan")]
    log = os.path.join(args.out, f"strata-plan-{n_layer}.log")
    rc, _, _ = run(cmd, 120, log)
    text = open(log, errors="replace").read()
    lines = [l for l in text.splitlines() if l.startswith(("memory plan:", "homes:", "predicted step:"))]
    return rc == 0, lines or text.strip().splitlines()[-2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata", required=True, help="the strata-gpt binary (a CUDA build)")
    ap.add_argument("--data", required=True, help="a folder with corpus/nlp-corpus.txt and gpt2/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--width", type=int, default=4608)
    ap.add_argument("--heads", type=int, default=36)
    ap.add_argument("--speed-depth", type=int, default=20, help="the shape both run (20 x 4608: ~5.3B)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--strata-steps", type=int, default=4)
    ap.add_argument("--host-budget", default="100G", help="strata's pinned host tier")
    ap.add_argument("--deadline", type=float, default=530, help="seconds for everything")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    clock = Clock(args.deadline)
    C = args.width
    available = mem_available()
    # FSDP2 keeps 16 bytes per parameter on the host: above this depth the RAM cannot hold it.
    ram_depth = max(d for d in range(1, 4096) if 16 * parameters(d, C, args.seq) <= available or d == 1)
    print(f"host RAM available {available / 2**30:.1f} GiB: FSDP2's 16 B/parameter fit at most {ram_depth} x {C} "
          f"({parameters(ram_depth, C) / 1e9:.2f} B parameters)", flush=True)

    # 1. speed at a shape both run
    d = args.speed_depth
    f_ok, f_line, f_why, _ = fsdp2(args, d, 1, 2, min(240, clock.left()), "speed")
    s = strata_speed(args, d, min(200, clock.left()))

    # 2. FSDP2's capacity: lo trains, hi does not. hi starts one past the RAM's depth, assumed (not
    # run) until the bisection below it is done; then it is tried too, and if it trains the range
    # grows.
    tries = []

    def attempt(depth):
        """True or False as FSDP2 trains depth, None when the deadline leaves no time for a try."""
        limit = min(180, clock.left() - 60)  # leave a minute for strata's plan and the table
        if limit < 60:
            print(f"--- deadline: no time for a try at {depth}", flush=True)
            return None
        ok, _, reason, seconds = fsdp2(args, depth, 0, 1, limit, "capacity")
        tries.append((depth, ok, reason, seconds))
        if not ok and reason == "time limit" and limit < 180:
            return None  # cut short by the deadline: not an answer
        return ok

    lo, hi = (d, max(ram_depth + 1, d + 1)) if f_ok else (0, d)
    hi_measured = not f_ok
    stopped = False
    while not stopped:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            ok = attempt(mid)
            if ok is None:
                stopped = True
                break
            lo, hi, hi_measured = (mid, hi, hi_measured) if ok else (lo, mid, True)
        if stopped or hi_measured:
            break
        ok = attempt(hi)
        if ok is None:
            break
        hi_measured = True
        if ok:
            lo, hi, hi_measured = hi, hi + max(2, hi - d), False
    if stopped:
        print(f"--- deadline: bisection stopped with {lo} trained and {hi} not", flush=True)
    plan_ok, plan_lines = strata_plan(args, hi) if clock.left() > 20 else (False, ["(no time left)"])

    rows = ["| peer | shape | parameters | result | ms/step | tokens/s | notes |", "|---|---|---|---|---|---|---|"]
    tokens = args.batch * args.seq
    if f_ok:
        rows.append(f"| PyTorch FSDP2 CPUOffloadPolicy | {d} x {C} | {parameters(d, C) / 1e9:.2f} B | trained | "
                    f"{f_line['ms_per_step']:.0f} | {f_line['tokens_per_s']} | optimizer {f_line.get('optimizer')}, "
                    f"host peak RSS {f_line['host_peak_rss_bytes'] / 2**30:.1f} GiB |")
    else:
        rows.append(f"| PyTorch FSDP2 CPUOffloadPolicy | {d} x {C} | {parameters(d, C) / 1e9:.2f} B | {f_why} | - | - | |")
    if s:
        ratio = f", {f_line['ms_per_step'] / s['ms']:.2f}x FSDP2's speed" if f_ok else ""
        rows.append(f"| strata-gpt | {d} x {C} | {parameters(d, C) / 1e9:.2f} B | trained | {s['ms']:.0f} | "
                    f"{tokens / s['ms'] * 1000:.0f} | {'; '.join(s['plan'])}{ratio} |")
    else:
        rows.append(f"| strata-gpt | {d} x {C} | {parameters(d, C) / 1e9:.2f} B | did not train (see the log) | - | - | |")
    for depth, ok, reason, seconds in tries:
        rows.append(f"| PyTorch FSDP2 CPUOffloadPolicy | {depth} x {C} | {parameters(depth, C) / 1e9:.2f} B | "
                    f"{'trained' if ok else reason} | - | - | capacity try, {seconds:.0f} s |")
    if lo > 0:
        rows.append(f"| **FSDP2's largest** | {lo} x {C} | **{parameters(lo, C) / 1e9:.2f} B** | trained | - | - | "
                    f"{hi} x {C} ({parameters(hi, C) / 1e9:.2f} B) does not"
                    f"{'' if hi_measured else ' (assumed: its 16 B/parameter exceed the available RAM; not run)'} |")
    rows.append(f"| strata-gpt --plan | {hi} x {C} | {parameters(hi, C) / 1e9:.2f} B | "
                f"{'planned' if plan_ok else 'refused'} | - | - | {'; '.join(plan_lines)} |")
    table = "\n".join(rows)
    print(table)
    print(f"(B={args.batch}, T={args.seq}, strict FP32; {clock.now():.0f} s in all)")
    with open(os.path.join(args.out, "capacity_peers.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
