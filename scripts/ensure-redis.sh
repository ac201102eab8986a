#!/usr/bin/env bash
# Makes sure the given tools are on PATH (default: redis-server, redis-cli, redis-benchmark and
# faketime, which the tests use), installing Debian's redis-server, redis-tools and faketime
# packages with apt-get when one is missing and we may (root, apt-get present).
#   scripts/ensure-redis.sh [TOOL...]
set -euo pipefail

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(redis-server redis-cli redis-benchmark faketime)
missing=()
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "${missing[*]}: not installed, and cannot be installed here (needs root and apt-get)." >&2
  echo "Install them (Debian: 'sudo apt-get install -y redis-server redis-tools faketime'; Redis 7 or later), then run this again." >&2
  exit 1
fi

echo "Installing ${missing[*]} with apt-get (one time)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq redis-server redis-tools faketime >&2
# The package may start a system-wide server on 6379; the demo and tests start their own.
redis-server --version >&2
