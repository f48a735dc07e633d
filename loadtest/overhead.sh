#!/usr/bin/env bash
# What tollgate costs on the request path, beside what people would use instead, in one run:
# the table of issues 23 and 39 (BENCHMARKS.md, "Round two against nginx and
# tower_governor").
#
#   bash loadtest/overhead.sh                  # everything, ~15 minutes
#   PARTS="layer" bash loadtest/overhead.sh    # only the callgrind rows (~5 minutes)
#
# PARTS (default "layer gateway decision"; add "profile" and "contention") picks the parts;
# the guard at the end compares the layer and profile rows with the figures BENCHMARKS.md
# records ("Regression guard") and exits 3 if one is more than GUARD_PERCENT (3) % worse:
#
# - layer: instructions per request under callgrind (loadtest/axum.sh, MEASURE=instructions)
#   for bare axum "hello", behind tollgate (IETF headers; headers = "none") and behind
#   tower_governor (with its headers, `use_headers`, and bare; built in the same run, from
#   the same Cargo.lock), never and mostly denying; each limiter's cost is its count minus
#   bare's.
# - gateway: the gateway (the service binary, `target/release/tollgate`) beside Debian's nginx `limit_req` in front of the same
#   upstream (server/loadtest/gateway.sh): proxy CPU time per request (user + system from
#   /proc/<pid>/stat, which leaves out time stolen by the hypervisor), never and mostly
#   denying (HTTP/2 clients: server/loadtest/h2.sh). The steal the whole machine saw
#   during that part is printed beside it.
# - profile: the gateway under callgrind proxying to nginx, instructions per proxied request
#   (over HTTP/1.1, then over h2c with h2load if it is installed) by crate and by function
#   (loadtest/profile.py; KEEP=dir keeps the callgrind files).
# - decision: criterion, the whole per-request decision at 1, 100,000 and 1,000,000 live
#   clients beside governor's keyed `check_key` (benches/decision.rs); the store's part is
#   each side's figure minus its one-client figure.
# - contention: threads on one key and on many, tollgate beside governor
#   (benches/contention.rs), printed as it runs.
#
# ROUNDS, DURATION, CONNECTIONS and REQUESTS go to the scripts above; GATEWAY_BIN (profile
# part) measures another build of the service instead of building this one, and
# PROFILE_TOML adds tables to the profiled gateway's config (e.g. a [telemetry] table).
# Needs valgrind, wrk, nginx and taskset (apt-get install -y valgrind wrk nginx util-linux);
# h2load for the HTTP/2 rows (apt-get install -y nghttp2-client), skipped without it.
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS=${PARTS:-layer gateway decision}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

steal_ticks() { awk '/^cpu / { print $9 }' /proc/stat; }
all_ticks() { awk '/^cpu / { s = 0; for (i = 2; i <= NF; i++) s += $i; print s }' /proc/stat; }

if [[ $PARTS == *layer* ]]; then
  echo "== layer: callgrind, instructions per request (loadtest/axum.sh)"
  keep=${KEEP:-$out/callgrind}
  MEASURE=instructions KEEP="$keep" \
    VARIANTS="bare never,tollgate never,tollgate-no-headers never,governor never,governor-headers never,tollgate deny,governor deny" \
    bash loadtest/axum.sh | tee "$out/layer"
  if command -v python3 >/dev/null; then
    r=${REQUESTS:-5000}
    for variant in tollgate tollgate-no-headers governor; do
      echo
      echo "== layer: what $variant adds over bare axum, by function (loadtest/profile.py)"
      python3 loadtest/profile.py "$keep/callgrind.$variant.$r" "$keep/callgrind.$variant.$((2 * r))" "$r" 20 \
        --minus "$keep/callgrind.bare.$r" "$keep/callgrind.bare.$((2 * r))"
    done
  fi
fi

if [[ $PARTS == *gateway* ]]; then
  echo
  echo "== gateway: CPU per request beside nginx limit_req (server/loadtest/gateway.sh)"
  steal0=$(steal_ticks); all0=$(all_ticks)
  bash server/loadtest/gateway.sh | tee "$out/gateway"
  steal1=$(steal_ticks); all1=$(all_ticks)
  awk -v s=$((steal1 - steal0)) -v a=$((all1 - all0)) \
    'BEGIN { printf "   steal during the gateway part: %.1f%% of all CPU time (not in the per-process figures)\n", a ? 100 * s / a : 0 }' \
    | tee -a "$out/gateway"
fi

if [[ $PARTS == *profile* ]]; then
  # Where a proxied request's instructions go: the gateway under callgrind, one worker
  # thread, an nginx upstream, N then 2N requests over one keep-alive connection.
  echo
  echo "== profile: the gateway proxying, instructions per request by crate (callgrind)"
  command -v python3 >/dev/null || { echo "the profile part needs python3" >&2; exit 1; }
  # GATEWAY_BIN profiles another build (an earlier commit's, for a before/after pair).
  gateway_bin=${GATEWAY_BIN:-target/release/tollgate}
  [ -n "${GATEWAY_BIN:-}" ] || cargo build --release -p tollgate-server --bin tollgate
  cargo build --release --example bench_hello
  source loadtest/lib.sh
  trap 'cleanup_pids; rm -rf "$out"' EXIT
  mkdir -p "$out/nginx"
  cat > "$out/nginx/upstream.conf" <<CONF
