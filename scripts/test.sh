#!/usr/bin/env bash
# The whole test suite: unit tests, the conformance suite on both implementations, and the
# behaviour, fault and multi-process tests against real redis-server processes.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-redis.sh
exec cargo test --workspace "$@"
