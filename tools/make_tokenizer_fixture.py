#!/usr/bin/env python3
"""Write the GPT-2 tokenizer fixtures of tests/text from the REAL tokenizer (Hugging Face).

It encodes the first --lines lines of the corpus one by one (each line without its trailing
newline) with transformers.GPT2TokenizerFast built from vocab.json + merges.txt (see make_tokenizer for how
each transformers version takes the files), and writes:

  gpt2_tokens_300.json    the text and full ids of the first --full lines, plus hand-picked edge
                          cases (white space runs, contractions, <|endoftext|>, emoji, scripts,
                          characters whose Unicode class changed between versions)
  gpt2_tokens_hashes.txt  one line per corpus line: token count, FNV-1a 64 of the ids (as
                          little-endian int32) and FNV-1a 64 of the line's UTF-8 bytes (so a test
                          can tell a changed corpus from a wrong tokenizer)

The committed fixtures were made on the GPU machine (transformers 5.17.0, tokenizers 0.23.2 there;
none here) by the session's device tool, from the repository root, with
    mkdir -p shared-copy && cp ../shared/data/gpt2/{vocab.json,merges.txt} ../shared/data/corpus/nlp-corpus.txt shared-copy/
    PYTHONUNBUFFERED=1 python3 tools/make_tokenizer_fixture.py --data shared-copy --out $OUT --dump-ids
and copied from $OUT to tests/fixtures/. That run also checked the reference against the bare
tokenizers pipeline and against tiktoken built from the same files: all three agreed on every line
and edge case. transformers 5 ignores vocab_file=/merges_file= (an empty vocabulary), so the
reference there is GPT2TokenizerFast.from_pretrained(folder); see make_tokenizer.
"""
import argparse
import json
import struct
import sys
import time
from pathlib import Path

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1

EDGE_CASES = [
    "", " ", "  ", "\t", "\n", "\r\n", "a  b", "a   b", "a \t b", "a\n\nb", "trailing   ", "   leading",
    "Hello world", "Hello, world! How's it going?", "don't DON'T we'll I'd you're they've I'm",
    "'s's 'S 'x '' ''s", "?!'s", "a's", "x 's", " 's", "$$$ ??? !!! ... ---",
    "12345678901234567890", "3.14159 -2 1e10", "abc123def", "١٢٣ ½ Ⅻ ², ₃ 𝟙",
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> x", "<|endoftext|><|endoftext|>",
    "<|endoftext", "<|endoftext|", "<|ENDOFTEXT|>", "text <|endoftext|>\n\nnext",
    "emoji 👍🏽 ok 🇫🇷 👨‍👩‍👧", "日本語のテキストです。", "Ünïcödé façade naïve", "e\u0301 cafe\u0301",
    "ﬁne ﬂow", "Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया", "한국어 텍스트",
    "x\u00a0y", "x\u0085y", "x\u001cy", "x\u001fy", "x\u180ey", "x\u200by", "x\u3000y", "x\u2028y",
    "x\u2029y", "x\u202fy", "x\u205fy", "x\u1680y", "x\u2003 y", "x \u00a0y", " \u00a0 ",
    "a\U0001E030b", "a\U00011F04b", "a\U00031350b", "a\U0001F6DCb", "a\u0CF3b",
    "a\U0001E4D0b", "a\u1C89b", "a\U00011F50b", "a\U0001FAE8b", "\ufffd", "a\ufffdb",
    "a" * 200, "ab" * 100, " " * 50 + "x", "\n" * 20, "!" * 64, "9" * 40,
    "The quick brown fox jumps over the lazy dog.",
]


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def ids_bytes(ids) -> bytes:
    return struct.pack(f"<{len(ids)}i", *ids)


def read_merges(path: Path):
    lines = path.read_text(encoding="utf-8").split("\n")
    return [tuple(line.split(" ")) for line in lines[1:] if line]