daemon off; master_process off; worker_processes 1; user root;
pid $out/nginx/pid; error_log $out/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; client_body_temp_path $out/nginx/b; proxy_temp_path $out/nginx/p;
  fastcgi_temp_path $out/nginx/f; uwsgi_temp_path $out/nginx/u; scgi_temp_path $out/nginx/s;
  server { listen 127.0.0.1:18081; keepalive_requests 1000000;
           location / { return 200 'hello from the upstream\n'; } }
}
CONF
  nginx -c "$out/nginx/upstream.conf" &
  pids+=($!)
  wait_port 18081
  printf '[limits]\n"/" = "1000000/s"\n%b' "${PROFILE_TOML:-}" > "$out/profile.toml"
  n=${PROFILE_REQUESTS:-2000}
  # The gateway under callgrind, warmed with 200 requests, counters zeroed, N then 2N
  # requests sent by `load COUNT`, dumped to $out/NAME.COUNT; then the per-request profile.
  profile_gateway() { # name, load function
    local name=$1 load=$2 count gateway
    for count in "$n" $((2 * n)); do
      TOKIO_WORKER_THREADS=1 RUST_LOG=warn valgrind --tool=callgrind \
        --callgrind-out-file="$out/$name.$count" "$gateway_bin" \
        --config "$out/profile.toml" --listen 127.0.0.1:18083 --admin 127.0.0.1:18084 \
        --upstream http://127.0.0.1:18081 2>/dev/null &
      gateway=$!
      pids+=("$gateway")
      wait_port 18083 600
      "$load" 200 >/dev/null
      callgrind_control --zero "$gateway" >/dev/null 2>&1
      "$load" "$count"
      callgrind_control --dump "$gateway" >/dev/null 2>&1
      kill -TERM "$gateway"; wait "$gateway" 2>/dev/null || true
    done
    python3 loadtest/profile.py "$out/$name.$n.1" "$out/$name.$((2 * n)).1" "$n" 20
  }
  http1_load() { target/release/examples/bench_hello load --target 127.0.0.1:18083 --requests "$1" 2>/dev/null; }
  # HTTP/2 without TLS (prior knowledge): one connection, one stream at a time.
  h2c_load() { h2load -n "$1" -c 1 -m 1 http://127.0.0.1:18083/ | grep '^status codes'; }
  # (Not in a pipeline: the function adds to `pids`, which a subshell would lose.)
  profile_gateway gateway http1_load > "$out/profile"
  cat "$out/profile"
  # The same over h2c; the upstream is still spoken to in HTTP/1.1.
  if command -v h2load >/dev/null; then
    echo
    echo "== profile: the same over h2c (h2load, one connection, one stream at a time)"
    profile_gateway gateway-h2c h2c_load > "$out/profile-h2c"
    cat "$out/profile-h2c"
  else
    echo "   no h2load (apt-get install -y nghttp2-client): the h2c profile is skipped"
  fi
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out"/gateway*.1 "$KEEP/"; }
fi

if [[ $PARTS == *decision* ]]; then
  echo
  echo "== decision: criterion, 100,000 and 1,000,000 live clients (benches/decision.rs)"
  # One invocation per side, alternating for ROUNDS rounds, so both sides see the same
  # drift of this shared machine; the summary takes each side's median over the rounds.
  cargo bench --bench decision --no-run 2>&1 | tail -1
  : > "$out/decision"
  for round in $(seq "${ROUNDS:-3}"); do
    for side in "decision/rules=10/clients=(1|100000|1000000)" "governor/clients=(1|100000|1000000)"; do
      cargo bench --bench decision -- "^$side\$" --warm-up-time 2 --measurement-time 4 2>&1 \
        | grep -E "^(decision|governor)/|time:" | tee -a "$out/decision"
    done
  done
fi

if [[ $PARTS == *contention* ]]; then
  echo
  echo "== contention: threads on one key and on many (benches/contention.rs)"
  cargo bench --bench contention 2>&1 | grep -E "^(contention|\|)" | tee "$out/contention"
fi

# The summary table.
source loadtest/lib.sh
added() { awk -v n="$1" '$1 == n { print $3 }' "$out/layer" | tr -d '+'; }
cpu() { # scenario, proxy
  awk -v s="$1" -v p="$2" '/^== / { in_s = ($2 == s) } in_s && $1 == p && /CPU/ { for (i = 1; i <= NF; i++) if ($i == "CPU") print $(i + 1) }' "$out/gateway"
}
median_ns() { # criterion id -> the median over rounds of its per-round median, in ns
  awk -v id="$1" '$1 == id { want = 1 } want && /time:/ {
      for (i = 1; i <= NF; i++) if ($i == "time:") break
      v = $(i + 3); u = $(i + 4); gsub(/[^0-9.]/, "", v)
      if (u ~ /^µs/ || u ~ /^us/) v *= 1000; else if (u ~ /^ms/) v *= 1e6
      print v; want = 0 }' "$out/decision" | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f×", a / b }'; }

