#!/usr/bin/env bash
# Mutation testing of the request path and the stores with
# `go run ./tools/mutate -sweep`: it changes one operator at a time (a <
# into <=, a + into -, a condition negated...), the mutants the mutation
# tester gremlins makes by default, and runs against each only the tests of
# the package that run its line, found by running each test once alone
# with a coverage profile. It reports each mutant they let live.
#
#   scripts/mutation.sh full            # full sweep of every package below
#   scripts/mutation.sh full proxy store  # full sweep of these package directories
#   scripts/mutation.sh --changed       # CI: the lines changed since each package's last sweep
#
# (scripts/mutation.sh with package directories and no word is a full sweep
# of them too.) It sweeps the commit checked out (a scratch clone of it;
# uncommitted changes are not swept) and fails when a mutant survives that
# docs/mutation-survivors.md does not list with its reason. A full sweep
# prints each package's mutation score for docs/guarantees.md, reports
# listed survivors that no longer survive, and, for each package that came
# out clean, records the commit in .ci/mutation-base: --changed then tests
# only the mutants on lines changed since. --changed starts no mutant once
# MUTATION_BUDGET seconds (540) have passed, and says which packages it
# left, whole or in part, for a sweep; a package left in part shows the
# survivors found so far but is judged only by a full sweep (which of its
# mutants fit in the budget depends on the machine).
#
# Each mutant's tests may take MUTATION_TIMEOUT_COEFFICIENT (5; 2 under
# --changed, where one mutant that hangs must not spend the whole budget)
# times their unmutated build and run before the mutant counts as caught by
# a timeout. MUTATION_ONLY="capture.go lease.go" sweeps only those files of
# the packages given: a part of a package, whose score is of those files,
# and which reports no stale entry and records no base.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

# Every package the sweep covers, in the order --changed spends its budget
# on them: those whose tests run in seconds first, the real-server stores
# last.
all=(store store/seal proxy proxy/execution store/memory store/filestore store/postgres store/redisstore)
coefficient=${MUTATION_TIMEOUT_COEFFICIENT:-}
budget=${MUTATION_BUDGET:-540}
bases=.ci/mutation-base
only=${MUTATION_ONLY:-}

changed=false
case "${1:-}" in
--changed)
  changed=true
  coefficient=${coefficient:-2}
  shift
  ;;
full) shift ;;
-*)
  echo "usage: scripts/mutation.sh [full] [package-dir...] | --changed" >&2
  exit 2
  ;;
