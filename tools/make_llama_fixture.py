#!/usr/bin/env python3
"""Write the Llama parity fixture of examples/llama/tests/hf_llama_fixture_test.cpp from the REAL model.

It builds transformers.LlamaForCausalLM at an odd shape, every size that can be is not a power of
two: 2 layers, hidden 40, 4 heads of 10 (as many key/value heads: strata's block has no grouped-
query attention), SwiGLU width 68, vocabulary 67, context 16, RMSNorm eps 1e-5, rotary base
(rope_theta) 500000 (not the default 10000, so a loader that ignores it is caught), no biases, LM
head tied to embed_tokens: what strata's Llama example (examples/llama/llama_model.hpp) trains.
Weights are drawn here from a fixed seed, not HF's init: RMSNorm gains around 1 but not 1, nn.Linear
weights of std 1/sqrt(in) (q_proj and k_proj 1.5/sqrt(in), so that attention is far from uniform and
the rotary embedding changes the result), embed_tokens std 0.3. It writes into OUT/<shape>/:

  config.json, model.safetensors   save_pretrained: what strata's llama::load_llama_files(dir) reads
  reference.safetensors            a fixed batch and what torch computed, on the CPU in float32:
      inputs, targets    I32 (B, T)     targets[b, t] is the token predicted at position t (no shift,
                                        as strata's batches hold it); two of them -100 (ignored)
      logits             F32 (B, T, V)  model(inputs).logits, eager attention
      loss               F64 (1)        F.cross_entropy(logits.view(-1, V), targets.view(-1)), the
                                        mean over targets != -100
      grad_norm          F64 (1)        the L2 norm of all gradients together
      grad.<hf name>     F32            d loss / d parameter in HF's layout (nn.Linear (out, in));
                                        the tied model.embed_tokens.weight holds embedding + LM head
      config.rope_theta, config.rms_norm_eps   F64 (1)   what the model was built with
  Metadata: torch, transformers and python versions, the attention implementation, the seed.
and OUT/provenance.json (tools/fixture_provenance.py), OUT/summary.json.

Checks (any failure exits 1 after writing, so that the log shows every one):
- the model really uses eager attention, ties its head, has exactly the 20 parameters strata's
  model has, and its rotary inverse frequencies are those of rope_theta 500000;
- config.json says rope_theta 500000 (at the top, transformers 4, or in rope_parameters, 5);
- LlamaForCausalLM.from_pretrained(OUT/<shape>, attn_implementation="eager", float32) holds the same
  tensors and gives the same logits, bit for bit: the directory is the model that computed them.

Run on a machine with the pinned torch and transformers (tools/fixture_provenance.py), no network
and no GPU needed, in a few seconds: tools/make_fixtures.sh OUTDIR runs it with the GPT-2 one.

--family writes instead the Llama family's fixtures (issue 16) into OUT/<shape>/, the same files
(reference.safetensors also holds config.json's numbers as config.*), for
examples/llama/tests/hf_llama_fixture_test.cpp's family cases (tests/fixtures/hf_llama_family/):
  llama3_l2_h6_kv2_c42_d8_f60_v71   LlamaForCausalLM: 6 heads, 2 key/value heads (GQA ratio 3),
                                    head_dim 8 (42 / 6 = 7), untied lm_head, rope_scaling
                                    {"rope_type": "llama3", factor 8, low 1, high 8, original 64}
                                    with rope_theta 2000: the head's 4 rotary pairs fall in all three
                                    regions (kept, interpolated, divided by factor)
  qwen2_l2_h6_kv2_c36_f52_v73       Qwen2ForCausalLM: q/k/v biases (random, not zero), 6 heads of 6,
                                    2 key/value heads, tied head, rope_theta 1e6
  mistral_l2_h4_kv1_c32_f56_v61     MistralForCausalLM: sliding_window null, 4 heads of 8, 1 key/value
                                    head (multi-query), untied head, rope_theta 1e6
Each checks, besides the checks above, that the parameters are those strata's model has (biases and
lm_head included) and that from_pretrained(saved dir) gives the same logits.

Each family fixture also holds a 10-step training trajectory, trajectory.safetensors (for
examples/llama/tests/hf_llama_trajectory_test.cpp), made after and apart from the files above (its
own random generator and a copy of the model: they stay byte for byte what they were):
  trajectory.inputs, .targets   I32 (S, B, T)  step s trains on batch s: here the same batch at every
                                               step (two targets -100), so that the loss falls
  trajectory.loss               F64 (S)        the loss of each step's forward, before its update
  trajectory.grad_norm          F64 (S)        the global gradient norm before clipping
  final.<hf name>               F32            every parameter after the S updates
  hparams.lr, .beta1, .beta2, .eps, .weight_decay, .clip, .steps   F64 (1)
The update is strata's (include/strata/optim/adamw.hpp, train/clip.hpp), in torch:
  - torch.optim.AdamW(foreach=False, fused=False): _single_tensor_adam, the one strata's AdamW
    restates operation for operation; betas (0.9, 0.95), eps 1e-8, a constant lr 3e-3 (no warmup);
  - weight decay 0.1 on the 2-D tensors (embed_tokens, lm_head, every nn.Linear weight), none on the
    RMSNorm gains and Qwen2's biases (strata's param_spec decay flags);
  - clipping at global norm 1.0 by strata's formula, written out (not clip_grad_norm_, which sums
    per-tensor float32 norms): norm = sqrt(sum of squares in double over every element),
    coefficient = min(1, clip / (norm + 1e-6)), and when below 1 every gradient is multiplied by
    the coefficient rounded to float32.
--compare-with DIR (a committed tests/fixtures/hf_llama_family) checks that config.json,
generation_config.json, model.safetensors and reference.safetensors came out byte for byte as there.
"""
import argparse
import copy
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

