#!/usr/bin/env python3
"""Turns one run of the criterion suite (benches/ratecell.rs) and of the
resident-memory probe (examples/rss.rs) into one Markdown table, with the
Rust goals of issue 22 checked against it.

Reads `<criterion>/**/new/{benchmark,estimates}.json` written since
`--since` (so a table never mixes runs), the probe's JSON lines, and the
`ratecell-bench-note:` lines of the bench log. Standard library only.
"""

import argparse
import json
import os
import sys

GOVERNOR = "governor"


def load_cases(root, since):
    cases = {}
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
            continue
        est_path = os.path.join(dirpath, "estimates.json")
        if os.path.getmtime(est_path) < since:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        with open(est_path) as f:
            est = json.load(f)
        elements = (bench.get("throughput") or {}).get("Elements", 1)
        # The median of the per-sample means: robust to the other tenants of
        # a shared machine stealing a sample now and then.
        ns = est["median"]["point_estimate"] / elements
        cases[bench["full_id"]] = {
            "group": bench["group_id"],
            "case": bench["function_id"],
            "ns": ns,
            "elements": elements,
        }
    return cases


def peer(cases, group, names):
    for name in names:
        case = cases.get(f"{group}/{name}")
        if case:
            return case
    return None


def thread_shape(case):
    """The peer shape of a threads case: the direct limiter's one shared
    state is the same key."""
    table, shape = case.split("/", 1)
    if table == "bare_counted":
        return None
    if table == "ratecell_direct":
        return {"1_thread": "1_thread_same_key", "2_threads": "2_threads_same_key"}[shape]
    return shape


def governor_peer(cases, group, case):
    if group.startswith("direct_"):
        return peer(cases, group, ["governor/tsc"])
    if group.startswith("keyed_"):
        kind = case.rsplit("/", 1)[-1]
        return peer(cases, group, [f"governor/{kind}"])
    if group == "threads":
        shape = thread_shape(case)
        return shape and peer(cases, group, [f"governor/{shape}"])
    return None


def bare_peer(cases, group, case):
    if group.startswith("direct_"):
        # The two-word states are one 16-byte CAS; GCRA, leaky bucket and
        # the latched multi-word states (and governor) one 8-byte CAS.
        wide = case.split("/")[1:2] in (["token_bucket"], ["fixed_window"], ["sliding_window"])
        names = ["bare/cas_u128" if wide else "bare/cas_u64", "bare/cas_u64"]
        return peer(cases, "direct_allowed", names)
    if group.startswith("keyed_"):
        kind = case.rsplit("/", 1)[-1]
        return peer(cases, group, [f"bare/{kind}"])
    if group == "batch_1M":
        return peer(cases, group, ["bare/u64"])
    if group == "threads":
        shape = thread_shape(case)
        return shape and peer(cases, group, [f"bare/{shape}"])
    return None


def ratio(a, b):
    if a is None or b is None or b["ns"] == 0:
        return None
    return a["ns"] / b["ns"]


def fmt_ratio(r):
    return "" if r is None else f"{r:.2f}×"


GROUP_ORDER = [
    "direct_allowed",
    "direct_denied",
    "keyed_1",
    "keyed_1k",
    "keyed_1M",
    "batch_1M",
    "threads",
]


def thread_note(cases, c):
    threads = c["elements"]
    table = c["case"].split("/", 1)[0]
    same = "same_key" in c["case"]
    one = cases.get(f"threads/{table}/1_thread{'_same_key' if same else ''}")
    mops = 1e3 / c["ns"]
    note = f"{threads} thread{'s' if threads > 1 else ''}: {c['ns'] * threads:.1f} ns per check per thread, {mops:.1f} M checks/s in all"
    if one and threads > 1:
        note += f", {one['ns'] / c['ns']:.2f}× one thread's throughput"
    return note


def tsc_clocked_u64(case):
    """A ratecell keyed case over u64 keys that reads the TSC per check."""
    parts = case.split("/")
    return (
        len(parts) == 3
        and parts[0] == "ratecell"
        and parts[2] == "u64"
        and not parts[1].endswith(("_at", "_coarse"))
    )


def print_speed(cases):
    print("| group | case | ns/op | vs governor | vs bare | notes |")
    print("|---|---|---:|---:|---:|---|")
    groups = sorted(
        {c["group"] for c in cases.values()},
        key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else 99, g),
    )
    for group in groups:
        rows = sorted(
            (c for c in cases.values() if c["group"] == group),
            key=lambda c: (
                c["case"].split("/")[0] != GOVERNOR,
                c["case"].startswith("bare"),
                c["case"],
            ),
        )
        for c in rows:
            own_peer = c["case"].startswith(GOVERNOR) or c["case"].startswith("bare")
            gov = None if own_peer else ratio(c, governor_peer(cases, group, c["case"]))
            bare = None if c["case"].startswith("bare") else ratio(
                c, bare_peer(cases, group, c["case"])
            )
            note = thread_note(cases, c) if group == "threads" else ""
            if group.startswith("keyed_") and tsc_clocked_u64(c["case"]):
                floor = ratio(c, cases.get(f"{group}/bare/u64_prefetch_tsc"))
                if floor is not None:
                    note = f"{floor:.2f}× bare/u64_prefetch_tsc (the bare table with a TSC read)"
            if group == "batch_1M" and c["elements"] > 1:
                note = f"per key, in chunks of {c['elements']}"
            print(
                f"| {group} | {c['case']} | {c['ns']:.1f} | {fmt_ratio(gov)} | {fmt_ratio(bare)} | {note} |"
            )


