#!/usr/bin/env bash
# The demo: three pods race for one bill run on a private redis-server; the winner is killed
# mid-run and another pod takes over. Set TELCO_PLATFORM_LOCK_REDIS_ADDRESS to use your Redis.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TELCO_PLATFORM_LOCK_REDIS_ADDRESS:-}" ]; then
  scripts/ensure-redis.sh
fi
echo "Building the demo (the first build takes a few minutes)..." >&2
cargo build --quiet -p lock-starter --examples
exec "${CARGO_TARGET_DIR:-target}/debug/examples/demo" "$@"
