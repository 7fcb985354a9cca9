#!/usr/bin/env python3
"""Per-cell median TTFT of two runs of the same plan, side by side (stdlib only).

    scripts/compare-runs.py REFERENCE/records.jsonl OTHER/records.jsonl [--server]

A cell is (phase, model, condition_id): the same plan gives both runs the same condition ids.
Prints, per phase and model, the ratio OTHER / REFERENCE of the cells' median TTFT (client TTFT,
or the server's own with --server): its mean absolute error, median, worst and the worst cells,
then the same over the load phase grouped by background shape. Only `ok` records count; a cell
missing from either run is listed. Exit 2 on unreadable input.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(path, field):
    cells = defaultdict(list)
    shapes = {}
    try:
        with open(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{lineno}: not JSON: {e}")
                if r.get("status") != "ok" or r.get(field) is None:
                    continue
                key = (r["phase"], r["model"], r["condition_id"])
                cells[key].append(float(r[field]))
                b = r.get("background") or {}
                shapes[key] = (
                    f"prefill {b.get('prefill_requests', 0)}, decode {b.get('decode_requests', 0)}"
                    f"{'/' + str(b.get('decode_length')) if b.get('decode_length') else ''}, "
                    f"busy capable {'yes' if b.get('busy_capable') else 'no'}"
                )
    except OSError as e:
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(2)
    return {k: statistics.median(v) for k, v in cells.items()}, shapes


def summary(label, ratios):
    errs = sorted(abs(x - 1) for x in ratios)
    worst = max(ratios, key=lambda x: abs(x - 1))
    return (f"{label:<34} cells {len(ratios):>4}  mean |ratio−1| {100 * statistics.mean(errs):5.1f} %  "
            f"median ratio {statistics.median(ratios):.3f}  worst {worst:.3f}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    field = "server_ttft_ms" if "--server" in sys.argv else "ttft_ms"
    ref, shapes = load(args[0], field)
    oth, _ = load(args[1], field)
    missing = sorted(set(ref) ^ set(oth))
    common = sorted(set(ref) & set(oth))
    print(f"{field}: {args[1]} / {args[0]}, {len(common)} cells in both")
    by = defaultdict(list)
    by_shape = defaultdict(list)
    for k in common:
        ratio = oth[k] / ref[k]
        by[(k[0], k[1])].append((ratio, k))
        if k[0] == "load":
            by_shape[(k[1], shapes[k])].append(ratio)
    for (phase, model), rs in sorted(by.items()):
        print(summary(f"{phase} {model}", [r for r, _ in rs]))
        for r, k in sorted(rs, key=lambda x: -abs(x[0] - 1))[:3]:
            print(f"    {k[2]:<40} ref {ref[k]:9.1f} ms  other {oth[k]:9.1f} ms  ratio {r:.3f}")
    if by_shape:
        print("load phase by background shape (mean over the shape's cells):")
        for (model, shape), rs in sorted(by_shape.items()):
            print(summary(f"  {model}: {shape}", rs))
    if missing:
        shown = ", ".join("/".join(k) for k in missing[:3])
        print(f"{len(missing)} cells in one run only (not compared), e.g. {shown}")


if __name__ == "__main__":
    main()
