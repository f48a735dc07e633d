#!/usr/bin/env bash
# Runs fuzz targets for a bounded time each, from the project root or anywhere:
#
#   bash fuzz/run.sh                        # every target in fuzz/targets.toml, 60 s each
#   SECONDS_PER_TARGET=600 JOBS=2 bash fuzz/run.sh resp settle
#   PROFILE=dev SECONDS_PER_TARGET=10 JOBS=2 bash fuzz/run.sh   # what CI runs
#   KEEP_GOING=1 bash fuzz/run.sh disk      # past the first finding (libFuzzer's fork mode)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). With only a stable toolchain,
# libFuzzer's instrumentation flags are unlocked with RUSTC_BOOTSTRAP=1 (nightly needs
# nothing). No sanitizer: tollgate forbids unsafe code (Cargo.toml lints), so coverage and
# panics are what matter. PROFILE=dev builds without optimisation (a quicker build, slower
# inputs: for CI's short runs); the default is cargo-fuzz's release build with debug
# assertions and overflow checks.
#
# The targets are built once, then run JOBS at a time (default 1). Each run starts from
# the committed seeds (fuzz/seeds/<target>) and the working corpus (fuzz/corpus/<target>,
# not committed), with the target's dictionary. A crash (or timeout, or out-of-memory) is
# copied to fuzz/regressions/<target>/, which `cargo test` replays on stable: commit it
# with the fix (`cargo fuzz tmin <target> <file>` shrinks it first). The exit status is
# non-zero if any target found something or failed to run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${SECONDS_PER_TARGET:-60}"
jobs="${JOBS:-1}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/targets.toml)
fi
command -v cargo-fuzz >/dev/null 2>&1 || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2; exit 2; }
if ! rustc --version | grep -q nightly; then export RUSTC_BOOTSTRAP=1; fi
build_flags=(--sanitizer none)
[ "${PROFILE:-release}" = dev ] && build_flags+=(--dev)

echo "== building ${#targets[@]} fuzz targets (${PROFILE:-release})"
cargo fuzz build "${build_flags[@]}"

# One target's bounded run; its summary lines, and FINDING/FAILED lines, on stdout.
run_one() {
  local target="$1"
  mkdir -p "fuzz/corpus/$target"
  rm -rf "fuzz/artifacts/$target"
  local code=0
  local keep_going=()
  [ "${KEEP_GOING:-0}" = 1 ] && keep_going=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  cargo fuzz run "${build_flags[@]}" "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -dict="fuzz/dicts/$target.dict" -timeout=10 \
    -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 "${keep_going[@]}" \
    >"fuzz/$target.log" 2>&1 || code=$?
  # The last progress line says how many inputs ran and how many edges they reached (in
  # both of libFuzzer's modes); the fork mode's also counts what was found.
  local progress
  progress=$(grep -E "^#[0-9]+" "fuzz/$target.log" | tail -1 || true)
  local runs edges rss
  runs=$(grep -oE "^#[0-9]+" <<<"$progress" | tr -d '#' || true)
  edges=$(grep -oE "cov: [0-9]+" <<<"$progress" | tr -dc '0-9' || true)
  rss=$(grep -oE "rss: [0-9]+Mb" "fuzz/$target.log" | tail -1 || true)
  echo "== $target: ${seconds}s, ${runs:-?} inputs, ${edges:-?} edges, ${rss:-rss ?}"
  if find "fuzz/artifacts/$target" -type f 2>/dev/null | grep -q .; then
    mkdir -p "fuzz/regressions/$target"
    for artifact in "fuzz/artifacts/$target"/*; do
      cp "$artifact" "fuzz/regressions/$target/"
      echo "FINDING $target: $artifact (copied to fuzz/regressions/$target/; see fuzz/$target.log)"
    done
  elif [ "$code" -ne 0 ]; then
    echo "FAILED $target (exit $code): see fuzz/$target.log"
  fi
}
export -f run_one
export seconds
export build_flags_text="${build_flags[*]}"

summary=$(printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c \
  'build_flags=($build_flags_text); run_one "$1"' _ {})
echo "$summary"
if grep -qE "^(FINDING|FAILED)" <<<"$summary"; then
  exit 1
fi