def make_tokenizer(data: Path):
    """GPT2TokenizerFast built from vocab.json + merges.txt.

    transformers 4 takes vocab_file=/merges_file=; transformers 5 silently ignores those (an empty
    vocabulary) and wants vocab=/merges= or from_pretrained(folder). Try each, keep the first that
    holds the whole GPT-2 vocabulary and encodes a known sentence right."""
    import transformers
    print(f"transformers {transformers.__version__}", flush=True)
    try:
        import tokenizers
        print(f"tokenizers {tokenizers.__version__}", flush=True)
    except Exception as e:  # only informative
        print(f"tokenizers version unknown: {e}")
    vocab, merges = data / "vocab.json", data / "merges.txt"
    cls = transformers.GPT2TokenizerFast
    attempts = [
        ("GPT2TokenizerFast(vocab_file=..., merges_file=...)",
         lambda: cls(vocab_file=str(vocab), merges_file=str(merges))),
        ("GPT2TokenizerFast.from_pretrained(folder)", lambda: cls.from_pretrained(str(data))),
        ("GPT2TokenizerFast(vocab=dict, merges=pairs)",
         lambda: cls(vocab=json.loads(vocab.read_text(encoding="utf-8")), merges=read_merges(merges))),
    ]
    for how, make in attempts:
        try:
            tok = make()
        except Exception as e:
            print(f"{how} failed: {e!r}", flush=True)
            continue
        hello = tok("Hello world", add_special_tokens=False)["input_ids"]
        print(f"{how}: class {type(tok).__module__}.{type(tok).__name__}, len {len(tok)}, "
              f"eos {tok.eos_token!r} = {tok.eos_token_id}, 'Hello world' -> {hello}", flush=True)
        if len(tok) == 50257 and tok.eos_token_id == 50256 and hello == [15496, 995]:
            return tok, how
    sys.exit("no way of building GPT2TokenizerFast gave the GPT-2 vocabulary; no fixture written")


