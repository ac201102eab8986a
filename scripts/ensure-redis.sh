#!/usr/bin/env bash
# Makes sure redis-server, redis-cli (and redis-benchmark) are on PATH, and libfaketime (a test
# runs a process with its clock set off), installing Debian's redis-server and faketime packages
# with apt-get when they are missing and we may (root, apt-get present).
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
  && command -v redis-benchmark >/dev/null 2>&1 && command -v faketime >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is not installed and cannot be installed here (needs root and apt-get)." >&2
  echo "Install Redis 7 or later (e.g. 'sudo apt-get install -y redis-server'), then run this again." >&2
  exit 1
fi

echo "Installing redis-server with apt-get (one time)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq redis-server redis-tools faketime >&2
# The package may start a system-wide server on 6379; the demo and tests start their own.
redis-server --version >&2
