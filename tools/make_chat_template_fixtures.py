#!/usr/bin/env python3
"""Render the committed chat templates with transformers' apply_chat_template, for strata's chat
template tests (issue 16): tests/fixtures/chat_templates/expected.json.

For every template of tests/fixtures/chat_templates/ (*.jinja: the chat_template strings of the
published tokenizer_config.json files of Llama 3.1, Qwen2.5, Mistral-7B-Instruct-v0.3 and
Llama-2-chat, and chatml-generation.jinja with {% generation %} markers) and every conversation
below, with add_generation_prompt False and True, expected.json gets
  text             apply_chat_template(tokenize=False)
  ids              apply_chat_template(tokenize=True) with the template's tokenizer kind from
                   tests/fixtures/hf_tokenizers/ (Llama 3.1 -> llama3, Qwen2.5 and ChatML -> qwen2,
                   Llama 2 -> llama2, Mistral -> mistral)
  assistant_masks  return_assistant_tokens_mask=True, for templates with {% generation %} (else null)
  error            the exception's message instead, when the template refuses the conversation
tests/text/chat_template_test.cpp compares text and ids, tests/data/chat_test.cpp the masks with
strata's training split; both skip, saying so, while expected.json is absent.

Run from the repository root, with transformers 5.x and jinja2 (no network needed):
    python3 tools/make_chat_template_fixtures.py
It checks its own output (reloads expected.json and compares) and prints the versions.
"""
import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import jinja2
import transformers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
TOKENIZERS = ROOT / "tests" / "fixtures" / "hf_tokenizers"

# template file -> (tokenizer fixture kind, bos_token, eos_token)
KINDS = {
    "llama3.1.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5.jinja": ("qwen2", None, "<|im_end|>"),
    "chatml-generation.jinja": ("qwen2", None, "<|im_end|>"),
    "llama2.jinja": ("llama2", "<s>", "</s>"),
    "mistral-v0.3.jinja": ("mistral", "<s>", "</s>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
# The same conversations as the C++ tests (tests/text/chat_template_test.cpp).
CONVERSATIONS = {
    "system_user_assistant_user": [
        SYSTEM,
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 = 4."},
        {"role": "user", "content": "And 3 + 3?"},
    ],
    "user_assistant": [
        {"role": "user", "content": "Name a colour.\n\nOne word."},
        {"role": "assistant", "content": " Blue "},
    ],
    "system_user_assistant_user_assistant": [
        SYSTEM,
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Say \"ok\" in French."},
        {"role": "assistant", "content": "D'accord, « ok »."},
    ],
}


def load_template(path):
    # read as written; jinja2 itself drops the one trailing newline (keep_trailing_newline False)
    return path.read_text(encoding="utf-8")


def tokenizer_for(kind, bos, eos, template):
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZERS / kind / "tokenizer.json"))
    if bos is not None:
        tok.bos_token = bos
    if eos is not None:
        tok.eos_token = eos
    tok.chat_template = template
    return tok


def render_case(tok, template, messages, generation_prompt):
    case = {"add_generation_prompt": generation_prompt}
    try:
        case["text"] = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                      return_dict=True,
                                      return_assistant_tokens_mask="{% generation %}" in template or
                                      "{%- generation %}" in template)
        case["ids"] = list(out["input_ids"])
        masks = out.get("assistant_masks")
        case["assistant_masks"] = list(masks) if masks is not None else None
    except Exception as e:  # the template's raise_exception, or jinja2's errors
        case = {"add_generation_prompt": generation_prompt, "error": str(e)}
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(TEMPLATES / "expected.json"))
    args = ap.parse_args()
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        print(f"warning: transformers {transformers.__version__}; the fixtures are meant for 5.x", file=sys.stderr)
    cases = []
    for name, (kind, bos, eos) in KINDS.items():
        template = load_template(TEMPLATES / name)
        tok = tokenizer_for(kind, bos, eos, template)
        for conversation, messages in CONVERSATIONS.items():
            for generation_prompt in (False, True):
                case = {"template": name, "tokenizer": kind, "bos_token": bos, "eos_token": eos,
                        "conversation": conversation, "messages": messages}
                case.update(render_case(tok, template, messages, generation_prompt))
                cases.append(case)
                status = "error: " + case["error"] if "error" in case else f"{len(case['ids'])} ids"
                print(f"{name:26} {conversation:38} gen={int(generation_prompt)} {status}")
    doc = {
        "tool": "tools/make_chat_template_fixtures.py",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.platform(),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "cases": cases,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    again = json.loads(Path(args.out).read_text(encoding="utf-8"))
    assert again["cases"] == cases, "expected.json does not read back as written"
    print(f"wrote {args.out}: {len(cases)} cases (transformers {transformers.__version__}, jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
