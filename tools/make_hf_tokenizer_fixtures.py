#!/usr/bin/env python3
"""Make the tokenizer.json parity fixtures (issue 16): tokenizers of the kinds that Llama 3,
Qwen2, Llama 2 and Mistral ship, built and trained by the Hugging Face `tokenizers` library on
nlp-corpus.txt (no download: the real files are not reachable from the GPU machine, and what is
tested is the format and the algorithm, which these share with the published files), and the ids
that the same library gives for the corpus and for edge cases.

For each kind K, OUT/K/ gets
  tokenizer.json   as tokenizers saves it (the file a Hugging Face model directory holds)
  cases.json       edge cases and the first --full corpus lines: text, ids (add_special_tokens
                   False: special tokens written in the text still match), ids_default (the
                   post-processor's BOS added where the kind has one), and decode(ids)
  hashes.txt       the format of tests/fixtures/gpt2_tokens_hashes.txt: all_lines count, tokens
                   and FNV-1a 64 of every line's ids then -1; then --lines rows of token_count,
                   FNV-1a 64 of the ids (int32 LE) and of the line's UTF-8 bytes
and OUT/provenance.json records the versions, the command and the SHA-256 of every file.

Kinds:
  llama3    byte-level BPE, Llama 3's split regex (digits in groups of 1-3), ignore_merges true,
            special tokens <|begin_of_text|> (added as BOS by the post-processor), <|end_of_text|>,
            <|start_header_id|>, <|end_header_id|>, <|eot_id|>
  qwen2     byte-level BPE, Qwen2's split regex (single digits), NFC normalizer, no BOS,
            special tokens <|endoftext|>, <|im_start|>, <|im_end|>
  llama2    SentencePiece-style BPE with byte fallback: normalizer Prepend("▁") + Replace(" ", "▁"),
            no pre-tokenizer, <unk> <s> </s> then <0x00>..<0xFF> then the merges' tokens, BOS <s>
  mistral   the same vocabulary and merges, as newer conversions write them: no normalizer,
            pre-tokenizer Metaspace(prepend_scheme "first", split false)

Run on the GPU machine from the repository root (python with tokenizers; 1-2 minutes):
    python3 tools/make_hf_tokenizer_fixtures.py --corpus shared-copy/corpus/nlp-corpus.txt --out $OUT/hf_tokenizers
then copy OUT/hf_tokenizers to tests/fixtures/hf_tokenizers.
"""
import argparse
import datetime
import hashlib
import json
import platform
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tokenizer_fixture import EDGE_CASES, FNV_OFFSET, fnv1a64, ids_bytes  # noqa: E402

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SP_SPECIAL = ["<unk>", "<s>", "</s>"]

EXTRA_CASES = [
    "<|begin_of_text|>Hello", "a<|eot_id|>b", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>", "<|endoftext|>",
    "<s> x </s>", "<s>x</s>", "<unk>", " <s>", "x<0x41>y", "▁already▁marked", "▁", " ▁ ", "tab\there",
    "12 123 1234 12345 1234567", "３４５ fullwidth", "e\u0301 vs \u00e9 (NFC)", "\u212b \u00c5 (NFC)",
    "I'M SHOUTING, I'LL, YOU'RE", "trailing newline\n", "\r\n\r\n", "  two leading", "emoji 🤗🤗 🧪",
    "漢字とかなの混じった文", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\x00\x01\x7f", "a" * 1000,
]


def byte_level(split, special, ignore_merges, nfc, bos):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer, (lambda t: _bos(t, bos) if bos else _byte_level_post(t))


def _byte_level_post(tok):
    from tokenizers import processors
    tok.post_processor = processors.ByteLevel(trim_offsets=False)


def _bos(tok, bos):
    from tokenizers import processors
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                       special_tokens=[(bos, tok.token_to_id(bos))])


