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

# The lock-redis test files that exercise the server: conformance, ACL refusals, Cluster,
# Sentinel, replication, fair queues, credentials, the behaviour contract, and the scripts'
# newer paths (minimum hold, watchdog rounds, operations, lost replies).
VALKEY_TESTS=(conformance acl cluster sentinel sentinel_deployments replication fair credentials
  behaviour redis_errors hold_at_least watchdog ops outcome_unknown)

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
  LOCK_TESTKIT_REDIS_SERVER="$server" cargo test -p lock-redis "${VALKEY_TESTS[@]/#/--test=}"
fi
