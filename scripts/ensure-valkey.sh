#!/usr/bin/env bash
# Makes sure valkey-server (Valkey 8) is on PATH, for the Valkey pass of scripts/test.sh. Debian
# bookworm ships it in bookworm-backports only: that suite is added to apt's sources (at the
# default backports priority, so nothing else is upgraded from it) when no valkey-server candidate
# is found otherwise.
set -euo pipefail

if command -v valkey-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "valkey-server is not installed and cannot be installed here (needs root and apt-get)." >&2
  echo "Install Valkey 8 (Debian: 'apt-get install -t bookworm-backports valkey-server'), or run" >&2
  echo "scripts/test.sh --redis-only." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
candidate() { apt-cache policy valkey-server 2>/dev/null | awk '/Candidate:/ {print $2}'; }
echo "Installing valkey-server with apt-get (one time)..." >&2
apt-get update -qq >&2
suite=()
if [ -z "$(candidate)" ] || [ "$(candidate)" = "(none)" ]; then
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
  # The mirror the machine already uses for its Debian suites (deb822 or one-line sources).
  mirror="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)"
  if [ -z "$mirror" ]; then
    mirror="$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)"
  fi
  cat > /etc/apt/sources.list.d/${codename}-backports.sources <<SOURCES
Types: deb
URIs: ${mirror}
Suites: ${codename}-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  apt-get update -qq >&2
  suite=(-t "${codename}-backports")
fi
apt-get install -y -qq "${suite[@]}" valkey-server >&2
valkey-server --version >&2