import fixture_provenance

SHAPE = "l2_h4_c40_f68_v67"
LAYERS, HEADS, C, HIDDEN, VOCAB, CONTEXT = 2, 4, 40, 68, 67, 16
BATCH, SEQ, IGNORED = 2, 13, 2
ROPE_THETA, RMS_EPS = 500000.0, 1e-5
ATTENTION = "eager"
MAJOR = int(transformers.__version__.split(".")[0])


def build_model(seed):
    # transformers 5 keeps rope_theta in rope_parameters; 4 has it at the top of the config
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}} if MAJOR >= 5
            else {"rope_theta": ROPE_THETA, "rope_scaling": None})
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=C, intermediate_size=HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=C // HEADS,
                         hidden_act="silu", max_position_embeddings=CONTEXT, rms_norm_eps=RMS_EPS,
                         attention_bias=False, mlp_bias=False, attention_dropout=0.0, pretraining_tp=1,
                         tie_word_embeddings=True, use_cache=False, bos_token_id=VOCAB - 1,
                         eos_token_id=VOCAB - 1, pad_token_id=None, **rope)
    config._attn_implementation = ATTENTION  # the textbook softmax(QK^T / sqrt(d) + mask) V
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float().eval()  # eval: no dropout (0 anyway)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm gains
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:  # nn.Linear (out, in)
                gain = 1.5 if (".q_proj." in name or ".k_proj." in name) else 1.0
                p.copy_(gain / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen))
    return model


def expected_parameter_names():
    names = ["model.embed_tokens.weight"]
    for l in range(LAYERS):
        names += [f"model.layers.{l}.{n}.weight" for n in
                  ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    return names + ["model.norm.weight"]


def scalar(x):
    return torch.tensor([float(x)], dtype=torch.float64)


# ---- the Llama family (--family) ----

# name, architecture, layers, heads, kv heads, C, head_dim, intermediate, V, tied, qkv bias, theta, llama3 scaling
FAMILY = [
    dict(name="llama3_l2_h6_kv2_c42_d8_f60_v71", arch="llama", layers=2, heads=6, kv=2, c=42, hd=8, f=60, v=71,
         tied=False, bias=False, theta=2000.0,
         scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
                  "original_max_position_embeddings": 64}),
    dict(name="qwen2_l2_h6_kv2_c36_f52_v73", arch="qwen2", layers=2, heads=6, kv=2, c=36, hd=6, f=52, v=73,
         tied=True, bias=True, theta=1000000.0, scaling=None),
    dict(name="mistral_l2_h4_kv1_c32_f56_v61", arch="mistral", layers=2, heads=4, kv=1, c=32, hd=8, f=56, v=61,
         tied=False, bias=False, theta=1000000.0, scaling=None),
]
FAMILY_CONTEXT = 128


