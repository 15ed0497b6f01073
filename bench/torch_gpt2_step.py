#!/usr/bin/env python3
"""The PyTorch peer of bench/gpt_step: one training step of a GPT-2-shaped model in eager PyTorch.

Same work as strata's resident configuration: FP32 weights, forward + backward of a micro-batch
(B x T tokens, random ids, fixed seed), global-norm clipping at 1.0, torch.optim.AdamW
(lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights). Strict FP32 by default (TF32 off
for matmuls and cuDNN); --tf32 switches it on, as strata's --tf32 does. The model is
transformers' GPT2LMHeadModel with eager attention, or, with --sdpa, PyTorch's fused
scaled_dot_product_attention (flash/memory-efficient kernels).

Prints one JSON line: ms per step (median of the timed steps), tokens/s, peak memory.
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10
"""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="124M", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after 3 warm-up steps)")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--sdpa", action="store_true", help="fused attention instead of eager")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(0)
    dev = torch.device("cuda")
    cfg = GPT2Config(vocab_size=50257, n_positions=max(1024, args.seq), **SHAPES[args.model],
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa" if args.sdpa else "eager"
    model = GPT2LMHeadModel(cfg).to(dev).float().train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=gen).to(dev)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({
        "peer": "pytorch-eager" + ("-sdpa" if args.sdpa else ""), "torch": torch.__version__, "model": args.model,
        "params": sum(p.numel() for p in model.parameters()), "batch": args.batch, "seq": args.seq,
        "tf32": args.tf32, "ms_per_step": round(ms, 2), "ms_min": round(min(times), 2),
        "tokens_per_s": round(args.batch * args.seq / ms * 1e3), "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "loss": float(loss),
    }))


if __name__ == "__main__":
    main()
