#!/usr/bin/env bash
# The whole test suite: unit tests, the conformance suite on both implementations, and the
# behaviour, fault and multi-process tests against real redis-server processes; then the tests
# that depend on the server's behaviour once more against Valkey 8 (lock-testkit starts whatever
# LOCK_TESTKIT_REDIS_SERVER names, for single servers, Sentinel and Cluster alike).
#
#   scripts/test.sh                 both passes
#   scripts/test.sh --redis-only    the Redis pass only
#   scripts/test.sh ARGS…           the Redis pass only, as `cargo test --workspace ARGS…`
#   scripts/test.sh --help          this text
set -euo pipefail
cd "$(dirname "$0")/.."

# The lock-redis tests that exercise the server: the test binaries of their own (credentials,
# the behaviour contract, watchdog rounds), and the modules of the `it` binary for conformance,
# ACL refusals, Cluster, Sentinel, replication, fair queues, and the scripts' newer paths
# (minimum hold, operations, lost replies), and the toolkit's scripts (idempotent execution,
# master/sub locks).
VALKEY_BINARIES=(credentials behaviour watchdog)
VALKEY_MODULES=(conformance acl cluster sentinel sentinel_deployments replication fair
  redis_errors hold_at_least ops outcome_unknown idempotency branches)

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

scripts/ensure-redis.sh
cargo test --workspace "$@"

if [ "$valkey" = 1 ]; then
  scripts/ensure-valkey.sh
  server="$(command -v valkey-server)"
  printf '\n== the server-dependent tests again, on %s ==\n' "$("$server" --version | cut -d' ' -f1-3)"
  export LOCK_TESTKIT_REDIS_SERVER="$server"
  cargo test -p lock-redis "${VALKEY_BINARIES[@]/#/--test=}"
  # A filter matches a test whose path contains it: `fair::` selects the module `fair`.
  cargo test -p lock-redis --test it -- "${VALKEY_MODULES[@]/%/::}"
fi
