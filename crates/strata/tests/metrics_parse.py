#!/usr/bin/python3
"""Checks a Prometheus text exposition with the Prometheus client's own parser.

Reads the text of `GET /metrics` on stdin and parses it with
prometheus_client.parser.text_string_to_metric_families (Debian package
python3-prometheus-client), so that a format error fails here as it would in
a Prometheus server. Then checks the conventions strata promises:

- every counter is declared (# TYPE) with a name ending in _total;
- every histogram series has buckets in increasing `le` order ending in +Inf,
  cumulative (never decreasing) counts, and an +Inf bucket equal to _count;
- no sample name appears twice with the same labels.

Prints every sample as JSON ({"sample name": [[labels, value], ...]}) on
stdout for the caller to check values; on a violation prints what is wrong
on stderr and exits 1. Run by crates/strata/tests/cli/serve.rs
(exposition_counts_a_known_workload_exactly).
"""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    problems = []
    samples = {}
    seen = set()
    # The parser names counter samples ..._total whatever the text says:
    # check the declared names.
    for line in text.splitlines():
        parts = line.split()
        if parts[:2] == ["#", "TYPE"] and len(parts) == 4 and parts[3] == "counter":
            if not parts[2].endswith("_total"):
                problems.append(f"counter {parts[2]} does not end in _total")
    for family in text_string_to_metric_families(text):
        histograms = {}
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                problems.append(f"duplicate sample {key}")
            seen.add(key)
            samples.setdefault(s.name, []).append([s.labels, s.value])
            if family.type == "histogram":
                series = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                h = histograms.setdefault(series, {"buckets": [], "count": None})
                if s.name == family.name + "_bucket":
                    h["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name == family.name + "_count":
                    h["count"] = s.value
        for series, h in histograms.items():
            where = f"{family.name}{dict(series)}"
            bounds = [b for b, _ in h["buckets"]]
            counts = [c for _, c in h["buckets"]]
            if not bounds or bounds[-1] != math.inf:
                problems.append(f"{where}: no +Inf bucket")
                continue
            if bounds != sorted(set(bounds)):
                problems.append(f"{where}: bucket bounds out of order: {bounds}")
            if any(a > b for a, b in zip(counts, counts[1:])):
                problems.append(f"{where}: buckets not cumulative: {counts}")
            if counts[-1] != h["count"]:
                problems.append(f"{where}: +Inf bucket {counts[-1]} != _count {h['count']}")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        sys.exit(1)
    json.dump(samples, sys.stdout)


if __name__ == "__main__":
    main()