def build_family_model(spec, seed):
    common = dict(vocab_size=spec["v"], hidden_size=spec["c"], intermediate_size=spec["f"],
                  num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                  num_key_value_heads=spec["kv"], head_dim=spec["hd"], hidden_act="silu",
                  max_position_embeddings=FAMILY_CONTEXT, rms_norm_eps=RMS_EPS, attention_dropout=0.0,
                  tie_word_embeddings=spec["tied"], use_cache=False, bos_token_id=spec["v"] - 1,
                  eos_token_id=spec["v"] - 1, pad_token_id=None)
    if MAJOR >= 5:
        rope = dict(spec["scaling"] or {"rope_type": "default"})
        rope["rope_theta"] = spec["theta"]
        common["rope_parameters"] = rope
    else:
        common["rope_theta"] = spec["theta"]
        common["rope_scaling"] = spec["scaling"]
    if spec["arch"] == "llama":
        config = LlamaConfig(attention_bias=False, mlp_bias=False, pretraining_tp=1, **common)
        cls = LlamaForCausalLM
    elif spec["arch"] == "qwen2":
        config = Qwen2Config(use_sliding_window=False, sliding_window=None, max_window_layers=spec["layers"], **common)
        cls = Qwen2ForCausalLM
    else:
        config = MistralConfig(sliding_window=None, **common)
        cls = MistralForCausalLM
    config._attn_implementation = ATTENTION
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # Qwen2's q/k/v biases: not zero, so a dropped bias shows
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:  # RMSNorm gains
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight") or name == "lm_head.weight":
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:  # nn.Linear (out, in)
                gain = 1.5 if (".q_proj." in name or ".k_proj." in name) else 1.0
                p.copy_(gain / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen))
    return model, cls


def family_parameter_names(spec):
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not spec["tied"]:
        names.append("lm_head.weight")
    for l in range(spec["layers"]):
        names += [f"model.layers.{l}.{n}.weight" for n in
                  ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
        if spec["bias"]:
            names += [f"model.layers.{l}.self_attn.{n}.bias" for n in ("q_proj", "k_proj", "v_proj")]
    return sorted(names)


def llama3_inv_freq(spec):
    # transformers' _compute_llama3_parameters, restated in float64
    hd, theta, s = spec["hd"], spec["theta"], spec["scaling"]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if s is None:
        return inv
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for f in inv.tolist():
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(f)
        elif wl > low_wl:
            out.append(f / s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            out.append((1 - smooth) * f / s["factor"] + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


TRAJECTORY = dict(steps=10, lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip=1.0)
COMPARED_FILES = ("config.json", "generation_config.json", "model.safetensors", "reference.safetensors")


def strata_clip_(params, max_norm):
    """strata's clip_grad_norm (train/clip.hpp): returns the norm before clipping."""
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
    coefficient = max_norm / (norm + 1e-6)
    if coefficient < 1:  # strata skips the multiply by 1
        c = torch.tensor(coefficient, dtype=torch.float32)  # static_cast<float>(coefficient)
        for p in params:
            p.grad.mul_(c)
    return norm


def record_trajectory(model, spec, seed, out, check):
    """Trains a copy of `model` for TRAJECTORY["steps"] AdamW steps as strata's trainer does; writes
    out/trajectory.safetensors. Uses its own generator (seed + 3): the other files do not change."""
    h = TRAJECTORY
    model = copy.deepcopy(model)  # the tied head stays tied (one Parameter, copied once)
    model.zero_grad(set_to_none=True)
    named = dict(model.named_parameters())
    params = list(named.values())
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    check(f"{spec['name']}: trajectory: decay on {len(decay)} 2-D tensors, none on {len(no_decay)} norms/biases",
          len(decay) + len(no_decay) == len(params) and all(
              (p.dim() == 2) == (not n.endswith(("norm.weight", "layernorm.weight", ".bias"))) for n, p in named.items()))
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], foreach=False, fused=False)
    gen = torch.Generator().manual_seed(seed + 3)
    S, V = h["steps"], spec["v"]
    # one batch, trained on at every step (random targets change too fast to learn in 10 steps)
    inputs = torch.randint(0, V, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    for i in range(IGNORED):
        targets[i % BATCH, (5 * i + 3) % SEQ] = -100
    inputs, targets = inputs.expand(S, BATCH, SEQ).contiguous(), targets.expand(S, BATCH, SEQ).contiguous()
    initial = {n: p.detach().clone() for n, p in named.items()}
    losses, norms = [], []
    for s in range(S):
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=inputs[s], use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, V), targets[s].reshape(-1), ignore_index=-100)
        loss.backward()
        norms.append(strata_clip_(params, h["clip"]))
        opt.step()
        losses.append(loss.item())
    print("  trajectory: loss " + " ".join(f"{x:.6f}" for x in losses))
    print("  trajectory: grad norm " + " ".join(f"{x:.4f}" for x in norms))
    check(f"{spec['name']}: trajectory: the loss fell over {S} steps", losses[-1] < losses[0], f"{losses[0]} -> {losses[-1]}")
    check(f"{spec['name']}: trajectory: the first steps clip (norm > {h['clip']})", norms[0] > h["clip"], norms[0])
    moved = min(float((named[n].detach() - initial[n]).abs().max()) for n in named)
    check(f"{spec['name']}: trajectory: every parameter moved", moved > 0, moved)
    tensors = {"trajectory.inputs": inputs.to(torch.int32).contiguous(),
               "trajectory.targets": targets.to(torch.int32).contiguous(),
               "trajectory.loss": torch.tensor(losses, dtype=torch.float64),
               "trajectory.grad_norm": torch.tensor(norms, dtype=torch.float64)}
    for k, v in h.items():
        tensors["hparams." + k] = scalar(v)
    for n, p in named.items():
        tensors["final." + n] = p.detach().clone().contiguous()
    save_file(tensors, str(out / "trajectory.safetensors"),
              metadata={"torch": torch.__version__, "transformers": transformers.__version__, "seed": str(seed + 3),
                        "tool": "tools/make_llama_fixture.py --family", "optimizer": "torch.optim.AdamW foreach=False"})
    again = load_file(str(out / "trajectory.safetensors"))
    check(f"{spec['name']}: trajectory.safetensors reads back", all(torch.equal(again[k], v) for k, v in tensors.items()))


