#!/usr/bin/env bash
# Runs every fuzz target for a bounded time, from the project root or anywhere:
#
#   bash fuzz/run.sh            # 60 s per target
#   SECONDS_PER_TARGET=600 bash fuzz/run.sh config route
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). With only a stable toolchain, libFuzzer's
# instrumentation flags are unlocked with RUSTC_BOOTSTRAP=1 (nightly needs nothing). No
# sanitizer: tollgate forbids unsafe code (Cargo.toml lints), so coverage and panics are
# what matter.
# Each run starts from the committed seeds (fuzz/seeds/<target>) and the working corpus
# (fuzz/corpus/<target>, not committed). A crash (or timeout, or out-of-memory) is copied to
# fuzz/regressions/<target>/, which `cargo test` replays on stable: commit it with the fix
# (`cargo fuzz tmin <target> <file>` shrinks it first).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${SECONDS_PER_TARGET:-60}"
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(config rate route forwarded)
command -v cargo-fuzz >/dev/null 2>&1 || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 2; }
if ! rustc --version | grep -q nightly; then export RUSTC_BOOTSTRAP=1; fi

status=0
for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target"
  echo "== $target: ${seconds}s"
  set +e
  cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -dict="fuzz/dicts/$target.dict" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 >"fuzz/$target.log" 2>&1
  code=$?
  set -e
  grep -E "^Done [0-9]+ runs|^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ +DONE" "fuzz/$target.log" || true
  if find "fuzz/artifacts/$target" -type f 2>/dev/null | grep -q .; then
    mkdir -p "fuzz/regressions/$target"
    for artifact in "fuzz/artifacts/$target"/*-*; do
      cp "$artifact" "fuzz/regressions/$target/"
      echo "FINDING $target: $artifact (copied to fuzz/regressions/$target/)"
    done
    status=1
  elif [ "$code" -ne 0 ]; then
    echo "FAILED $target (exit $code): see fuzz/$target.log" >&2
    status=1
  fi
done
exit "$status"
