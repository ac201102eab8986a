#!/usr/bin/env bash
# The whole test suite: unit tests, the conformance suite on both implementations, and the
# behaviour, fault and multi-process tests against real redis-server processes; then every
# lock-redis test once more against Valkey 8 (lock-testkit starts whatever
# LOCK_TESTKIT_REDIS_SERVER names, for single servers, Sentinel and Cluster alike).
#
# The Valkey pass is derived from the layout, not listed: all of lock-redis' test binaries and
# every folder of its `it` binary, except the modules named `*_under_faults` or `*_stress`:
# those drive the client through faults and random schedules, the same whatever the server.
#
#   scripts/test.sh                 both passes
#   scripts/test.sh --redis-only    the Redis pass only
#   scripts/test.sh ARGS…           the Redis pass only, as `cargo test --workspace ARGS…`
#   scripts/test.sh --help          this text
set -euo pipefail
cd "$(dirname "$0")/.."

valkey=1
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  # The usage is the header above.
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
elif [ "${1:-}" = "--redis-only" ]; then
  valkey=0
  shift
elif [ "$#" -gt 0 ]; then
  valkey=0
fi

# The tests mostly wait on servers, child processes and timers (about a fifth of the wall time
# is CPU at two threads): six at a time take well under half the time on 2 cores, and every
# test waits on events with deadlines generous enough for that load.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-6}"

scripts/ensure-redis.sh
cargo test --workspace "$@"

if [ "$valkey" = 1 ]; then
  scripts/ensure-valkey.sh
  server="$(command -v valkey-server)"
  printf '\n== lock-redis tests again, on %s ==\n' "$("$server" --version | cut -d' ' -f1-3)"
  export LOCK_TESTKIT_REDIS_SERVER="$server"
  # `--skip` drops the tests whose path contains the pattern: `_stress::` is a module's suffix.
  cargo test -p lock-redis --tests -- --skip _under_faults:: --skip _stress::
fi