def compare_with(args, check):
    for spec in FAMILY:
        for name in COMPARED_FILES:
            mine, theirs = args.out / spec["name"] / name, args.compare_with / spec["name"] / name
            check(f"{spec['name']}/{name} is byte for byte {theirs}",
                  theirs.exists() and mine.read_bytes() == theirs.read_bytes())


def make_family(args, found, pinned_ok):
    checks, summaries = [], []

    def check(name, passed, detail=""):
        checks.append({"check": name, "passed": bool(passed), "detail": str(detail)})
        print(f"  {'ok  ' if passed else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")

    for k, spec in enumerate(FAMILY):
        seed = args.seed + 100 * (k + 1)
        print(f"== {spec['name']}: {spec['arch']}, B={BATCH}, T={SEQ}")
        model, cls = build_family_model(spec, seed)
        attn = getattr(model.config, "_attn_implementation", None)
        check(f"{spec['name']}: eager attention", attn == ATTENTION, attn)
        tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        check(f"{spec['name']}: the head is {'tied' if spec['tied'] else 'untied'}", tied == spec["tied"])
        params = dict(model.named_parameters())
        check(f"{spec['name']}: the parameters are strata's", sorted(params) == family_parameter_names(spec),
              sorted(params))
        rotary = getattr(model.model, "rotary_emb", None)
        inv_freq = rotary.inv_freq.double() if rotary is not None else None
        want = llama3_inv_freq(spec)
        check(f"{spec['name']}: rotary inverse frequencies (llama3 scaling: {spec['scaling'] is not None})",
              inv_freq is not None and torch.allclose(inv_freq, want, rtol=1e-5, atol=0),
              None if inv_freq is None else inv_freq.tolist())
        out = args.out / spec["name"]
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        saved_config = json.loads((out / "config.json").read_text())

        gen = torch.Generator().manual_seed(seed + 2)
        inputs = torch.randint(0, spec["v"], (BATCH, SEQ), generator=gen, dtype=torch.int64)
        targets = torch.randint(0, spec["v"], (BATCH, SEQ), generator=gen, dtype=torch.int64)
        for i in range(IGNORED):
            targets[i % BATCH, (5 * i + 3) % SEQ] = -100
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=inputs, use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, spec["v"]), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        grad_norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values()))
        print(f"  loss {loss.item():.9f}, gradient norm {grad_norm:.6f}")

        reloaded = cls.from_pretrained(
            out, attn_implementation=ATTENTION,
            **({"dtype": torch.float32} if MAJOR >= 5 else {"torch_dtype": torch.float32})).float().eval()
        with torch.no_grad():
            again = reloaded(input_ids=inputs, use_cache=False).logits
        check(f"{spec['name']}: from_pretrained(saved dir) gives the same logits", torch.equal(again, logits.detach()),
              f"max |difference| {(again - logits.detach()).abs().max().item():.3g}")

        tensors = {"inputs": inputs.to(torch.int32).contiguous(), "targets": targets.to(torch.int32).contiguous(),
                   "logits": logits.detach().float().contiguous(), "loss": scalar(loss.item()),
                   "grad_norm": scalar(grad_norm), "config.rope_theta": scalar(spec["theta"]),
                   "config.rms_norm_eps": scalar(RMS_EPS), "config.num_key_value_heads": scalar(spec["kv"]),
                   "config.head_dim": scalar(spec["hd"]), "config.tie_word_embeddings": scalar(spec["tied"]),
                   "config.rope_factor": scalar(spec["scaling"]["factor"] if spec["scaling"] else 0.0)}
        for name, p in params.items():
            tensors["grad." + name] = p.grad.detach().clone().contiguous()
        metadata = {"torch": torch.__version__, "transformers": transformers.__version__, "python": found["python"],
                    "attention": str(attn), "seed": str(seed), "tool": "tools/make_llama_fixture.py --family",
                    "architecture": cls.__name__}
        save_file(tensors, str(out / "reference.safetensors"), metadata=metadata)
        record_trajectory(model, spec, seed, out, check)
        summaries.append({"name": spec["name"], "architecture": cls.__name__, "loss": loss.item(),
                          "grad_norm": grad_norm, "attention": str(attn),
                          "rope_config": {k2: saved_config[k2] for k2 in ("rope_theta", "rope_parameters", "rope_scaling")
                                          if k2 in saved_config}})
    (args.out / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    if args.compare_with is not None:
        compare_with(args, check)
    record = fixture_provenance.write(
        args.out, "tools/make_llama_fixture.py --family", found, pinned_ok,
        {"seed": args.seed, "device": "cpu", "dtype": "float32", "attention": ATTENTION, "batch": BATCH, "seq": SEQ,
         "shapes": [f["name"] for f in FAMILY], "trajectory": TRAJECTORY}, checks)
    if not record["all_checks_passed"]:
        sys.exit("FAIL: " + "; ".join(c["check"] for c in checks if not c["passed"]))
    print("all checks passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--allow-other-versions", action="store_true")
    ap.add_argument("--family", action="store_true", help="write the Llama family fixtures (GQA, biases, llama3, untied)")
    ap.add_argument("--compare-with", type=Path, default=None,
                    help="--family: check that the files besides trajectory.safetensors equal those of this directory")
    args = ap.parse_args()
    found, pinned_ok = fixture_provenance.check_pins(args.allow_other_versions)
    if args.family:
        torch.set_default_dtype(torch.float32)
        make_family(args, found, pinned_ok)
        return
    torch.set_default_dtype(torch.float32)
    checks = []

    def check(name, passed, detail=""):
        checks.append({"check": name, "passed": bool(passed), "detail": str(detail)})
        print(f"  {'ok  ' if passed else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")

    print(f"== {SHAPE}: {LAYERS} layers, C {C}, {HEADS} heads, hidden {HIDDEN}, V {VOCAB}, B={BATCH}, T={SEQ}")
    model = build_model(args.seed)
    attn = getattr(model.config, "_attn_implementation", None)
    check("the model uses eager attention", attn == ATTENTION, attn)
    check("the LM head is tied to embed_tokens",
          model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr())
    params = dict(model.named_parameters())  # unique: the tied lm_head.weight is not listed again
    check("the parameters are strata's 1 + 9 L + 1", sorted(params) == sorted(expected_parameter_names()),
          sorted(params))
    hd = C // HEADS
    want_inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rotary = getattr(model.model, "rotary_emb", None)
    inv_freq = rotary.inv_freq.double() if rotary is not None else None
    check(f"rotary inverse frequencies are those of rope_theta {ROPE_THETA:g}",
          inv_freq is not None and torch.allclose(inv_freq, want_inv_freq, rtol=1e-5, atol=0),
          None if inv_freq is None else inv_freq.tolist())

    out = args.out / SHAPE
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    saved_config = json.loads((out / "config.json").read_text())
    rope_keys = {k: saved_config[k] for k in ("rope_theta", "rope_parameters", "rope_scaling") if k in saved_config}
    written_theta = (saved_config.get("rope_parameters") or {}).get("rope_theta", saved_config.get("rope_theta"))
    check(f"config.json says rope_theta {ROPE_THETA:g}", written_theta == ROPE_THETA, rope_keys)
    saved = load_file(str(out / "model.safetensors"))
    print(f"  saved {sorted(p.name for p in out.iterdir())}: {len(saved)} tensors")

    gen = torch.Generator().manual_seed(args.seed + 2)
    inputs = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    for i in range(IGNORED):
        targets[i % BATCH, (5 * i + 3) % SEQ] = -100

    model.zero_grad(set_to_none=True)
    logits = model(input_ids=inputs, use_cache=False).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)
    loss.backward()
    grad_norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values()))
    print(f"  loss {loss.item():.9f}, gradient norm {grad_norm:.6f}")

    # The saved directory is the model that computed the reference: same tensors, same logits.
    reloaded = LlamaForCausalLM.from_pretrained(
        out, attn_implementation=ATTENTION, **({"dtype": torch.float32} if MAJOR >= 5 else {"torch_dtype": torch.float32}))
    reloaded = reloaded.float().eval()
    with torch.no_grad():
        for p in reloaded.parameters():  # fresh, aligned storage (not the file's mapping)
            p.data = p.data.clone()
    re_attn = getattr(reloaded.config, "_attn_implementation", None)
    check("from_pretrained uses eager attention too", re_attn == ATTENTION, re_attn)
    mine, theirs = model.state_dict(), reloaded.state_dict()
    same_tensors = all(k in theirs and torch.equal(v, theirs[k]) for k, v in mine.items() if "rotary" not in k)
    check("from_pretrained(saved dir) holds the same tensors", same_tensors)
    with torch.no_grad():
        again = reloaded(input_ids=inputs, use_cache=False).logits
    diff = (again - logits.detach()).abs().max().item()
    check("from_pretrained(saved dir) gives the same logits", torch.equal(again, logits.detach()),
          f"max |difference| {diff:.3g}")

    tensors = {"inputs": inputs.to(torch.int32).contiguous(), "targets": targets.to(torch.int32).contiguous(),
               "logits": logits.detach().float().contiguous(), "loss": scalar(loss.item()),
               "grad_norm": scalar(grad_norm), "config.rope_theta": scalar(ROPE_THETA),
               "config.rms_norm_eps": scalar(RMS_EPS)}
    for name, p in params.items():
        tensors["grad." + name] = p.grad.detach().clone().contiguous()
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__, "python": found["python"],
                "attention": str(attn), "seed": str(args.seed), "tool": "tools/make_llama_fixture.py"}
    save_file(tensors, str(out / "reference.safetensors"), metadata=metadata)

    summary = {"name": SHAPE, "loss": loss.item(), "grad_norm": grad_norm, "attention": str(attn),
               "rope_config": rope_keys}
    (args.out / "summary.json").write_text(json.dumps([summary], indent=1) + "\n")
    record = fixture_provenance.write(
        args.out, "tools/make_llama_fixture.py", found, pinned_ok,
        {"seed": args.seed, "device": "cpu", "dtype": "float32", "attention": ATTENTION, "batch": BATCH, "seq": SEQ,
         "rope_theta": ROPE_THETA, "rms_norm_eps": RMS_EPS}, checks)
    print(json.dumps(summary))
    if not record["all_checks_passed"]:
        sys.exit("FAIL: " + "; ".join(c["check"] for c in checks if not c["passed"]))
    print("all checks passed")


if __name__ == "__main__":
    main()