esac
coefficient=${coefficient:-5}
[ $# -gt 0 ] || set -- "${all[@]}"

head=$(git rev-parse HEAD)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
src=$scratch/src
git clone -q --no-checkout "$root" "$src"
git -C "$src" checkout -q "$head"
mutate=$scratch/mutate
go -C "$src" build -o "$mutate" ./tools/mutate

# base prints the commit of pkg's last full sweep.
base() {
  awk -v p="$1" '$1 == p { print $2 }' "$bases"
}

# sweep tests the mutants of package directory $1 (those on lines changed
# since commit $2 when given; none started after $limit seconds when set)
# and writes the results to $scratch/$1.json.
sweep() {
  local pkg=$1 since=${2:-} name
  name=$(echo "$pkg" | tr / _)
  local args=(-sweep "$pkg" -o "$scratch/$name.json" -timeout-coefficient "$coefficient")
  [ -z "$since" ] || args+=(-since "$since")
  [ -z "$only" ] || args+=(-files "$only")
  [ -z "$limit" ] || args+=(-budget "${limit}s")
  # The budget bounds the mutants started; the hard bound, a mutant
  # running past it or a test mapping that hangs.
  (cd "$src" && ${limit:+timeout $((limit + 180))} "$mutate" "${args[@]}" >"$scratch/$name.log" 2>&1) || {
    echo "mutation: the sweep of $pkg failed; its log:"
    tail -n 40 "$scratch/$name.log"
    return 1
  }
  grep -h '^sweep ' "$scratch/$name.log"
  results+=("$pkg=$scratch/$name.json")
}

results=() limit=
if $changed; then
  start=$(date +%s)
  left=() partial=()
  for pkg in "$@"; do
    since=$(base "$pkg")
    if [ -n "$since" ] && ! git cat-file -e "$since^{commit}" 2>/dev/null &&
      [ "$(git rev-parse --is-shallow-repository)" = true ]; then
      git fetch -q --unshallow || true # a shallow clone, as some CI checkouts are
    fi
    if [ -z "$since" ] || ! git cat-file -e "$since^{commit}" 2>/dev/null; then
      echo "mutation: $pkg: its base ${since:-(none in $bases)} is not in this clone's history; fetch it (git fetch --unshallow)" >&2
      exit 1
    fi
    # Touched: a file of the package itself, not a test, changed since.
    if [ -z "$(git diff --name-only "$since" HEAD -- "$pkg/*.go" ":!$pkg/*_test.go" ":!$pkg/*/*")" ]; then
      continue
    fi
    limit=$(( budget - ($(date +%s) - start) ))
    if [ "$limit" -le 0 ]; then
      left+=("$pkg")
      continue
    fi
    echo "mutation: $pkg, lines changed since ${since:0:12}"
    if ! sweep "$pkg" "$since"; then
      left+=("$pkg")
    elif grep -q '"NOT RUN"' "$scratch/$(echo "$pkg" | tr / _).json"; then
      # A package the budget cut short is not judged: which of its mutants
      # ran depends on how fast this machine is, so judging them would make
      # CI's verdict depend on the machine. Its survivors so far are shown,
      # and the package is named for a full sweep, as one never started is.
      left+=("$pkg")
      partial+=("${results[-1]}")
      unset 'results[-1]'
      echo "mutation: $pkg: some of its changed lines' mutants were left unrun; not judged"
    fi
  done
  if [ ${#partial[@]} -gt 0 ]; then
    echo "mutation: what the unfinished packages' sweeps found so far (not judged):"
    go -C "$src" run ./tools/mutsurvivors -list "$root/docs/mutation-survivors.md" "${partial[@]}" || true
  fi
  if [ ${#left[@]} -gt 0 ]; then
    echo "mutation: not swept within ${budget}s: ${left[*]}; run scripts/mutation.sh full ${left[*]}"
  fi
  if [ ${#results[@]} -eq 0 ]; then
    if [ ${#left[@]} -eq 0 ]; then
      echo "mutation: no package changed since its last sweep"
    else
      echo "mutation: no package's changed lines were swept"
    fi
    exit 0
  fi
  go -C "$src" run ./tools/mutsurvivors -list "$root/docs/mutation-survivors.md" "${results[@]}"
  exit
fi

for pkg in "$@"; do
  echo "mutation: $pkg, ${only:-every file} (started $(date -u +%H:%M:%S))"
  sweep "$pkg"
done
status=0
if [ -n "$only" ]; then
  go -C "$src" run ./tools/mutsurvivors -list "$root/docs/mutation-survivors.md" "${results[@]}" || status=$?
  exit $status
fi
go -C "$src" run ./tools/mutsurvivors -list "$root/docs/mutation-survivors.md" -full "${results[@]}" | tee "$scratch/report" || status=$?
# A package whose mutants all died or are listed is swept as of this
# commit.
for r in "${results[@]}"; do
  pkg=${r%%=*}
  if ! grep -q "^NEW SURVIVOR $pkg/[^/]*:\|^NO LONGER SURVIVES $pkg/[^/]* " "$scratch/report"; then
    awk -v p="$pkg" -v c="$head" '$1 == p { $0 = p " " c; found = 1 } { print } END { if (!found) print p " " c }' "$bases" >"$scratch/bases"
    cp "$scratch/bases" "$bases"
  fi
done
exit $status