def load_rss(path):
    rows = []
    if not path or not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def print_memory(rows):
    if not rows:
        print("(no resident-memory run)")
        return
    print("| limiter / keys | keys checked | keys holding state | resident bytes per key | allocated bytes per key (own stats) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        alloc = f"{r['allocated_per_key']:.1f}" if r["allocated_per_key"] else ""
        print(
            f"| {r['case']} | {r['keys']} | {r['tracked']} | {r['bytes_per_key']:.1f} | {alloc} |"
        )


def goal(results, name, value, target, le=True, unit="×"):
    if value is None:
        results.append((name, "not measured in this run", "?"))
        return
    met = value <= target if le else value >= target
    sign = "≤" if le else "≥"
    results.append(
        (name, f"{value:.2f}{unit} (goal {sign} {target}{unit})", "met" if met else "MISSED")
    )


def print_goals(cases, rss):
    """Issue 22's Rust goals, each against governor in the same run, with
    the floor of the path beside it where one bounds the goal."""
    g = lambda full: cases.get(full)  # noqa: E731
    results = []

    def floor_note(peer_case, floor, what):
        peer, bottom = g(peer_case), g(floor)
        if peer and bottom:
            name, value, status = results[-1]
            results[-1] = (
                name,
                f"{value}; {what} {bottom['ns']:.1f} ns = {bottom['ns'] / peer['ns']:.2f}× governor",
                status,
            )

    gov = "direct_allowed/governor/tsc"
    # allow() answers what governor's check() answers (yes or no);
    # check(1) also computes remaining, retry and reset.
    for call, case, target in (("check(1)", "tsc", 1.0), ("allow()", "tsc_allow", 0.95)):
        goal(
            results,
            f"direct {call}, TSC clock, vs governor check",
            ratio(g(f"direct_allowed/ratecell/gcra/{case}"), g(gov)),
            target,
        )
        floor_note(gov, "direct_allowed/bare/tsc_then_cas_u64", "floor (TSC read + CAS)")
    goal(
        results,
        "keyed 1k (u64), TSC clock, vs governor keyed",
        ratio(g("keyed_1k/ratecell/gcra/u64"), g("keyed_1k/governor/u64")),
        0.8,
    )
    floor_note(
        "keyed_1k/governor/u64",
        "keyed_1k/floor/sip_gcra/u64",
        "floor (SipHash + TSC read + GCRA + CAS)",
    )
    goal(
        results,
        "keyed 1M (u64) vs governor keyed (on every run)",
        ratio(g("keyed_1M/ratecell/gcra/u64"), g("keyed_1M/governor/u64")),
        0.4,
    )
    floor_note(
        "keyed_1M/governor/u64",
        "keyed_1M/floor/sip_gcra/u64",
        "floor (SipHash + TSC read + GCRA + CAS)",
    )
    floor_note("keyed_1M/governor/u64", "keyed_1M/bare/u64_latency", "memory latency")
    single = ["gcra", "leaky_bucket", "token_bucket", "fixed_window", "sliding_window"]
    worst = [r["bytes_per_key"] for r in rss if r["case"].split("/", 1)[1] in single]
    goal(
        results,
        "bytes per key at 1M keys, single-cell algorithms (worst; keep 23)",
        max(worst) if worst else None,
        24,
        unit=" B",
    )
    print("| goal | measured | status |")
    print("|---|---|---|")
    for name, value, status in results:
        print(f"| {name} | {value} | {status} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--criterion", required=True, help="criterion's output directory")
    ap.add_argument("--since", type=float, default=0, help="ignore results older (epoch s)")
    ap.add_argument("--rss", help="examples/rss output (JSON lines)")
    ap.add_argument("--log", help="bench log with ratecell-bench-note lines")
    args = ap.parse_args()

    cases = load_cases(args.criterion, args.since)
    if not cases:
        sys.exit(f"no criterion results under {args.criterion} since {args.since}")
    rss = load_rss(args.rss)

    print("### Time per check (median; ratios within this run)\n")
    print(
        "ns/op is CPU time of the benchmark thread for every group but `threads`,"
        " whose cases are wall-clock time over all checks made by all threads.\n"
    )
    print_speed(cases)
    print("\n### Resident memory at 1M keys (fresh process per row)\n")
    print_memory(rss)
    print("\n### Goals (issue 22, Rust)\n")
    print_goals(cases, rss)
    if args.log and os.path.exists(args.log):
        with open(args.log, errors="replace") as f:
            notes = [l.split("ratecell-bench-note: ", 1)[1].rstrip() for l in f if "ratecell-bench-note: " in l]
        if notes:
            print("\n### Notes from the run\n")
            for n in notes:
                print(f"- {n}")


if __name__ == "__main__":
    main()