def second_opinions(data: Path, texts, ids):
    """Informative only: the bare tokenizers pipeline and tiktoken (another regex engine and other
    Unicode tables) on the same lines; prints how many lines differ from the reference."""
    vocab, merges = data / "vocab.json", data / "merges.txt"
    others = {}
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
        raw = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
        raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        raw.add_special_tokens(["<|endoftext|>"])
        others["tokenizers"] = lambda t: raw.encode(t).ids
    except Exception as e:
        print(f"bare tokenizers unavailable: {e!r}")
    try:
        import tiktoken
        byte_of = {}
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        n = 0
        for b in range(256):
            if b not in bs:
                byte_of[chr(256 + n)] = b
                n += 1
        byte_of.update({chr(b): b for b in bs})
        table = json.loads(vocab.read_text(encoding="utf-8"))
        ranks = {bytes(byte_of[c] for c in k): v for k, v in table.items() if k != "<|endoftext|>"}
        enc = tiktoken.Encoding(
            name="gpt2_from_files",
            pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
            mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
        others[f"tiktoken {tiktoken.__version__}"] = lambda t: enc.encode(t, allowed_special="all")
    except Exception as e:
        print(f"tiktoken unavailable: {e!r}")
    for name, encode in others.items():
        differ = [k for k, (t, i) in enumerate(zip(texts, ids)) if encode(t) != i]
        print(f"second opinion {name}: {len(differ)} of {len(texts)} texts differ; first: "
              + "; ".join(f"{texts[k]!r}" for k in differ[:5]), flush=True)


def encode_all(tok, texts):
    """Ids as GPT2TokenizerFast.encode gives them by default, checked against the plain ids.

    A default that adds BOS/EOS would differ from the plain pre-tokenize + BPE ids; we keep the plain
    ones (that is what strata encodes) and say how many differ."""
    plain = tok(list(texts), add_special_tokens=False)["input_ids"]
    default = [tok.encode(t) for t in texts]
    differ = sum(1 for a, b in zip(plain, default) if a != b)
    if differ:
        print(f"WARNING: encode() differs from add_special_tokens=False on {differ} texts", flush=True)
    return plain


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder with vocab.json, merges.txt, nlp-corpus.txt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--full", type=int, default=300)
    ap.add_argument("--dump-ids", action="store_true",
                    help="also write corpus_ids.bin: every line's ids then -1, int32 LE (for debugging; not committed)")
    args = ap.parse_args()

    corpus = args.data / "nlp-corpus.txt"
    if not corpus.exists():
        corpus = args.data / "corpus" / "nlp-corpus.txt"
    raw_lines = corpus.read_bytes().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the file ends with a newline: no line after it
    texts = [line.decode("utf-8") for line in raw_lines[: args.lines]]
    print(f"{len(raw_lines)} corpus lines, encoding the first {len(texts)}", flush=True)

    tok, how = make_tokenizer(args.data)
    t0 = time.perf_counter()
    ids = encode_all(tok, texts)
    print(f"encoded {len(texts)} lines in {time.perf_counter() - t0:.2f} s "
          f"({sum(map(len, ids))} tokens)", flush=True)
    case_ids = encode_all(tok, EDGE_CASES)
    second_opinions(args.data, texts + EDGE_CASES, ids + case_ids)

    args.out.mkdir(parents=True, exist_ok=True)
    full = {
        "what": f"GPT-2 ids of the first {args.full} lines of nlp-corpus.txt and of edge cases",
        "made_by": "tools/make_tokenizer_fixture.py",
        "reference": f"{how}, transformers {__import__('transformers').__version__}",
        "lines": [{"text": t, "ids": i} for t, i in zip(texts[: args.full], ids[: args.full])],
        "cases": [{"text": t, "ids": i} for t, i in zip(EDGE_CASES, case_ids)],
    }
    with open(args.out / "gpt2_tokens_300.json", "w", encoding="utf-8") as f:
        # One entry per line: small diffs when the fixture is regenerated.
        f.write("{\n")
        for key in ("what", "made_by", "reference"):
            f.write(f"  {json.dumps(key)}: {json.dumps(full[key])},\n")
        for key in ("lines", "cases"):
            f.write(f"  {json.dumps(key)}: [\n")
            rows = [json.dumps(e, separators=(",", ":")) for e in full[key]]
            f.write(",\n".join("    " + r for r in rows))
            f.write("\n  ]" + (",\n" if key == "lines" else "\n"))
        f.write("}\n")

    # Whole-corpus check as one number too: every line's ids, each line followed by a -1 separator.
    t0 = time.perf_counter()
    all_texts = [line.decode("utf-8") for line in raw_lines]
    all_ids = tok(all_texts, add_special_tokens=False)["input_ids"]
    seconds = time.perf_counter() - t0
    total, h = 0, FNV_OFFSET
    for i in all_ids:
        h = fnv1a64(ids_bytes(i) + struct.pack("<i", -1), h)
        total += len(i)
    if args.dump_ids:
        with open(args.out / "corpus_ids.bin", "wb") as f:
            for i in all_ids:
                f.write(ids_bytes(i) + struct.pack("<i", -1))
    print(f"whole corpus: {len(all_texts)} lines, {total} tokens, batch encode {seconds:.2f} s", flush=True)

    with open(args.out / "gpt2_tokens_hashes.txt", "w", encoding="ascii") as f:
        f.write(f"# GPT-2 ids of nlp-corpus.txt, line by line, from {full['reference']}\n")
        f.write("# made by tools/make_tokenizer_fixture.py; FNV-1a 64 (offset 0xcbf29ce484222325)\n")
        f.write(f"# all_lines {len(all_texts)} {total} {h:016x}   (each line's ids then -1, as int32 LE)\n")
        f.write(f"# then {len(texts)} rows: token_count ids_fnv (ids as int32 LE) text_fnv (UTF-8 bytes)\n")
        for line, i in zip(raw_lines, ids):
            f.write(f"{len(i)} {fnv1a64(ids_bytes(i)):016x} {fnv1a64(line):016x}\n")
    print("wrote", sorted(p.name for p in args.out.iterdir()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