echo
echo "== summary (this run)"
echo "| measure | tollgate | anchor | ratio |"
echo "|---|---|---|---|"
if [ -f "$out/layer" ]; then
  t=$(added tollgate); n=$(added tollgate-no-headers); g=$(added governor)
  gh=$(added governor-headers)
  td=$(added tollgate-denying); gd=$(added governor-denying)
  echo "| instructions added per admitted request, rate-limit headers on both sides | +$t | tower_governor \`use_headers\` +$gh | $(ratio "$t" "$gh") |"
  echo "| the same, bare (\`headers = \"none\"\`) | +$n | tower_governor +$g | $(ratio "$n" "$g") |"
  echo "| instructions added per denied request | +$td | tower_governor +$gd | $(ratio "$td" "$gd") |"
fi
if [ -f "$out/gateway" ]; then
  gn=$(cpu never-denying gateway); nn=$(cpu never-denying nginx)
  gm=$(cpu mostly-denying gateway); nm=$(cpu mostly-denying nginx)
  echo "| gateway CPU per request, never denying | $gn µs | nginx \`limit_req\` $nn µs | $(ratio "$gn" "$nn") |"
  echo "| gateway CPU per request, mostly denying | $gm µs | nginx $nm µs | $(ratio "$gm" "$nm") |"
fi
if [ -f "$out/profile" ]; then
  echo "| gateway instructions per proxied request (callgrind) | $(awk '/instructions per request/ { print $1; exit }' "$out/profile") | | |"
fi
if [ -f "$out/profile-h2c" ]; then
  echo "| the same over h2c | $(awk '/instructions per request/ { print $1; exit }' "$out/profile-h2c") | | |"
fi
if [ -f "$out/decision" ]; then
  t1=$(median_ns "decision/rules=10/clients=100000"); g1=$(median_ns "governor/clients=100000")
  t2=$(median_ns "decision/rules=10/clients=1000000"); g2=$(median_ns "governor/clients=1000000")
  echo "| decision at 100k / 1M live clients (criterion) | $t1 / $t2 ns | governor \`check_key\` $g1 / $g2 ns | $(ratio "$t1" "$g1") / $(ratio "$t2" "$g2") |"
  t0=$(median_ns "decision/rules=10/clients=1"); g0=$(median_ns "governor/clients=1")
  minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
  ts1=$(minus "$t1" "$t0"); gs1=$(minus "$g1" "$g0"); ts2=$(minus "$t2" "$t0"); gs2=$(minus "$g2" "$g0")
  echo "| the store's part: the same minus one live client | +$ts1 / +$ts2 ns | governor +$gs1 / +$gs2 ns | $(ratio "$ts1" "$gs1") / $(ratio "$ts2" "$gs2") |"
fi

# The regression guard: each row measured in this run against the figure BENCHMARKS.md
# records for it (the table between `<!-- guard -->` and `<!-- /guard -->`), flagged when
# it is worse by more than the row's allowance (its third column; GUARD_PERCENT, 3, if none). Instruction counts, not times: run it before
# submitting a change to the request path (PARTS="layer profile"), not in CI.
limit=${GUARD_PERCENT:-3}
echo
echo "== guard: against the figures BENCHMARKS.md records (\"Regression guard\"), each with its allowance"
worse=0
while IFS='|' read -r _ row recorded allowed _; do
  row=$(tr -d ' `' <<<"$row")
  recorded=$(tr -d ' ,' <<<"$recorded")
  allowed=$(tr -d ' %' <<<"$allowed")
  allowed=${allowed:-$limit}
  now=""
  case $row in
    gateway-profile) [ -f "$out/profile" ] && now=$(awk '/instructions per request/ { print $1; exit }' "$out/profile" | tr -d ,) ;;
    gateway-profile-h2c) [ -f "$out/profile-h2c" ] && now=$(awk '/instructions per request/ { print $1; exit }' "$out/profile-h2c" | tr -d ,) ;;
    *) [ -f "$out/layer" ] && now=$(added "$row") ;;
  esac
  [ -n "$now" ] || { echo "   $row: not measured in this run (PARTS)"; continue; }
  verdict=$(awk -v n="$now" -v r="$recorded" -v p="$allowed" \
    'BEGIN { d = 100 * (n - r) / r; printf "%+.1f %%%s", d, (d > p ? "  WORSE" : "") }')
  echo "   $row: $now, recorded $recorded: $verdict"
  [[ $verdict != *WORSE* ]] || worse=1
done < <(awk '/^<!-- guard -->/ { on = 1; next } /^<!-- \/guard -->/ { on = 0 } on && /^\| `/' BENCHMARKS.md)
if [ "$worse" = 1 ]; then
  echo "   a row is worse than recorded by more than it is allowed: find where with KEEP=dir and loadtest/profile.py"
  exit 3
fi

