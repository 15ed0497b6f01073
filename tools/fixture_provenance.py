"""Provenance of the Hugging Face parity fixtures (tools/make_hf_fixtures.py, make_llama_fixture.py).

The fixtures are made by the real torch and transformers, so what made them is part of what they
mean: each script refuses versions other than PINNED (unless --allow-other-versions, which is then
recorded), and writes OUT/provenance.json with the versions of python, torch, transformers and
safetensors, the machine, the command, the checks the script made and their results, and the
SHA-256 of every file it wrote.
"""
import datetime
import hashlib
import json
import platform
import sys
from pathlib import Path

# The versions the committed fixtures were made with (the GPU machine's; docs/parity.md).
PINNED = {"torch": "2.11.0", "transformers": "5.17.0"}


def versions():
    import safetensors
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__}


def check_pins(allow_other_versions):
    """The versions in use; exits (status 3) when torch or transformers is not the pinned one."""
    found = versions()
    # torch's local tag (+cu130, +cpu) names the build, not the version
    mismatched = {k: found[k] for k, want in PINNED.items() if found[k].split("+")[0] != want}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in found.items()) + f"; pinned {PINNED}")
    if mismatched and not allow_other_versions:
        sys.exit(f"FAIL: {mismatched} differ from the pinned {PINNED}; the committed fixtures were made with "
                 "the pinned versions (pass --allow-other-versions to make them anyway; it is recorded)")
    return found, not mismatched


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(out_dir, tool, found, pinned_ok, settings, checks):
    """OUT/provenance.json: who made every file under out_dir, how, and what was checked."""
    import torch

    out_dir = Path(out_dir)
    files = {str(p.relative_to(out_dir)): sha256(p) for p in sorted(out_dir.rglob("*"))
             if p.is_file() and p.name not in ("provenance.json", "log.txt")}
    record = {
        "tool": tool,
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": found,
        "pinned": PINNED,
        "versions_match_pins": pinned_ok,
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "torch_threads": torch.get_num_threads()},
        "settings": settings,
        "checks": checks,
        "all_checks_passed": all(c["passed"] for c in checks),
        "sha256": files,
    }
    (out_dir / "provenance.json").write_text(json.dumps(record, indent=1) + "\n")
    return record
