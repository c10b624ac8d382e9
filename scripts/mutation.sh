#!/usr/bin/env bash
# Mutation testing of the request path and the stores with gremlins, whose
# version tools/mutation/go.mod pins (a module of its own: none of its
# requirements reach the product's go.mod). Gremlins changes one operator at
# a time (a < into <=, a + into -, a condition negated...), runs the
# package's own tests, and reports each mutant they let live.
#
#   scripts/mutation.sh                 # full sweep of every package below
#   scripts/mutation.sh proxy store     # full sweep of these package directories
#   scripts/mutation.sh --changed       # CI: the lines changed since each package's last sweep
#
# It sweeps the commit checked out (a scratch clone of it; uncommitted
# changes are not swept) and fails when a mutant survives that
# docs/mutation-survivors.md does not list with its reason. A full sweep
# prints each package's mutation score for docs/guarantees.md, reports
# listed survivors that no longer survive, and, for each package that came
# out clean, records the commit in .ci/mutation-base: --changed then tests
# only the mutants on lines changed since. --changed stops starting
# packages once MUTATION_BUDGET seconds (540) have passed, and says which
# it left for a sweep.
#
# MUTATION_WORKERS (1) mutants run at once; each test run may take
# MUTATION_TIMEOUT_COEFFICIENT (5; 2 under --changed, where one mutant
# that hangs must not spend the whole budget) times the package's coverage
# run before the mutant counts as caught by a timeout. MUTATION_ONLY="capture.go
# lease.go" sweeps only those files of the packages given: a part of a
# package, whose score is of those files, and which reports no stale entry
# and records no base.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

# Every package the sweep covers, in the order --changed spends its budget
# on them: those whose tests run in seconds first, the real-server stores
# last.
all=(store store/seal proxy store/memory store/filestore store/postgres store/redisstore)
workers=${MUTATION_WORKERS:-1}
coefficient=${MUTATION_TIMEOUT_COEFFICIENT:-}
budget=${MUTATION_BUDGET:-540}
bases=.ci/mutation-base
only=${MUTATION_ONLY:-}

changed=false
if [ "${1:-}" = --changed ]; then
  changed=true
  coefficient=${coefficient:-2}
  shift
fi
coefficient=${coefficient:-5}
[ $# -gt 0 ] || set -- "${all[@]}"

head=$(git rev-parse HEAD)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
gremlins=$scratch/gremlins
# Outside the workspace (go.work does not list tools/mutation: its
# requirements would change the versions the product builds with there).
GOWORK=off go -C tools/mutation build -o "$gremlins" github.com/go-gremlins/gremlins/cmd/gremlins

# base prints the commit of pkg's last full sweep.
base() {
  awk -v p="$1" '$1 == p { print $2 }' "$bases"
}

# sweep tests the mutants of package directory $1 (those on lines changed
# since commit $2 when given) and writes the results to $scratch/$1.json.
sweep() {
  local pkg=$1 since=${2:-} name dir
  name=$(echo "$pkg" | tr / _)
  dir=$scratch/src-$name
  git clone -q --no-checkout "$root" "$dir"
  git -C "$dir" checkout -q "$head"
  # Gremlins covers a directory with its subdirectories: without their
  # tests, coverage runs this package's alone, and -E '/' leaves their
  # files out.
  find "$dir/$pkg" -mindepth 2 -name '*_test.go' -delete
  local args=(unleash "$dir/$pkg" --workers "$workers" --timeout-coefficient "$coefficient"
    -E / -o "$scratch/$name.json")
  [ -z "$since" ] || args+=(--diff "$since")
  if [ -n "$only" ]; then
    local f
    for f in "$dir/$pkg"/*.go; do
      f=$(basename "$f")
      [[ " $only " == *" $f "* ]] || args+=(-E "^${f//./\\.}\$")
    done
  fi
  # Gremlins reads changed lines from git diff run where it starts, and
  # names files relative to the package: diff.relative makes git agree.
  (cd "$dir/$pkg" && GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
    ${limit:+timeout "$limit"} "$gremlins" "${args[@]}" >"$scratch/$name.log" 2>&1) || {
    echo "mutation: gremlins failed on $pkg; its log:"
    tail -n 40 "$scratch/$name.log"
    return 1
  }
  results+=("$pkg=$scratch/$name.json")
}

results=() limit=
if $changed; then
  start=$(date +%s)
  left=()
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
    sweep "$pkg" "$since" || left+=("$pkg")
  done
  if [ ${#left[@]} -gt 0 ]; then
    echo "mutation: not swept within ${budget}s: ${left[*]}; run scripts/mutation.sh ${left[*]}"
  fi
  if [ ${#results[@]} -eq 0 ]; then
    if [ ${#left[@]} -eq 0 ]; then
      echo "mutation: no package changed since its last sweep"
    else
      echo "mutation: no package's changed lines were swept"
    fi
    exit 0
  fi
  go run ./tools/mutsurvivors "${results[@]}"
  exit
fi

for pkg in "$@"; do
  echo "mutation: $pkg, ${only:-every file} (started $(date -u +%H:%M:%S))"
  sweep "$pkg"
done
status=0
if [ -n "$only" ]; then
  go run ./tools/mutsurvivors "${results[@]}" || status=$?
  exit $status
fi
go run ./tools/mutsurvivors -full "${results[@]}" | tee "$scratch/report" || status=$?
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
