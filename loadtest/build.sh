#!/usr/bin/env bash
# Cold builds, from an empty target directory each, with nothing else building: how many
# crates and how long. The service alone (the `cargo install` path), the README's first
# command, and the library's own tests; BEFORE (a commit) is built the same way for the
# one-crate layout's command.
#
#   bash loadtest/build.sh                 # BEFORE=2d73534 (the last one-crate commit)
#   BEFORE= bash loadtest/build.sh         # this tree only
#
# Prints one line per build: what, crates compiled, wall seconds. Takes ~30 minutes on
# two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${BEFORE-2d73534}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/before" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# build NAME DIR CARGO-ARGS...: a cold build in DIR with its own empty target directory.
build() {
  local name=$1 dir=$2; shift 2
  local slug
  slug=$(echo "$name" | tr -c 'a-z0-9\n' '-' | cut -c1-48)
  local target="$work/target-$slug" log="$work/$slug.log"
  local start end
  start=$(date +%s.%N)
  (cd "$dir" && CARGO_TARGET_DIR="$target" cargo "$@" 2>"$log") || {
    tail -20 "$log" >&2; exit 1; }
  end=$(date +%s.%N)
  local crates
  crates=$(grep -c '^ *Compiling ' "$log" || true)
  printf '%-44s %5d crates %7.1f s\n' "$name" "$crates" "$(echo "$end - $start" | bc)"
  rm -rf "$target"
  mkdir -p loadtest/results && cp "$log" "loadtest/results/build-$slug.log"
}

cargo fetch >/dev/null 2>&1
if [ -n "$BEFORE" ]; then
  git worktree add --detach "$work/before" "$BEFORE" >/dev/null 2>&1
  (cd "$work/before" && cargo fetch >/dev/null 2>&1)
  build "before: build --release --example gateway" "$work/before" build --release --example gateway
fi
build "after: build --release -p tollgate-server --bin tollgate (cargo install)" . build --release -p tollgate-server --bin tollgate
build "after: test -p tollgate --no-run (the library's tests)" . test -p tollgate --no-run
# What the library's tests build of the service's stack (expected: none of tonic, prost,
# the Prometheus exporter; hyper's server half is there, for the layer's tests over real
# sockets with axum::serve and hyper's own server).
for crate in tonic prost metrics-exporter-prometheus tollgate-server hyper-util; do
  if grep -q "^ *Compiling $crate v" loadtest/results/build-after--test--p-tollgate---no-run--the-library-*.log; then
    echo "the library's tests compile $crate"
  else
    echo "the library's tests do not compile $crate"
  fi
done
