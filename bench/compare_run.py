#!/usr/bin/env python3
"""Runs one benchmark of bench/compare.sh and appends one record to the results file (stdlib only).

  compare_run.py --results R.jsonl --log L.log --name NAME --system S --model M --precision P
                 --timeout SEC --deadline EPOCH [--min-s SEC] -- COMMAND...

The command's stdout and stderr go to the log; its JSON line (the last line of the log that is a
JSON object with "ms_per_step") becomes the record's "result". While it runs, the host's used
memory (MemTotal - MemAvailable: pinned buffers included, which a process's RSS may not show) and
the GPU's used memory (nvidia-smi, where there is one) are sampled; the record keeps the peaks.

A run that would start with less than --min-s seconds left before --deadline is skipped; one that
runs past min(--timeout, the deadline) is ended (its process group: SIGTERM, then SIGKILL) and
recorded as a timeout. Either way, and on a failure, the record says so and the script exits 0, so
that the next run and the table still come.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SAMPLE_S = 0.25
RESERVE_S = 5  # kept before the deadline for the kill and the table


def host_used_bytes():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields = value.split()
            if fields:
                info[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return info["MemTotal"] - info["MemAvailable"]


class GpuSampler:
    """nvidia-smi printing the used memory every 250 ms into a file, while the run lasts."""

    def __init__(self):
        self.proc = None
        self.file = tempfile.TemporaryFile(mode="w+")
        smi = shutil.which("nvidia-smi")
        if smi:
            self.proc = subprocess.Popen([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-lms", str(int(SAMPLE_S * 1000))],
                                         stdout=self.file, stderr=subprocess.DEVNULL)

    def peak_mib(self):
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.file.seek(0)
        values = [int(v) for v in self.file.read().split() if v.isdigit()]
        return max(values) if values else None


def end_group(proc):
    """Ends the run's process group (it was started in a session of its own)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def json_result(log_path):
    try:
        with open(log_path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "ms_per_step" in value:
                return value
    return None


def tail(log_path, n=15):
    try:
        with open(log_path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser()
    for key in ("results", "log", "name", "system", "model", "precision"):
        ap.add_argument("--" + key, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds by which every run has ended")
    ap.add_argument("--min-s", type=float, default=0, help="skip the run if fewer seconds than this are left")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    record = {"run": a.name, "system": a.system, "model": a.model, "precision": a.precision,
              "command": " ".join(command), "log": a.log}

    left = a.deadline - RESERVE_S - time.time()
    if left < max(a.min_s, 1):
        record.update(status="skipped", reason=f"{left:.0f} s left before the deadline, the run needs {a.min_s:.0f}")
    else:
        limit = min(a.timeout, left)
        baseline = peak = host_used_bytes()
        gpu = GpuSampler()
        start = time.time()
        status = None
        with open(a.log, "w") as log:
            try:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                status, rc = f"failed ({e.strerror}: {command[0] if command else ''})", None
            if status is None:
                while proc.poll() is None:
                    peak = max(peak, host_used_bytes())
                    if time.time() - start > limit:
                        end_group(proc)
                        status = f"timeout ({limit:.0f} s)"
                        break
                    try:
                        proc.wait(timeout=SAMPLE_S)
                    except subprocess.TimeoutExpired:
                        pass
                rc = proc.wait()
        record.update(rc=rc, wall_s=round(time.time() - start, 1), host_used_peak_bytes=max(0, peak - baseline),
                      gpu_used_peak_mib=gpu.peak_mib())
        result = json_result(a.log)
        if status is None:
            status = "ok" if rc == 0 and result else (f"failed (exit {rc})" if rc != 0 else "failed (no JSON line)")
        record["status"] = status
        if result:
            record["result"] = result

    with open(a.results, "a") as f:
        f.write(json.dumps(record) + "\n")
    line = f"{time.strftime('%H:%M:%S')} {a.name}: {record['status']}"
    if "result" in record:
        line += f", {record['result']['ms_per_step']:.1f} ms/step"
    if "wall_s" in record:
        line += f" (wall {record['wall_s']} s)"
    print(line, flush=True)
    if record["status"] != "ok" and record["status"] != "skipped":
        for text in tail(a.log):
            print("    | " + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
