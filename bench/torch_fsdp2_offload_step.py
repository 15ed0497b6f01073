#!/usr/bin/env python3
"""The PyTorch peer of strata's streamed trainer: one training step of a GPT-2-shaped model under
FSDP2 with CPUOffloadPolicy, on one GPU (one rank).

Same model, batch and step as bench/torch_gpt2_step.py (bench/torch_bench_common.py): FP32, clip
1.0, AdamW lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights, SDPA attention. FSDP2
keeps the parameters, gradients and so the optimizer state in pinned host memory: each block's
weights are copied to the GPU for its forward and backward (fully_shard per transformer block, then
the root for the embeddings, final norm and tied LM head), its gradients are copied back, and
the clip and the AdamW step run on the CPU afterwards.

One process, world size 1: init_process_group("cpu:gloo,cuda:nccl") (gloo for the CPU tensors of
the clip, NCCL for the GPU collectives), rendezvous on 127.0.0.1 at a free port.

AdamW runs fused on the CPU by default (torch's CPU fused kernel, the fastest it has); if fused
AdamW refuses the offloaded DTensor parameters, the script says so on stderr and uses foreach,
and the JSON line names the implementation that ran.

Prints one JSON line, as bench/torch_gpt2_step.py does.
  python3 bench/torch_fsdp2_offload_step.py --model 1.5B --batch 4 --seq 1024 --steps 5
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

import torch_bench_common as common


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_single_rank():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ["RANK"] = "0"
    os.environ["LOCAL_RANK"] = "0"
    os.environ["WORLD_SIZE"] = "1"
    # One process on one host: keep gloo's and NCCL's sockets on the loopback interface.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=0, world_size=1)


def local(t):
    """The local shard of a DTensor (the whole tensor at world size 1), or t itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def clip_local_(params, max_norm):
    """Global-norm clipping over the local shards: exact at world size 1 (the local shard is the
    whole tensor). Used only if clip_grad_norm_ refuses the offloaded DTensor gradients."""
    grads = [local(p.grad) for p in params if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = min(1.0, max_norm / (float(total) + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total


def main():
    ap = common.arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "for-loop"],
                    help="torch.optim.AdamW implementation on the CPU (fused falls back to foreach)")
    args = ap.parse_args()
    common.set_precision(args.tf32)
    init_single_rank()

    t0 = time.perf_counter()
    _, model = common.build_model(args, "sdpa")
    offload = CPUOffloadPolicy()  # pin_memory=True: host<->device copies at PCIe speed
    for block in model.transformer.h:
        fully_shard(block, offload_policy=offload)
    fully_shard(model, offload_policy=offload)
    x, y = common.batch(args)

    state = {"impl": args.optimizer, "clip": "clip_grad_norm_", "notes": []}
    try:
        state["opt"] = common.adamw(model, args.optimizer)
    except Exception as e:  # fused AdamW may refuse CPU DTensors
        if args.optimizer != "fused":
            raise
        note = f"AdamW(fused=True) refused the offloaded parameters ({type(e).__name__}: {e}); using foreach"
        print(note, file=sys.stderr)
        state["notes"].append(note)
        state["impl"] = "foreach"
        state["opt"] = common.adamw(model, "foreach")
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t0

    def clip():
        if state["clip"] == "clip_grad_norm_":
            try:
                return torch.nn.utils.clip_grad_norm_(model.parameters(), common.CLIP)
            except Exception as e:
                note = f"clip_grad_norm_ failed on the DTensor gradients ({type(e).__name__}: {e}); clipping the local shards"
                print(note, file=sys.stderr)
                state["notes"].append(note)
                state["clip"] = "local shards"
        return clip_local_(list(model.parameters()), common.CLIP)

    def optimizer_step():
        try:
            state["opt"].step()
        except Exception as e:
            if state["impl"] != "fused":
                raise
            note = f"fused AdamW step failed on the offloaded parameters ({type(e).__name__}: {e}); using foreach"
            print(note, file=sys.stderr)
            state["notes"].append(note)
            state["impl"] = "foreach"
            state["opt"] = common.adamw(model, "foreach")  # fresh moments: only timing matters here
            state["opt"].step()

    def step():
        state["opt"].zero_grad(set_to_none=True)
        loss = common.loss_of(model, x, y)
        loss.backward()
        clip()
        optimizer_step()
        return loss

    times, loss = common.time_steps(step, args.warmup, args.steps)
    common.report("pytorch-fsdp2-cpu-offload", args, model, times, loss, init_s, optimizer=state["impl"],
                  clip=state["clip"], world_size=dist.get_world_size(), notes=state["notes"])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
