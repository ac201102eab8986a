#!/usr/bin/env bash
# The demo: three pods race for one bill run on a private redis-server; the winner is killed
# mid-run and another pod takes over. Then four replicas share one catalog warm-up, three
# gateway replicas share one rate limit, and two pods share a product cache whose in-process
# copies a price change evicts by Redis' push.
# Set TELCO_PLATFORM_LOCK_REDIS_ADDRESS to use your Redis.
# With --hold it then leaves a pod holding a lock for the platform-lock CLI to inspect and release.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TELCO_PLATFORM_LOCK_REDIS_ADDRESS:-}" ]; then
  scripts/ensure-redis.sh redis-server redis-cli
fi
echo "Building the demo (the first build takes a few minutes)..." >&2
packages=(-p lock-starter --examples)
for arg in "$@"; do
  # --hold prints platform-lock commands; build the CLI too so they work without an install.
  [ "$arg" = "--hold" ] && packages=(-p lock-starter --examples -p lock-cli --bins)
done
cargo build --quiet "${packages[@]}"
exec "${CARGO_TARGET_DIR:-target}/debug/examples/demo" "$@"
