"""What the PyTorch peers of strata_bench_gpt_step share: the GPT-2 shapes, the model (transformers'
GPT2LMHeadModel, random init, created on the GPU), the batch, AdamW's parameter groups, the timing
loop and the JSON line. Imported by bench/torch_gpt2_step.py and bench/torch_fsdp2_offload_step.py.

The work is strata's (bench/gpt_step.cpp): FP32 weights, forward + backward of one micro-batch of
B x T random token ids (fixed seed), global-norm clipping at 1.0, AdamW lr 3e-4, betas (0.9, 0.95),
eps 1e-8, weight decay 0.1 on the 2-D weights (matrices and embeddings) and none on biases and
layernorm gains. Strict FP32 unless --tf32.
"""
import argparse
import json
import resource
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SHAPES = {
    "124M": dict(n_layer=12, n_head=12, n_embd=768),
    "350M": dict(n_layer=24, n_head=16, n_embd=1024),
    "774M": dict(n_layer=36, n_head=20, n_embd=1280),
    "1.5B": dict(n_layer=48, n_head=25, n_embd=1600),
}
VOCAB = 50257
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 3e-4, (0.9, 0.95), 1e-8, 0.1, 1.0


def arg_parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default="124M", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (the median is reported)")
    ap.add_argument("--tf32", action="store_true", help="TF32 matmuls (strict FP32 without it)")
    ap.add_argument("--n-layer", type=int, help="blocks (with --n-embd and --n-head: a shape of its own, not --model's)")
    ap.add_argument("--n-embd", type=int, help="channels")
    ap.add_argument("--n-head", type=int, help="attention heads")
    return ap


def shape_of(args):
    """--model's shape, or the one --n-layer, --n-embd and --n-head give (all three)."""
    custom = [args.n_layer, args.n_embd, args.n_head]
    if all(v is None for v in custom):
        return SHAPES[args.model]
    if any(v is None for v in custom):
        raise SystemExit("give --n-layer, --n-embd and --n-head together")
    return dict(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)


def model_name(args):
    shape = shape_of(args)
    return args.model if shape is SHAPES[args.model] else f"{shape['n_layer']}x{shape['n_embd']}"


def set_precision(tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def build_model(args, attn_implementation):
    """GPT2LMHeadModel of the --model shape, FP32, dropout off, created on the GPU directly
    (initializing 1.5B parameters on the CPU takes tens of seconds)."""
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=max(1024, args.seq), **shape_of(args),
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(0)
    dev = torch.device("cuda")
    with dev:
        model = GPT2LMHeadModel(cfg)
    return cfg, model.to(dev).float().train()


def adamw_groups(model):
    """strata's AdamW groups: decay on tensors of 2 or more dimensions only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(model, impl):
    """torch.optim.AdamW with strata's hyperparameters; impl: fused, foreach or for-loop."""
    kw = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]
    return torch.optim.AdamW(adamw_groups(model), lr=LR, betas=BETAS, eps=EPS, **kw)


def batch(args):
    """Random ids, fixed seed: inputs and the next-token targets, on the GPU."""
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=gen).to("cuda")
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def loss_of(model, x, y):
    logits = model(input_ids=x, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def time_steps(step, warmup, steps):
    """Runs `warmup` untimed steps, resets the peak memory counters, then times `steps` steps
    (each to a device synchronize). Returns the milliseconds of each and the last loss."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, float(loss.detach())


def pinned_host_peak_bytes():
    """Peak bytes of PyTorch's pinned host allocator, where this torch reports it (else None)."""
    try:
        stats = torch.cuda.host_memory_stats()
    except Exception:  # older torch: no host allocator statistics
        return None
    for key in ("reserved_bytes.peak", "allocated_bytes.peak"):
        if key in stats:
            return int(stats[key])
    return None


def report(peer, args, model, times, loss, init_s, **extra):
    """Prints the JSON line: the keys of strata_bench_gpt_step's line, where they apply."""
    ms = statistics.median(times)
    shape = shape_of(args)
    params = sum(p.numel() for p in model.parameters())  # tied wte / lm_head counted once
    tokens = args.batch * args.seq
    model_flops = 6.0 * params * tokens
    attention_flops = 6.0 * shape["n_layer"] * args.seq * shape["n_embd"] * tokens  # causal
    device_peak = torch.cuda.max_memory_allocated()
    out = {
        "bench": peer, "peer": peer, "torch": torch.__version__, "model": model_name(args), "params": params,
        "n_layer": shape["n_layer"], "n_embd": shape["n_embd"], "batch": args.batch, "seq": args.seq,
        "tf32": args.tf32, "steps": args.steps, "warmup": args.warmup, "init_s": round(init_s, 2),
        "ms_per_step": round(ms, 2), "ms_min": round(min(times), 2),
        "tokens_per_s": round(tokens / ms * 1e3), "model_tflops": round(model_flops / ms * 1e-9, 2),
        "attention_tflops": round(attention_flops / ms * 1e-9, 2),
        "device_peak_bytes": device_peak, "device_reserved_peak_bytes": torch.cuda.max_memory_reserved(),
        "peak_gib": round(device_peak / 2**30, 2),
        "host_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "host_pinned_peak_bytes": pinned_host_peak_bytes(), "loss": loss,
    }
    out.update(extra)
    print(json.dumps(out), flush=True)
