#!/usr/bin/env python3
"""Turns the output of `clembed bench --json` into the Markdown table of
docs/performance.md: one row per bench row, one cell per run ("run 1 / run 2").

    ./build/clembed bench --reps 15 --ceiling --json > run1.jsonl
    ./build/clembed bench --reps 15 --ceiling --json > run2.jsonl
    python3 tools/bench/perf_table.py run1.jsonl run2.jsonl     # or: ... --json | perf_table.py

Columns: median ms, GB/s of the counted bytes, the ratio to the device's
fastest copy, the ratio to the C ceiling (with --ceiling; "-" where a row has
none) and, for the rows with the table in several buffers, the split's speed
over one buffer. The one-token latency row gives its time in copy round trips.
Standard library only; lines that are not JSON objects are ignored.
"""
import json
import sys


def read_run(stream):
    reference, rows = None, []
    for line in stream:
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "reference" in obj:
            reference = obj
        elif "operation" in obj:
            rows.append(obj)
    return reference, rows


def fmt(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def cells(runs, name, key, digits=2):
    values = []
    for _, rows in runs:
        row = rows.get(name)
        values.append(fmt(row.get(key) if row else None, digits))
    return " / ".join(values)


def main(argv):
    paths = argv[1:] or ["-"]
    if any(p in ("-h", "--help") for p in paths):
        print(__doc__)
        return 0
    runs, order = [], []
    for p in paths:
        with (sys.stdin if p == "-" else open(p, encoding="utf-8")) as f:
            reference, rows = read_run(f)
        runs.append((reference, {r["operation"]: r for r in rows}))
        for r in rows:
            if r["operation"] not in order:
                order.append(r["operation"])
    for k, (ref, _) in enumerate(runs, 1):
        if ref:
            print(f"Run {k}: {ref['device']}; reference {ref['reference']} at {ref['reference_gb_per_s']:.1f} GB/s; "
                  f"largest cache {ref['cache_bytes'] / 2**20:.0f} MiB from {ref['cache_source']}"
                  + (f"; C ceiling {ref['ceiling']}" if ref.get("ceiling") else "") + ".")
    print()
    with_ceiling = any("ceiling_ratio" in r for _, rows in runs for r in rows.values())
    with_split = any("vs_one_buffer" in r for _, rows in runs for r in rows.values())
    head = ["operation", "ms", "GB/s", "of the copy"] + (["of C"] if with_ceiling else []) + \
           (["split over one buffer"] if with_split else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in order:
        latency = any(name in rows and "round_trips" in rows[name] for _, rows in runs)
        ratio = cells(runs, name, "round_trips") + " round trips" if latency else cells(runs, name, "copy_ratio")
        line = [name, cells(runs, name, "median_ms", 3), cells(runs, name, "gb_per_s", 1), ratio]
        if with_ceiling:
            line.append(cells(runs, name, "ceiling_ratio"))
        if with_split:
            line.append(cells(runs, name, "vs_one_buffer"))
        print("| " + " | ".join(line) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
