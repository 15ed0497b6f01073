#!/usr/bin/env python3
"""The PyTorch peer of bench/gpt_step: one training step of a GPT-2-shaped model in eager PyTorch.

Same work as strata's resident configuration (bench/torch_bench_common.py): FP32 weights, forward +
backward of a micro-batch (B x T random token ids, fixed seed), global-norm clipping at 1.0,
torch.optim.AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights; fused by default,
as DESIGN.md's peer figures). Strict FP32 by default (TF32 off for matmuls and cuDNN); --tf32
switches it on, as strata's --tf32 does. The model is transformers' GPT2LMHeadModel with eager
attention, or, with --sdpa, PyTorch's fused scaled_dot_product_attention (flash/memory-efficient
kernels). Everything stays on the GPU.

Prints one JSON line: ms per step (median of the timed steps), tokens/s, model TFLOP/s, peak GPU
memory, peak host RSS.
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10 --sdpa
"""
import time

import torch

import torch_bench_common as common


def main():
    ap = common.arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--sdpa", action="store_true", help="fused attention instead of eager")
    ap.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "for-loop"],
                    help="torch.optim.AdamW implementation")
    args = ap.parse_args()
    common.set_precision(args.tf32)

    t0 = time.perf_counter()
    _, model = common.build_model(args, "sdpa" if args.sdpa else "eager")
    opt = common.adamw(model, args.optimizer)
    x, y = common.batch(args)
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t0

    def step():
        opt.zero_grad(set_to_none=True)
        loss = common.loss_of(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), common.CLIP)
        opt.step()
        return loss

    times, loss = common.time_steps(step, args.warmup, args.steps)
    common.report("pytorch-eager" + ("-sdpa" if args.sdpa else ""), args, model, times, loss, init_s,
                  optimizer=args.optimizer)


if __name__ == "__main__":
    main()
