#!/usr/bin/env python3
"""Greedy continuation of a prompt by a Hugging Face Llama directory (byte tokenizer), computed
WITHOUT strata: with transformers' AutoModelForCausalLM when torch and transformers are installed,
else with a plain-Python restatement of Hugging Face's Llama forward (modeling_llama.py: RMSNorm,
rotate_half rotary embedding with llama3 scaling if any, causal grouped-query attention with
num_key_value_heads and head_dim, q/k/v biases when the file has them (Qwen2), SwiGLU MLP, LM head
tied to embed_tokens or lm_head.weight) that reads model.safetensors and config.json by itself.

strata-llama's checkpoints must give what `strata-llama sample --temperature 0` gives: the check
that the export (names, nn.Linear (out, in) layouts, q/k/v split, config fields) means the same
model to Hugging Face. Both crop the context to its last max_position_embeddings tokens.

    hf_llama_greedy.py CHECKPOINT_DIR PROMPT TOKENS     prints PROMPT + the continuation
"""
import array
import json
import math
import struct
import sys


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}, this check reads F32 only")
        begin, end = info["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + begin : 8 + n + end])
        shape = info["shape"]
        if len(shape) == 2:  # rows
            cols = shape[1]
            tensors[name] = [values[r * cols : (r + 1) * cols].tolist() for r in range(shape[0])]
        else:
            tensors[name] = values.tolist()
    return tensors


def linear(x, w, bias=None):  # nn.Linear: x (T, in), w (out, in) -> (T, out)
    out = [[sum(a * b for a, b in zip(row, wr)) for wr in w] for row in x]
    if bias is not None:
        out = [[a + b for a, b in zip(row, bias)] for row in out]
    return out


def inv_freqs(config, hs):  # transformers' default and llama3 rope initializations
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    inv = [1.0 / theta ** (2 * i / hs) for i in range(hs // 2)]
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def rmsnorm(x, weight, eps):
    out = []
    for row in x:
        r = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([v * r * g for v, g in zip(row, weight)])
    return out


def rotary(x, n_head, inv_freq):  # x (T, n_head HS); HF's rotate_half convention
    hs = len(x[0]) // n_head
    half = hs // 2
    out = []
    for t, row in enumerate(x):
        new = list(row)
        for h in range(n_head):
            base = h * hs
            for i in range(half):
                c, s = math.cos(t * inv_freq[i]), math.sin(t * inv_freq[i])
                x1, x2 = row[base + i], row[base + half + i]
                new[base + i] = x1 * c - x2 * s
                new[base + half + i] = x2 * c + x1 * s
        out.append(new)
    return out


def attention(q, k, v, n_head, n_kv_head):  # q (T, NH HS), k and v (T, NKV HS): query head h reads kv head h / (NH/NKV)
    T, C = len(q), len(q[0])
    hs = C // n_head
    group = n_head // n_kv_head
    out = [[0.0] * C for _ in range(T)]
    for h in range(n_head):
        sl = slice(h * hs, (h + 1) * hs)
        g = h // group
        kl = slice(g * hs, (g + 1) * hs)
        for t in range(T):
            scores = [sum(a * b for a, b in zip(q[t][sl], k[u][kl])) / math.sqrt(hs) for u in range(t + 1)]
            top = max(scores)
            w = [math.exp(s - top) for s in scores]
            z = sum(w)
            for j in range(hs):
                out[t][h * hs + j] = sum(w[u] * v[u][g * hs + j] for u in range(t + 1)) / z
    return out


def silu(x):
    return x / (1.0 + math.exp(-x))


def plain_logits(tensors, config, ids):
    eps, nh = config["rms_norm_eps"], config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    hs = config.get("head_dim") or config["hidden_size"] // nh
    inv_freq = inv_freqs(config, hs)
    embed = tensors["model.embed_tokens.weight"]
    x = [list(embed[i]) for i in ids]
    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, tensors[p + "input_layernorm.weight"], eps)
        a = p + "self_attn."
        q = rotary(linear(h, tensors[a + "q_proj.weight"], tensors.get(a + "q_proj.bias")), nh, inv_freq)
        k = rotary(linear(h, tensors[a + "k_proj.weight"], tensors.get(a + "k_proj.bias")), nkv, inv_freq)
        v = linear(h, tensors[a + "v_proj.weight"], tensors.get(a + "v_proj.bias"))
        o = linear(attention(q, k, v, nh, nkv), tensors[a + "o_proj.weight"])
        x = [[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(x, o)]
        h = rmsnorm(x, tensors[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h, tensors[p + "mlp.gate_proj.weight"])
        up = linear(h, tensors[p + "mlp.up_proj.weight"])
        act = [[silu(g) * u for g, u in zip(rg, ru)] for rg, ru in zip(gate, up)]
        d = linear(act, tensors[p + "mlp.down_proj.weight"])
        x = [[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(x, d)]
    last = rmsnorm([x[-1]], tensors["model.norm.weight"], eps)
    return linear(last, tensors.get("lm_head.weight", embed))[0]  # untied head, or tied to embed_tokens


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ckpt, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(f"{ckpt}/config.json") as f:
        config = json.load(f)
    window = config["max_position_embeddings"]
    ids = list(prompt.encode("utf-8")) or [config["vocab_size"] - 1]  # strata's byte tokenizer; eot = 256
    try:
        import torch
        from transformers import AutoModelForCausalLM  # Llama, Mistral or Qwen2 as config.json says

        model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
        engine = "transformers " + __import__("transformers").__version__

        def next_logits(context):
            with torch.no_grad():
                return model(torch.tensor([context])).logits[0, -1].tolist()

    except ImportError:
        tensors = load_safetensors(f"{ckpt}/model.safetensors")
        engine = "plain Python (no torch/transformers here)"

        def next_logits(context):
            return plain_logits(tensors, config, context)

    new = []
    margins = []
    for _ in range(n):
        logits = next_logits((ids + new)[-window:])
        order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
        new.append(order[0])
        margins.append(logits[order[0]] - logits[order[1]])
    print(f"engine: {engine}; smallest top-1 margin {min(margins):.3g}", file=sys.stderr)
    sys.stdout.write(prompt + bytes(i for i in new if i < 256).decode("utf-8", errors="replace") + "\n")


if __name__ == "__main__":
    main()
