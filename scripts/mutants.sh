#!/usr/bin/env bash
# Mutation testing of ferry's protocol modules with cargo-mutants: every small change to a rule
# (a flipped comparison, a deleted write, a function that returns a default) must make a test
# fail. See docs/mutation-testing.md for what each module covers, the run times and the score.
#
#   scripts/mutants.sh                      # every module, one after another
#   scripts/mutants.sh dfx-drain copy-pool  # just these modules
#   scripts/mutants.sh --list               # the modules and their mutant counts; runs nothing
#   scripts/mutants.sh --shard 0/4 dfx-writer  # the first quarter of a module (shards 0..3)
#   scripts/mutants.sh --iterate dfx-drain  # only the mutants not caught by the last run
#   scripts/mutants.sh --missed dfx-drain   # only the last run's survivors (after new tests)
#
# Knobs (environment):
#   MUTANTS_OUT        report directory (default: target/mutants-report); one subdirectory per
#                      module holding cargo-mutants' own report (mutants.out/), plus summary.txt
#   MUTANTS_TIMEOUT    seconds one mutant's tests may run before it counts as a timeout
#                      (default 300; a hang is normally caught earlier by the liveness bounds)
#   MUTANTS_JOBS       mutants built and tested at once (default 1: each already uses 2 cores)
#   MUTANTS_TARGET_DIR cargo's target directory for the mutated builds (default:
#                      target/mutants, kept between runs so dependencies build once)
#   CARGO_PROFILE_DEV_DEBUG  debug information in the mutated builds (default 0: none)
#   FERRY_TEST_BOUND_SECS  the tests' liveness bound (default here 120 instead of 300, so a
#                      mutant that hangs a test fails in two minutes, naming the test)
#
# Equivalent mutants (no observable behaviour can tell them apart from the original) are
# excluded in .cargo/mutants.toml, each with its reason. The run exits 1 when a module has a
# surviving ("missed") mutant: a rule no test checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# ferry-runtime's tests that run a chip with DFX, ArgsDump or the Path B handshake readback (its
# other targets, the dependency-graph matrix among them, never reach the sinks or the arena).
RUNTIME_DFX_TESTS="--lib --test=dfx --test=dfx_capacity --test=dump_marks --test=kernels \
--test=path_b --test=pipeline --test=profile --test=repeat --test=runtime --test=scheduler_dfx"

# module | packages whose tests run (the first holds the files) | files mutated | cargo test
# target selection (a target named in any of the packages). The AICPU OS's object loading and
# latch run only under real device programs: ferry-launch's loader tests drive them.
MODULES=(
  "dfx-writer|ferry-dfx|crates/ferry-dfx/src/device/writer.rs crates/ferry-dfx/src/device/mod.rs|--lib --test=transport --test=gates --test=reconcile --test=writers --test=stress"
  "dfx-drain|ferry-dfx|crates/ferry-dfx/src/host/drain.rs|--lib --test=transport --test=gates --test=reconcile --test=writers --test=stress"
  "dfx-replenish|ferry-dfx|crates/ferry-dfx/src/host/replenish.rs|--lib --test=transport --test=gates --test=reconcile --test=writers --test=stress"
  "dfx-region|ferry-dfx|crates/ferry-dfx/src/host/region.rs|--lib --test=transport --test=gates --test=reconcile --test=writers --test=stress"
  "copy-pool|ferry-copy|crates/ferry-copy/src/hbm/pool.rs crates/ferry-copy/src/hbm/prewarm.rs|--tests"
  "sim-latch|ferry-sim ferry-launch|crates/ferry-sim/src/aicpu_os/mod.rs crates/ferry-sim/src/aicpu_os/launch.rs|--lib --test=sim --test=path_b_cache --test=chip --test=halt --test=halt_wait --test=loader"
  "sim-cache|ferry-sim|crates/ferry-sim/src/cache.rs|--tests"
  "sim-handshake|ferry-sim|crates/ferry-sim/src/cores.rs|--tests"
  "runtime-sinks|ferry-runtime|crates/ferry-runtime/src/host/dfx/sinks.rs crates/ferry-runtime/src/host/handshake.rs|$RUNTIME_DFX_TESTS"
  "runtime-arena|ferry-runtime|crates/ferry-runtime/src/device/dfx/arena.rs|$RUNTIME_DFX_TESTS"
  "launch-transaction|ferry-launch|crates/ferry-launch/src/transaction/mod.rs crates/ferry-launch/src/transaction/staging/mod.rs crates/ferry-launch/src/transaction/staging/publish.rs crates/ferry-launch/src/transaction/staging/retire.rs|--tests"
)