def sentencepiece_bpe(lines):
    """Llama 2 style: trained with a Metaspace pre-tokenizer (so merges stay inside words), then
    rewritten as Llama 2's tokenizer.json has it: <unk> <s> </s>, the 256 byte tokens, the rest."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SP_SPECIAL, show_progress=False, limit_alphabet=120)
    tok.train_from_iterator(lines, trainer)
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {t: i for i, t in enumerate(SP_SPECIAL)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    j["pre_tokenizer"] = None
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "▁"}]}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    llama2 = Tokenizer.from_str(json.dumps(j))
    m = dict(j)
    m["normalizer"] = None
    m["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    m["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    mistral = Tokenizer.from_str(json.dumps(m))
    return llama2, mistral


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--full", type=int, default=200)
    args = ap.parse_args()
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}, python {platform.python_version()}", flush=True)

    raw_lines = args.corpus.read_bytes().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    lines = [r.decode("utf-8") for r in raw_lines]
    print(f"{len(lines)} corpus lines", flush=True)

    kinds = {}
    for name, split, special, ignore_merges, nfc, bos in (
            ("llama3", LLAMA3_SPLIT, LLAMA3_SPECIAL, True, False, "<|begin_of_text|>"),
            ("qwen2", QWEN2_SPLIT, QWEN2_SPECIAL, False, True, None)):
        t0 = time.perf_counter()
        tok, trainer, post = byte_level(split, special, ignore_merges, nfc, bos)
        tok.train_from_iterator(lines, trainer)
        post(tok)
        kinds[name] = tok
        print(f"{name}: trained, vocab {tok.get_vocab_size()} in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    kinds["llama2"], kinds["mistral"] = sentencepiece_bpe(lines)
    print(f"llama2/mistral: trained, vocab {kinds['llama2'].get_vocab_size()} in {time.perf_counter() - t0:.1f} s",
          flush=True)

    checks = {}
    files = {}
    for name, tok in kinds.items():
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        tok.save(str(out / "tokenizer.json"))
        # The saved file must give the same tokenizer back.
        from tokenizers import Tokenizer
        again = Tokenizer.from_file(str(out / "tokenizer.json"))
        t0 = time.perf_counter()
        ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
        seconds = time.perf_counter() - t0
        reload_same = [e.ids for e in again.encode_batch(lines[:2000], add_special_tokens=False)] == ids[:2000]
        cases = EDGE_CASES + EXTRA_CASES
        rows = []
        for text in cases + lines[: args.full]:
            plain = tok.encode(text, add_special_tokens=False).ids
            default = tok.encode(text).ids
            rows.append({"text": text, "ids": plain, "ids_default": default,
                         "decoded": tok.decode(plain, skip_special_tokens=False)})
        roundtrip = sum(1 for t, i in zip(lines, ids) if tok.decode(i, skip_special_tokens=False) == t)
        checks[name] = {"reload_same_ids": reload_same, "vocab": tok.get_vocab_size(),
                        "corpus_tokens": sum(map(len, ids)), "encode_seconds": round(seconds, 2),
                        "lines_decoding_to_themselves": roundtrip}
        print(f"{name}: {checks[name]}", flush=True)
        with open(out / "cases.json", "w", encoding="utf-8") as f:
            f.write("{\n")
            f.write(f'  "what": {json.dumps(f"{name}: ids of edge cases and the first {args.full} corpus lines")},\n')
            f.write('  "made_by": "tools/make_hf_tokenizer_fixtures.py",\n')
            f.write(f'  "reference": {json.dumps(f"tokenizers {tokenizers.__version__}, Tokenizer.encode")},\n')
            f.write('  "cases": [\n')
            f.write(",\n".join("    " + json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows))
            f.write("\n  ]\n}\n")
        total, h = 0, FNV_OFFSET
        for i in ids:
            h = fnv1a64(ids_bytes(i) + struct.pack("<i", -1), h)
            total += len(i)
        with open(out / "hashes.txt", "w", encoding="ascii") as f:
            f.write(f"# {name} ids of nlp-corpus.txt, line by line, add_special_tokens=False, "
                    f"tokenizers {tokenizers.__version__}\n")
            f.write("# made by tools/make_hf_tokenizer_fixtures.py; FNV-1a 64 (offset 0xcbf29ce484222325)\n")
            f.write(f"# all_lines {len(lines)} {total} {h:016x}   (each line's ids then -1, as int32 LE)\n")
            f.write(f"# then {args.lines} rows: token_count ids_fnv (ids as int32 LE) text_fnv (UTF-8 bytes)\n")
            for raw, i in zip(raw_lines[: args.lines], ids[: args.lines]):
                f.write(f"{len(i)} {fnv1a64(ids_bytes(i)):016x} {fnv1a64(raw):016x}\n")
        for p in sorted(out.iterdir()):
            files[f"{name}/{p.name}"] = hashlib.sha256(p.read_bytes()).hexdigest()
        if not reload_same:
            sys.exit(f"FAIL: {name}: tokenizer.json read back gives other ids")

    with open(args.out / "provenance.json", "w", encoding="utf-8") as f:
        json.dump({"tool": "tools/make_hf_tokenizer_fixtures.py", "command": sys.argv,
                   "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "host": platform.platform(), "python": platform.python_version(),
                   "tokenizers": tokenizers.__version__, "corpus_sha256": hashlib.sha256(args.corpus.read_bytes()).hexdigest(),
                   "checks": checks, "files_sha256": files}, f, indent=1)
    print("wrote", args.out, flush=True)


if __name__ == "__main__":
    main()
