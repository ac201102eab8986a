#!/usr/bin/env bash
# The long fault-injection run (the soak): every workload (the lock and each toolkit
# capability) under every fault for 10 minutes by default, 8 worker processes each, on private
# Redis servers (Sentinel or a Cluster for the failovers). Prints the tables of
# docs/reliability.md and exits non-zero if any run found a problem. Arguments go to
# lock-stress, e.g.
#   scripts/soak.sh --duration 30s
#   scripts/soak.sh --workload lock --fault pause-holder --workers 16 --duration 1h
#   scripts/soak.sh --workload queue --workload rate-limit --duration 1m
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-redis.sh
cargo build --quiet --release -p platform-lock-tests --bins
exec "${CARGO_TARGET_DIR:-target}/release/lock-stress" --duration 10m "$@"
