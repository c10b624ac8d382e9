#!/usr/bin/env bash
# The whole test suite on a fresh machine with only Go: installs the tools the
# integration and end-to-end tests start (Debian packages, through apt-get),
# says what it installed, then runs go test -race in each module: the
# benchmark's (bench/), the browser tests' (e2e/browser/), the product's.
# Arguments replace ./... and run in the product's module alone
# (scripts/test.sh ./store/... -run TestX).
#
# Elsewhere (macOS, other Linux distributions) install the commands listed in
# "tools" below and promtool with the system's package manager (for example
# `brew install redis prometheus`), then run this script or
# `go test -race -timeout 30m ./...`; tests
# whose tool is missing are skipped, unless CI is set, where they fail.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

# One line per tool a test runs: the command (a name on the PATH or an
# absolute path), then the Debian package that ships it.
tools=(
  "redis-server redis-server"
  "redis-cli redis-tools"
  "node nodejs"
  "curl curl"
  "pip3 python3-pip"
  "npm npm"
  "python3 python3"
  "/usr/lib/postgresql/15/bin/initdb postgresql"
  "/usr/lib/postgresql/15/bin/postgres postgresql"
  "chromium chromium"
  "valgrind valgrind"
  "callgrind_control valgrind"
)

missing=() packages=()
for line in "${tools[@]}"; do
  read -r cmd pkg <<<"$line"
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing+=("$cmd")
    [[ " ${packages[*]} " == *" $pkg "* ]] || packages+=("$pkg")
  fi
done

if [ ${#packages[@]} -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  if command -v apt-get >/dev/null 2>&1 && { [ ${#sudo[@]} -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then
    echo "test.sh: missing ${missing[*]}; installing Debian packages: ${packages[*]}"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
    echo "test.sh: installed ${packages[*]}"
  else
    echo "test.sh: missing ${missing[*]} and no apt-get to install them (Debian packages: ${packages[*]});" >&2
    echo "test.sh: install them with this system's package manager; until then their tests skip (fail when CI is set)" >&2
  fi
fi

# promtool is no Debian command of its own: it is unpacked from the
# prometheus package. Without it the alert rule tests skip (fail under CI).
. scripts/promtool.sh || echo "test.sh: install promtool (Debian package prometheus); until then TestPromtool skips (fails when CI is set)" >&2

# The end-to-end package alone runs for several minutes on two busy cores,
# near go test's default 10m limit for one package: give every package 30m,
# unless the arguments set -timeout (they override GOFLAGS).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-timeout=30m"

# The benchmark (bench/) and the browser tests (e2e/browser/) are modules of
# their own, which go.work lists: without arguments their tests run first,
# each in its module (go -C works with or without the workspace).
if [ $# -eq 0 ]; then
  for module in bench e2e/browser; do
    echo "test.sh: go -C $module test -race ./..."
    go -C "$module" test -race ./...
  done
fi
[ $# -gt 0 ] || set -- ./...
echo "test.sh: go test -race $*"
exec go test -race "$@"
