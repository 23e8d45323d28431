#!/usr/bin/env bash
# Rule-breaking changes: each scripts/rules/<ID>.patch breaks one rule of docs/design/rules.md
# (and only that rule) while leaving the code compiling; this script applies each to a scratch
# copy of the working tree and checks that the tests the patch names FAIL on it — fail, not
# hang: a test run past the time bound, or one ended by a liveness bound (ferry-watchdog),
# counts as not caught.
#
#   scripts/rules.sh                  # every patch
#   scripts/rules.sh DFX-GATE-PUSH    # just these rules
#   scripts/rules.sh --ci             # the subset in scripts/rules/ci.txt (what .ci/run runs)
#   scripts/rules.sh --list           # the rules, their tests; runs nothing
#
# A patch starts with a header, before its first `diff --git` line:
#
#   Rule: DFX-GATE-PUSH
#   Breaks: <one sentence: what the change does wrong>
#   Test: <package> <lib|test-target> <test name>      (one line per test; each must fail)
#
# Knobs (environment):
#   RULES_OUT         report directory (default: target/rules-report): one log per rule and
#                     summary.txt
#   RULES_TEST_SECS   the most one rule's tests may run (default 60; the build is not counted)
#   RULES_SCRATCH     the scratch copy and its cargo target directory (default: target/rules;
#                     kept between runs so unchanged crates build once)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# The scratch copy lies inside this repository's ignored target/: keep git from finding the
# repository above it, so `git apply` patches the copy's files.
export GIT_CEILING_DIRECTORIES="${RULES_SCRATCH:-$root/target/rules}"

out="${RULES_OUT:-target/rules-report}"
test_secs="${RULES_TEST_SECS:-60}"
scratch="${RULES_SCRATCH:-$root/target/rules}"
src="$scratch/src"

list=0
subset=0
wanted=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --ci) subset=1; mapfile -t ci < <(grep -v '^\s*#' scripts/rules/ci.txt | grep -v '^\s*$' || true)
          wanted+=("${ci[@]}") ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "rules.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) wanted+=("$1") ;;
  esac
  shift
done

patches=()
if [ "$subset" = 1 ] && [ ${#wanted[@]} -eq 0 ]; then
  echo "rules.sh: scripts/rules/ci.txt names no rule"
  exit 0
elif [ ${#wanted[@]} -eq 0 ]; then
  for p in scripts/rules/*.patch; do patches+=("$p"); done
else
  for id in "${wanted[@]}"; do
    p="scripts/rules/$id.patch"
    [ -f "$p" ] || { echo "rules.sh: no patch for rule $id ($p)" >&2; exit 2; }
    patches+=("$p")
  done
fi

# The header fields of patch $1: `field NAME` prints each value of NAME.
field() { sed -n "/^diff --git/q; s/^$2: //p" "$1"; }

if [ "$list" = 1 ]; then
  for p in "${patches[@]}"; do
    echo "$(field "$p" Rule): $(field "$p" Breaks)"
    field "$p" Test | sed 's/^/    test: /'
  done
  exit 0
fi

# The scratch copy: the working tree's tracked and untracked (not ignored) files. Only a file
# whose content differs is copied (and so gets a new modification time): cargo rebuilds what
# changed since the last run and nothing else, and a file a patch touched last time (reverted
# after its build) keeps the newer time of its revert, so the next build is not the patched one.
echo "== scratch copy in $src"
mkdir -p "$src" "$out"
copied=0
while IFS= read -r -d '' f; do
  if ! cmp -s "$f" "$src/$f"; then
    mkdir -p "$src/$(dirname "$f")"
    cp "$f" "$src/$f"
    copied=$((copied + 1))
  fi
done < <(git ls-files -z -co --exclude-standard)
# Files the tree no longer has go from the copy too (cargo would still find a stale test).
removed=0
while IFS= read -r f; do
  rm -f "$src/$f"
  removed=$((removed + 1))
done < <(comm -13 <(git ls-files -co --exclude-standard | sort) \
  <(cd "$src" && find . -type f -not -path './target/*' | sed 's|^\./||' | sort))
echo "   $copied files changed and $removed gone since the last run"
export CARGO_TARGET_DIR="$scratch/target"
export CARGO_TERM_COLOR=never
# A liveness bound shorter than the test bound, so a test that waits on a broken rule is
# reported by its watchdog (a hang, not caught) rather than cut off by the timeout.
export FERRY_TEST_BOUND_SECS=$(( test_secs > 10 ? test_secs - 5 : test_secs ))
: >"$out/summary.txt"

caught=0
failed=0
for p in "${patches[@]}"; do
  id=$(field "$p" Rule)
  log="$out/$id.log"
  : >"$log"
  if ! (cd "$src" && git apply --check "$root/$p") >>"$log" 2>&1; then
    line="$id: PATCH DOES NOT APPLY (see $log)"
    echo "$line" | tee -a "$out/summary.txt"
    failed=1
    continue
  fi
  (cd "$src" && git apply "$root/$p")
  verdict="caught"
  secs=0
  while read -r pkg target name; do
    [ -n "$pkg" ] || continue
    if [ "$target" = lib ]; then sel=(--lib); else sel=(--test "$target"); fi
    if ! (cd "$src" && timeout 1800 cargo test -q -p "$pkg" "${sel[@]}" --no-run) >>"$log" 2>&1; then
      verdict="DOES NOT BUILD"
      break
    fi
    start=$(date +%s.%N)
    rc=0
    (cd "$src" && timeout "$test_secs" cargo test -q -p "$pkg" "${sel[@]}" -- "$name" --exact) \
      >>"$log" 2>&1 || rc=$?
    secs=$(echo "$secs + $(date +%s.%N) - $start" | bc)
    if [ "$rc" = 0 ]; then
      verdict="MISSED by $pkg $target $name"
      break
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      verdict="HUNG in $pkg $target $name (past ${test_secs}s)"
      break
    elif grep -q "ferry-watchdog: test .* hung waiting" "$log"; then
      verdict="HUNG in $pkg $target $name (its liveness bound ended it)"
      break
    elif ! grep -q "^test $name \.\.\. FAILED\|^    $name$\|^test .*::$name \.\.\. FAILED" "$log"; then
      verdict="NOT RUN: $pkg $target $name (no such test?)"
      break
    fi
  done < <(field "$p" Test)
  (cd "$src" && git apply -R "$root/$p")
  line=$(printf '%s: %s (%.1fs of tests)' "$id" "$verdict" "$secs")
  echo "$line" | tee -a "$out/summary.txt"
  if [ "$verdict" = caught ]; then caught=$((caught + 1)); else failed=1; fi
done
echo "== $caught of ${#patches[@]} rule-breaking changes caught (report: $out/summary.txt)"
exit "$failed"
