#!/usr/bin/env python3
"""Write the GPT-2 parity fixtures of tests/hf from the REAL model (Hugging Face transformers).

For each shape below it builds transformers.GPT2LMHeadModel from a fixed seed (GELU tanh form
"gelu_new", no dropout, layernorm eps 1e-5, LM head tied to wte), perturbs every parameter a
little (so biases are not zero and layernorm gains not one: a swapped or misplaced bias or gain
changes the numbers), and writes into OUT/<shape>/:

  config.json, model.safetensors  save_pretrained: what strata's load_model_files<R>(dir) reads
  reference.safetensors           fixed inputs and targets (I32, B x T) and what torch computed:
      logits           F32 (B, T, V)   model(inputs).logits
      loss             F64 (1)         F.cross_entropy(logits.view(-1, V), targets.view(-1)), the
                                       mean over targets != -100 (no shift: targets[b, t] is the
                                       token predicted at position t, as strata's batches hold it)
      grad.<hf name>   F32             d loss / d parameter, before any clipping; the tied
                                       transformer.wte.weight holds embedding + LM-head parts
      train.losses     F64 (steps)     loss of each of `steps` AdamW steps on the same batch
      train.grad_norms F64 (steps)     clip_grad_norm_'s total norm (before clipping) at each step
      final.<hf name>  F32             the parameters after those steps
      hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.max_norm, hp.steps   F64 (1)
  Metadata: torch, transformers and python versions, the attention implementation, the seed.
and OUT/provenance.json (tools/fixture_provenance.py: versions, machine, command, checks, SHA-256 of
every file), OUT/summary.json.

Training: torch.optim.AdamW(lr, betas=(0.9, 0.95), eps=1e-8, foreach=False), weight_decay 0.1
on parameters of 2 or more dimensions (Conv1D weights, wte, wpe) and 0 on biases and layernorm
parameters (two param groups), constant lr, clip_grad_norm_(max_norm) before every step, the same
batch every step. That is strata's trainer with accum 1, clip max_norm, a constant schedule.

Everything runs on the CPU in float32 (deterministic; TF32 is switched off as well, in case a
CUDA device were used), with eager attention. Shapes have no power-of-two sizes and vocabularies
not a multiple of 64; one uses T < n_positions and a few ignored (-100) targets, one a max_norm
below the step-1 gradient norm so that clipping is certainly exercised.

Checks: the model made here and the one from_pretrained(OUT/<shape>) loads back, with the same
attention implementation (attn_implementation="eager") and dtype (float32), must hold the same
parameters and give the same logits bit for bit: the directory is the model that computed the
reference. Any failed check exits 1, after everything is written, so that the log shows them all.
(The first fixtures reloaded with transformers' default attention, not eager, and only printed
"gives the same logits: False".) Versions other than the pinned ones are refused.

The committed fixtures (tests/fixtures/hf/; tolerances and results in docs/parity.md) are made on
a machine with the pinned torch and transformers (tools/fixture_provenance.py; no network, no GPU
needed) by tools/make_fixtures.sh OUTDIR, which runs this script and make_llama_fixture.py.
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

import fixture_provenance

# name, (n_layer, n_head, n_embd, vocab, n_positions), batch B, seq T, ignored targets, max_norm
# max_norm None: 1.0 (the setting); "half": half the step-1 gradient norm (clips surely).
SHAPES = [
    ("l2_h2_c48_v101", dict(n_layer=2, n_head=2, n_embd=48, vocab_size=101, n_positions=32), 2, 32, 0, None),
    ("l3_h3_c36_v257", dict(n_layer=3, n_head=3, n_embd=36, vocab_size=257, n_positions=24), 2, 20, 3, None),
    ("l1_h4_c40_v67", dict(n_layer=1, n_head=4, n_embd=40, vocab_size=67, n_positions=16), 3, 16, 0, "half"),
]
LR, BETAS, EPS, WEIGHT_DECAY, STEPS = 1e-3, (0.9, 0.95), 1e-8, 0.1, 10
ATTENTION = "eager"  # the plain softmax(QK^T)V path, on both sides of the from_pretrained check
MAJOR = int(transformers.__version__.split(".")[0])
CHECKS = []


def check(name, passed, detail=""):
    CHECKS.append({"check": name, "passed": bool(passed), "detail": str(detail)})
    print(f"  {'ok  ' if passed else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")


def build_model(dims, seed):
    torch.manual_seed(seed)
    config = GPT2Config(**dims, n_inner=None, activation_function="gelu_new", resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        tie_word_embeddings=True, bos_token_id=dims["vocab_size"] - 1,
                        eos_token_id=dims["vocab_size"] - 1)
    config._attn_implementation = ATTENTION
    model = GPT2LMHeadModel(config).float()
    model.eval()  # dropout is 0 anyway
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.05 if p.dim() == 1 else 0.01
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        sys.exit("the LM head is not tied to wte: strata's GPT needs tie_word_embeddings")
    return model


def scalar(x):
    return torch.tensor([float(x)], dtype=torch.float64)


def make_shape(out_root, name, dims, B, T, ignored, max_norm, seed):
    print(f"== {name}: {dims}, B={B}, T={T}")
    model = build_model(dims, seed)
    attn = getattr(model.config, "_attn_implementation", None)
    check(f"{name}: the model uses {ATTENTION} attention", attn == ATTENTION, attn)
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # safetensors is the only (v5) or default (v4) format
    if not (out / "model.safetensors").exists():
        sys.exit(f"save_pretrained wrote no model.safetensors: {sorted(os.listdir(out))}")
    saved = load_file(str(out / "model.safetensors"))
    C = dims["n_embd"]
    c_attn = [k for k in saved if k.endswith("h.0.attn.c_attn.weight")]
    if not c_attn or list(saved[c_attn[0]].shape) != [C, 3 * C]:
        sys.exit(f"unexpected c_attn layout in model.safetensors: {[(k, list(saved[k].shape)) for k in c_attn]}")
    print(f"  saved {sorted(os.listdir(out))}; {len(saved)} tensors; attention: {attn}")

    V = dims["vocab_size"]
    gen = torch.Generator().manual_seed(seed + 2)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    for i in range(ignored):  # spread over rows and positions
        targets[i % B, (5 * i + 3) % T] = -100

    def loss_and_logits():
        logits = model(input_ids=inputs, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100), logits

    params = dict(model.named_parameters())  # unique: the tied lm_head.weight is not listed again
    expected = 2 + 12 * dims["n_layer"] + 2
    if len(params) != expected:
        sys.exit(f"{len(params)} parameters, expected {expected}: {list(params)}")

    model.zero_grad(set_to_none=True)
    loss, logits = loss_and_logits()
    loss.backward()
    tensors = {
        "inputs": inputs.to(torch.int32).contiguous(),
        "targets": targets.to(torch.int32).contiguous(),
        "logits": logits.detach().float().contiguous(),
        "loss": scalar(loss.item()),
    }
    for pname, p in params.items():
        tensors["grad." + pname] = p.grad.detach().clone().contiguous()
    # The saved directory is the model that computed the reference: same attention implementation
    # and dtype on both sides, then the same tensors and the same logits, bit for bit.
    reloaded = GPT2LMHeadModel.from_pretrained(
        out, attn_implementation=ATTENTION, **({"dtype": torch.float32} if MAJOR >= 5 else {"torch_dtype": torch.float32}))
    reloaded = reloaded.float().eval()
    with torch.no_grad():
        for p in reloaded.parameters():  # fresh, aligned storage (not the file's mapping)
            p.data = p.data.clone()
    re_attn = getattr(reloaded.config, "_attn_implementation", None)
    check(f"{name}: from_pretrained uses {ATTENTION} attention too", re_attn == ATTENTION, re_attn)
    theirs = dict(reloaded.named_parameters())
    check(f"{name}: from_pretrained(saved dir) holds the same parameters",
          all(k in theirs and torch.equal(p, theirs[k]) for k, p in params.items()))
    with torch.no_grad():
        again = reloaded(input_ids=inputs, use_cache=False).logits
    diff = (again - logits.detach()).abs().max().item()
    check(f"{name}: from_pretrained(saved dir) gives the same logits", torch.equal(again, logits.detach()),
          f"max |difference| {diff:.3g}")
    step1_norm = torch.nn.utils.clip_grad_norm_(list(params.values()), float("inf")).item()
    if max_norm == "half":
        max_norm = 0.5 * step1_norm
    elif max_norm is None:
        max_norm = 1.0
    print(f"  loss {loss.item():.9f}, step-1 grad norm {step1_norm:.6f}, max_norm {max_norm:.6f}"
          f" ({'clips' if step1_norm > max_norm else 'does not clip'} at step 1)")

    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss, _ = loss_and_logits()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    print("  losses " + " ".join(f"{x:.7f}" for x in losses))
    print("  norms  " + " ".join(f"{x:.5f}" for x in norms))
    tensors["train.losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors["train.grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for pname, p in params.items():
        tensors["final." + pname] = p.detach().clone().contiguous()
    for key, value in [("lr", LR), ("beta1", BETAS[0]), ("beta2", BETAS[1]), ("eps", EPS),
                       ("weight_decay", WEIGHT_DECAY), ("max_norm", max_norm), ("steps", STEPS)]:
        tensors["hp." + key] = scalar(value)
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": sys.version.split()[0], "attention": str(attn), "seed": str(seed),
                "tool": "tools/make_hf_fixtures.py"}
    save_file(tensors, str(out / "reference.safetensors"), metadata=metadata)
    return {"name": name, "loss": losses[0], "final_loss": losses[-1], "grad_norm": step1_norm,
            "max_norm": max_norm, "attention": str(attn)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--allow-other-versions", action="store_true")
    args = ap.parse_args()
    found, pinned_ok = fixture_provenance.check_pins(args.allow_other_versions)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_default_dtype(torch.float32)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = [make_shape(args.out, name, dims, B, T, ignored, max_norm, args.seed + 10 * i)
               for i, (name, dims, B, T, ignored, max_norm) in enumerate(SHAPES)]
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    record = fixture_provenance.write(
        args.out, "tools/make_hf_fixtures.py", found, pinned_ok,
        {"seed": args.seed, "device": "cpu", "dtype": "float32", "attention": ATTENTION,
         "shapes": [s[0] for s in SHAPES]}, CHECKS)
    print(json.dumps(summary))
    if not record["all_checks_passed"]:
        sys.exit("FAIL: " + "; ".join(c["check"] for c in CHECKS if not c["passed"]))
    print("all checks passed")


if __name__ == "__main__":
    main()
