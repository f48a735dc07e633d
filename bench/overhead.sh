#!/usr/bin/env bash
# What tollgate costs on the request path, beside what people would use instead, in one run:
# the table of issue 23 (BENCHMARKS.md, "Overhead against tower_governor and nginx").
#
#   bash bench/overhead.sh                  # everything, ~15 minutes
#   PARTS="layer" bash bench/overhead.sh    # only the callgrind rows (~5 minutes)
#
# PARTS (default "layer gateway decision") picks the parts:
#
# - layer: instructions per request under callgrind (bench/axum.sh, MEASURE=instructions)
#   for bare axum "hello", behind tollgate (IETF headers; headers = "none") and behind
#   tower_governor (built in the same run, from the same Cargo.lock), never and mostly
#   denying; each limiter's cost is its count minus bare's.
# - gateway: the example gateway beside Debian's nginx `limit_req` in front of the same
#   upstream (bench/gateway.sh): proxy CPU time per request (user + system from
#   /proc/<pid>/stat, which leaves out time stolen by the hypervisor), never and mostly
#   denying. The steal the whole machine saw during that part is printed beside it.
# - decision: criterion, the whole per-request decision at 100,000 and 1,000,000 live
#   clients beside governor's keyed `check_key` (benches/decision.rs).
#
# ROUNDS, DURATION, CONNECTIONS and REQUESTS go to the scripts above. Needs valgrind, wrk,
# nginx and taskset (apt-get install -y valgrind wrk nginx util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS=${PARTS:-layer gateway decision}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

steal_ticks() { awk '/^cpu / { print $9 }' /proc/stat; }
all_ticks() { awk '/^cpu / { s = 0; for (i = 2; i <= NF; i++) s += $i; print s }' /proc/stat; }

if [[ $PARTS == *layer* ]]; then
  echo "== layer: callgrind, instructions per request (bench/axum.sh)"
  MEASURE=instructions \
    VARIANTS="bare never,tollgate never,tollgate-no-headers never,governor never,tollgate deny,governor deny" \
    bash bench/axum.sh | tee "$out/layer"
fi

if [[ $PARTS == *gateway* ]]; then
  echo
  echo "== gateway: CPU per request beside nginx limit_req (bench/gateway.sh)"
  steal0=$(steal_ticks); all0=$(all_ticks)
  bash bench/gateway.sh | tee "$out/gateway"
  steal1=$(steal_ticks); all1=$(all_ticks)
  awk -v s=$((steal1 - steal0)) -v a=$((all1 - all0)) \
    'BEGIN { printf "   steal during the gateway part: %.1f%% of all CPU time (not in the per-process figures)\n", a ? 100 * s / a : 0 }' \
    | tee -a "$out/gateway"
fi

if [[ $PARTS == *decision* ]]; then
  echo
  echo "== decision: criterion, 100,000 and 1,000,000 live clients (benches/decision.rs)"
  cargo bench --bench decision -- \
    "^(decision/rules=10/clients=(100000|1000000)|governor/clients=(100000|1000000))$" 2>&1 \
    | grep -E "^(decision|governor)/|time:" | tee "$out/decision"
fi

# The summary table.
added() { awk -v n="$1" '$1 == n { print $3 }' "$out/layer" | tr -d '+'; }
cpu() { # scenario, proxy
  awk -v s="$1" -v p="$2" '/^== / { in_s = ($2 == s) } in_s && $1 == p && /CPU/ { for (i = 1; i <= NF; i++) if ($i == "CPU") print $(i + 1) }' "$out/gateway"
}
median_ns() { # criterion id -> median in ns
  awk -v id="$1" '$1 == id { want = 1 } want && /time:/ {
      for (i = 1; i <= NF; i++) if ($i == "time:") break
      v = $(i + 3); u = $(i + 4); gsub(/[^0-9.]/, "", v)
      if (u ~ /^µs/ || u ~ /^us/) v *= 1000; else if (u ~ /^ms/) v *= 1e6
      print v; exit }' "$out/decision"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f×", a / b }'; }

echo
echo "== summary (this run)"
echo "| measure | tollgate | anchor | ratio |"
echo "|---|---|---|---|"
if [ -f "$out/layer" ]; then
  t=$(added tollgate); n=$(added tollgate-no-headers); g=$(added governor)
  td=$(added tollgate-denying); gd=$(added governor-denying)
  echo "| instructions added per admitted request, IETF headers on | +$t | tower_governor +$g | $(ratio "$t" "$g") |"
  echo "| the same, \`headers = \"none\"\` | +$n | tower_governor +$g | $(ratio "$n" "$g") |"
  echo "| instructions added per denied request | +$td | tower_governor +$gd | $(ratio "$td" "$gd") |"
fi
if [ -f "$out/gateway" ]; then
  gn=$(cpu never-denying gateway); nn=$(cpu never-denying nginx)
  gm=$(cpu mostly-denying gateway); nm=$(cpu mostly-denying nginx)
  echo "| gateway CPU per request, never denying | $gn µs | nginx \`limit_req\` $nn µs | $(ratio "$gn" "$nn") |"
  echo "| gateway CPU per request, mostly denying | $gm µs | nginx $nm µs | $(ratio "$gm" "$nm") |"
fi
if [ -f "$out/decision" ]; then
  t1=$(median_ns "decision/rules=10/clients=100000"); g1=$(median_ns "governor/clients=100000")
  t2=$(median_ns "decision/rules=10/clients=1000000"); g2=$(median_ns "governor/clients=1000000")
  echo "| decision at 100k / 1M live clients (criterion) | $t1 / $t2 ns | governor \`check_key\` $g1 / $g2 ns | $(ratio "$t1" "$g1") / $(ratio "$t2" "$g2") |"
fi
