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
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--allow-other-versions", action="store_true")
    args = ap.parse_args()
    found, pinned_ok = fixture_provenance.check_pins(args.allow_other_versions)
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
