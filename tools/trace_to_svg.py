#!/usr/bin/env python3
"""Draws a strata Chrome/Perfetto trace (strata-gpt --trace FILE.json) as an SVG timeline,
one row per track, for docs where ui.perfetto.dev is not at hand.

    python3 tools/trace_to_svg.py TRACE.json OUT.svg
"""
import json
import sys

COLORS = {"H2D": "#4e79a7", "compute": "#59a14f", "D2H": "#f28e2b", "optimizer": "#b07aa1", "storage I/O": "#e15759"}


def main(src, dst):
    events = json.load(open(src))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit("no complete events in " + src)
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    tids = sorted({e["tid"] for e in spans})
    width, left, row = 1000, 110, 28
    scale = (width - left - 10) / max(1.0, t1 - t0)
    height = 40 + row * len(tids) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20">strata-gpt streamed steps: {len(spans)} tasks over {(t1 - t0) / 1000:.1f} ms</text>']
    for i, tid in enumerate(tids):
        y = 35 + i * row
        name = names.get(tid, str(tid))
        out.append(f'<text x="10" y="{y + 16}">{name}</text>')
        out.append(f'<line x1="{left}" y1="{y + row - 4}" x2="{width - 10}" y2="{y + row - 4}" stroke="#ddd"/>')
        for e in spans:
            if e["tid"] != tid:
                continue
            x = left + (e["ts"] - t0) * scale
            w = max(0.5, e["dur"] * scale)
            out.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{row - 8}" fill="{COLORS.get(name, "#999")}">'
                       f'<title>{e["name"]} {e["dur"]} us</title></rect>')
    y = 40 + row * len(tids) + 15
    out.append(f'<text x="{left}" y="{y}">0 ms</text><text x="{width - 60}" y="{y}">{(t1 - t0) / 1000:.1f} ms</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
