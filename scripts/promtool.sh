# Sourced by scripts/test.sh and .ci/run: puts promtool on the PATH, which
# checks and unit-tests the alerting rules (deploy/). Debian ships it in the
# prometheus package, from which only the binary is unpacked (no service is
# installed or started). Without apt-get it says so and returns 1; the
# caller decides whether that is fatal.
if ! command -v promtool >/dev/null 2>&1; then
  promtool_dir=$(mktemp -d)
  if command -v apt-get >/dev/null 2>&1 &&
     (cd "$promtool_dir" && { apt-get download prometheus >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; } &&
      dpkg -x prometheus_*.deb x); then
    export PATH="$promtool_dir/x/usr/bin:$PATH"
    echo "promtool: unpacked from Debian's prometheus package into $promtool_dir"
  else
    echo "promtool unavailable: Debian's prometheus package could not be fetched" >&2
    false
  fi
fi