list=0
shard=()
iterate=()
missed=0
wanted=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --shard) shard=(--shard "$2"); shift ;;
    --iterate) iterate=(--iterate) ;;
    --missed) missed=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "mutants.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) wanted+=("$1") ;;
  esac
  shift
done

if ! command -v cargo-mutants >/dev/null 2>&1; then
  echo "== installing cargo-mutants (cargo install cargo-mutants --locked)"
  cargo install cargo-mutants --locked
fi

out="${MUTANTS_OUT:-target/mutants-report}"
timeout_s="${MUTANTS_TIMEOUT:-300}"
jobs="${MUTANTS_JOBS:-1}"
export FERRY_TEST_BOUND_SECS="${FERRY_TEST_BOUND_SECS:-120}"
export CARGO_TARGET_DIR="${MUTANTS_TARGET_DIR:-$PWD/target/mutants}"
# Mutated builds need no debugger information; leaving it out shortens every mutant's compile
# and link (CARGO_PROFILE_DEV_DEBUG overrides).
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
mkdir -p "$out"

known=" "
for m in "${MODULES[@]}"; do known+="${m%%|*} "; done
for w in "${wanted[@]}"; do
  case "$known" in *" $w "*) ;; *) echo "mutants.sh: unknown module $w; modules:$known" >&2; exit 2 ;; esac
done

failed=0
for m in "${MODULES[@]}"; do
  IFS='|' read -r name pkgs files targets <<<"$m"
  if [ ${#wanted[@]} -gt 0 ]; then
    case " ${wanted[*]} " in *" $name "*) ;; *) continue ;; esac
  fi
  pkg=${pkgs%% *}
  args=(--package "$pkg" --test-workspace=false)
  for p in $pkgs; do args+=(--test-package "$p"); done
  for f in $files; do args+=(--file "$f"); done
  for t in $targets; do args+=(--cargo-arg="$t"); done
  if [ "$list" = 1 ]; then
    echo "$name: $(cargo mutants "${args[@]}" --list | wc -l) mutants ($files)"
    continue
  fi
  if [ "$missed" = 1 ]; then
    prev="$out/$name/mutants.out/missed.txt"
    if [ ! -s "$prev" ]; then echo "== $name: no survivors in $prev"; continue; fi
    # Each survivor's name (file:line:col: description) as one anchored alternation, with any
    # line and column: a test or a fix added since may have moved the code. (A description
    # that occurs twice in one function re-runs both.)
    re=$(sed 's/[][\\.^$*+?(){}|\/]/\\&/g; s/^/^/; s/$/$/; s/:[0-9][0-9]*:[0-9][0-9]*: /:[0-9]+:[0-9]+: /' "$prev" | paste -sd'|')
    args+=(--re "$re")
  fi
  echo "== $name: $files (tests: $pkgs $targets)"
  start=$(date +%s)
  rc=0
  cargo mutants "${args[@]}" "${shard[@]}" "${iterate[@]}" --baseline=skip --timeout "$timeout_s" \
    --build-timeout 1200 --jobs "$jobs" --no-shuffle --output "$out/$name" || rc=$?
  secs=$(( $(date +%s) - start ))
  r="$out/$name/mutants.out"
  count() { if [ -f "$r/$1.txt" ]; then grep -c . "$r/$1.txt" || true; else echo 0; fi; }
  summary="$name: caught $(count caught), missed $(count missed), timeout $(count timeout), unviable $(count unviable); ${secs}s"
  echo "$summary" | tee -a "$out/summary.txt"
  if [ "$(count missed)" != 0 ]; then
    echo "surviving mutants (a test must kill each, or .cargo/mutants.toml must explain it):"
    sed 's/^/  /' "$r/missed.txt"
    failed=1
  fi
  # cargo-mutants exits 2 for missed mutants and 3 for timeouts (both reported above); any
  # other failure (the tree does not build, a bad argument) ends the run.
  case "$rc" in 0|2|3) ;; *) echo "cargo-mutants failed ($rc) on $name" >&2; exit "$rc" ;; esac
done
exit "$failed"
