#!/usr/bin/env python3
"""Per-request exclusive instruction counts from two callgrind dumps (loadtest/overhead.sh).

    python3 loadtest/profile.py SMALL LARGE N [TOP] [--minus BASE_SMALL BASE_LARGE]

SMALL and LARGE are callgrind outputs of the same server after N and 2N requests; the
difference over N is one request's cost per function, constants subtracted. With --minus,
another pair's per-request figures (e.g. bare axum's) are subtracted function by function,
leaving what a limiter adds. Prints the cost by crate, then the TOP functions.
"""
import collections
import re
import subprocess
import sys

LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S+?):(.*) \[(.*)\]$")


def load(path):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
        capture_output=True, text=True, check=True,
    ).stdout
    costs = collections.Counter()
    total = 0
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        match = LINE.match(line)
        if match:
            costs[(match.group(3), match.group(4))] += int(match.group(1).replace(",", ""))
    return costs, total


def per_request(small, large, n):
    (a, a_total), (b, b_total) = load(small), load(large)
    costs = {key: (b[key] - a[key]) / n for key in set(a) | set(b)}
    # callgrind_annotate also lists a thread's entry points with (close to) the whole
    # program's cost as their own: not functions doing work.
    whole = (b_total - a_total) / n
    return {key: cost for key, cost in costs.items() if abs(cost) < 0.5 * whole}


def crate(name, obj):
    if "libc.so" in obj or "ld-linux" in obj:
        if re.search(r"malloc|free|memcpy|memmove|memset|realloc|calloc", name):
            return "libc: allocation and copies"
        return "libc: system calls and the rest"
    name = re.sub(r"^(core::ptr::drop_in_place<)?[<&]*(mut |dyn )?", "", name)
    return name.split("::")[0]


def main():
    args = sys.argv[1:]
    base = None
    if "--minus" in args:
        at = args.index("--minus")
        base = args[at + 1:at + 3]
        args = args[:at]
    small, large, n = args[0], args[1], int(args[2])
    top = int(args[3]) if len(args) > 3 else 25
    costs = per_request(small, large, n)
    if base:
        minus = per_request(base[0], base[1], n)
        costs = {k: costs.get(k, 0) - minus.get(k, 0) for k in set(costs) | set(minus)}
    total = sum(costs.values())
    print(f"   {total:9.0f}  instructions per request{' (difference)' if base else ''}")
    groups = collections.Counter()
    for (name, obj), cost in costs.items():
        groups[crate(name, obj)] += cost
    print("   by crate:")
    for group, cost in sorted(groups.items(), key=lambda kv: -abs(kv[1]))[:12]:
        print(f"   {cost:9.0f}  {group}")
    print("   by function:")
    for (name, _), cost in sorted(costs.items(), key=lambda kv: -abs(kv[1]))[:top]:
        print(f"   {cost:9.0f}  {name[:120]}")


if __name__ == "__main__":
    main()
