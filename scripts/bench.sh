#!/usr/bin/env bash
# Side-by-side benchmark, in one go on one private redis-server: our lock-bench and the peers
# of ../shared/peers (existing lock libraries and the raw Redis limit; the toolkit peers for
# idempotent execution, rate limiting and the cache), same scenarios, same JSON lines. Writes
# OUT/results.jsonl, OUT/table.md, OUT/latency.svg (the lock), OUT/toolkit.jsonl, OUT/toolkit.md
# (idempotent execution, shared values), OUT/ratelimit.jsonl, OUT/ratelimit.md (rate limiting)
# and OUT/cache.jsonl, OUT/cache.md (the cache); see docs/performance.md.
#
# usage: scripts/bench.sh [--duration SECS] [--peers DIR] [--out DIR] [--impl "NAMES"] [--suite NAME] [--pin]
#   --duration  seconds per scenario and impl (default 5)
#   --peers     the peers' folder (default ../shared/peers next to this repository)
#   --out       output folder (default target/bench)
#   --impl      lock peers to run (default all: raw redis-py python-redis-lock node-redlock redis-semaphore rslock)
#   --suite     lock; toolkit (idempotent execution, shared values, rate limiting and the cache,
#               beside toolkit/toolkit.sh); ratelimit or cache (that part of the toolkit suite
#               alone); or all (default)
#   --pin       redis-server on CPU 0, every client on the other CPUs (taskset), as when Redis
#               runs on a host of its own; by default they share every CPU
set -euo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { sed -n 9,18p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# Relative paths are the caller's, not this repository's.
absolute() { case $1 in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
PEER_IMPLS="raw redis-py python-redis-lock node-redlock redis-semaphore rslock"

DURATION=5 PEERS=$ROOT/../shared/peers OUT=$ROOT/target/bench IMPLS=all SUITE=all PIN=false
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage ;;
    --pin) PIN=true; shift; continue ;;
  esac
  [ $# -ge 2 ] || usage
  case $1 in
    --duration) DURATION=$2 ;;
    --peers) PEERS=$(absolute "$2") ;;
    --out) OUT=$(absolute "$2") ;;
    --impl) IMPLS=$2 ;;
    --suite) SUITE=$2 ;;
    *) echo "bench.sh: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
if ! [[ $DURATION =~ ^[0-9]+([.][0-9]+)?$ ]] || ! awk "BEGIN { exit !($DURATION >= 0.1 && $DURATION <= 3600) }"; then
  echo "bench.sh: --duration '$DURATION': accepted: seconds from 0.1 to 3600, e.g. 5" >&2
  exit 2
fi
if [ "$IMPLS" != all ]; then
  for impl in $IMPLS; do
    [[ " $PEER_IMPLS " == *" $impl "* ]] || { echo "bench.sh: --impl '$impl': accepted: all or some of: $PEER_IMPLS" >&2; exit 2; }
  done
fi
LOCK=false TOOLKIT=false RATELIMIT=false CACHE=false
case $SUITE in
  lock) LOCK=true ;;
  toolkit) TOOLKIT=true RATELIMIT=true CACHE=true ;;
  ratelimit) RATELIMIT=true ;;
  cache) CACHE=true ;;
  all) LOCK=true TOOLKIT=true RATELIMIT=true CACHE=true ;;
  *) echo "bench.sh: --suite '$SUITE': accepted: lock, toolkit, ratelimit, cache or all" >&2; exit 2 ;;
esac
if $LOCK; then
  [ -x "$PEERS/run.sh" ] || { echo "bench.sh: no peers at $PEERS (expected run.sh there; --peers DIR)" >&2; exit 2; }
fi
if $TOOLKIT || $RATELIMIT || $CACHE; then
  [ -x "$PEERS/toolkit/toolkit.sh" ] || { echo "bench.sh: no toolkit peers at $PEERS (expected toolkit/toolkit.sh there; --peers DIR, or --suite lock)" >&2; exit 2; }
fi
# Prefixes of the server's and the clients' commands: empty, or their CPUs under --pin.
SERVER=() CLIENT=()
if $PIN; then
  CPUS=$(nproc)
  [ "$CPUS" -ge 2 ] || { echo "bench.sh: --pin needs 2 CPUs or more; this machine has $CPUS" >&2; exit 2; }
  command -v taskset > /dev/null || { echo "bench.sh: --pin needs taskset (util-linux)" >&2; exit 2; }
  SERVER=(taskset -c 0) CLIENT=(taskset -c "1-$((CPUS - 1))")
  echo "[bench] redis-server on CPU 0, the clients on CPUs 1-$((CPUS - 1))" >&2
fi
scripts/ensure-redis.sh
mkdir -p "$OUT"

echo "[bench] building lock-bench (release)" >&2
cargo build --release --quiet -p lock-bench
BIN=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release

# One private redis-server for everyone, like the peers' own run.sh starts it.
RDIR=$(mktemp -d)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${SERVER[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$RDIR" --logfile "$RDIR/redis.log" >&2 &
RPID=$!
trap 'kill "$RPID" 2>/dev/null; wait "$RPID" 2>/dev/null; rm -rf "$RDIR"' EXIT
URL=redis://127.0.0.1:$PORT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

# The server's own CPU, user + system seconds (INFO cpu); fails when Redis does not answer.
server_cpu() {
  local info
  info=$(redis-cli -p "$PORT" info cpu) || return 1
  tr -d '\r' <<< "$info" | awk -F: '/^used_cpu_(user|sys):/ { s += $2; n++ } END { if (n != 2) exit 1; printf "%.6f", s }'
}
# Runs "$@", which prints one JSON line, and appends that line to file $1 with `server_cpu_s`:
# what the run cost the server. Client and server share this machine's cores, so a lock's
# throughput here is bounded by the two costs together (docs/performance.md). Returns the
# command's status, or 1 when the server CPU could not be read or the line not written.
# (Called in `||` lists, where `set -e` does not apply: every step is checked.)
with_server_cpu() {
  local file=$1 before after lines status=0
  shift
  before=$(server_cpu) || { echo "[bench] could not read the server's CPU (INFO cpu)" >&2; return 1; }
  lines=$("$@") || status=$?
  after=$(server_cpu) || { echo "[bench] could not read the server's CPU (INFO cpu)" >&2; return 1; }
  [ -n "$lines" ] || return $status
  python3 -c '
import json, sys
cost = round(float(sys.argv[2]) - float(sys.argv[1]), 3)
for line in sys.stdin.read().splitlines():
    try:
        value = json.loads(line)
    except ValueError:
        print(line)
        continue
    if isinstance(value, dict) and not value.get("error"):
        value["server_cpu_s"] = cost
    print(json.dumps(value))
' "$before" "$after" <<< "$lines" >> "$file" || return 1
  return $status
}

FAILED=0
# Scenario by scenario, ours next to the peers, so machine noise hits everyone alike; one impl
# at a time, so each line carries its own server CPU.
[ "$IMPLS" = all ] && IMPLS=$PEER_IMPLS
if $LOCK; then
  # Installs (first use) and builds happen here, outside the measured windows.
  echo "[bench] preparing the peers: $IMPLS" >&2
  for impl in $IMPLS; do
    env -u CARGO_TARGET_DIR "$PEERS/run.sh" --redis-url "$URL" --scenario uncontended --impl "$impl" --duration 0.1 > /dev/null
  done
  : > "$OUT/results.jsonl"
  for scenario in uncontended parallel contended; do
    echo "[bench] platform-lock / $scenario (${DURATION}s)" >&2
    with_server_cpu "$OUT/results.jsonl" "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario "$scenario" --duration "$DURATION" \
      || { echo "[bench] platform-lock / $scenario failed" >&2; FAILED=1; }
    for impl in $IMPLS; do
      # The peers build rslock with cargo into their own cache: not into this workspace's target dir.
      with_server_cpu "$OUT/results.jsonl" "${CLIENT[@]}" env -u CARGO_TARGET_DIR "$PEERS/run.sh" --redis-url "$URL" --scenario "$scenario" --impl "$impl" --duration "$DURATION"
    done
  done
  for scenario in scripts watchdog; do
    echo "[bench] platform-lock / $scenario" >&2
    "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario "$scenario" --duration "$DURATION" >> "$OUT/results.jsonl" \
      || { echo "[bench] platform-lock / $scenario failed" >&2; FAILED=1; }
  done

  "$BIN/bench-table" "$OUT/results.jsonl" > "$OUT/table.md" || FAILED=1
  "$BIN/bench-chart" --input "$OUT/results.jsonl" --output "$OUT/latency.svg" || FAILED=1
  cat "$OUT/table.md"
  echo "[bench] wrote $OUT/results.jsonl, $OUT/table.md, $OUT/latency.svg" >&2
fi

# Idempotent execution: ours (with the raw commands beneath it) next to the toolkit peers,
# scenario by scenario, on the same server.
if $TOOLKIT; then
  : > "$OUT/toolkit.jsonl"
  for scenario in first replay duplicates; do
    echo "[bench] platform-lock / idempotency $scenario (${DURATION}s)" >&2
    "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario "idempotency-$scenario" --duration "$DURATION" >> "$OUT/toolkit.jsonl" \
      || { echo "[bench] platform-lock / idempotency $scenario failed" >&2; FAILED=1; }
    # A peer that fails leaves the peers' error line, so the table lists it.
    "${CLIENT[@]}" "$PEERS/toolkit/toolkit.sh" --redis-url "$URL" --scenario "$scenario" --duration "$DURATION" >> "$OUT/toolkit.jsonl" \
      || echo "{\"impl\": \"powertools\", \"scenario\": \"$scenario\", \"error\": \"toolkit.sh exited $?\"}" >> "$OUT/toolkit.jsonl"
  done
  # Shared values have no peer here: their yardstick is the raw commands beneath each line.
  echo "[bench] platform-lock / values (${DURATION}s each)" >&2
  "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario values --duration "$DURATION" >> "$OUT/toolkit.jsonl" \
    || { echo "[bench] platform-lock / values failed" >&2; FAILED=1; }
  "$BIN/bench-table" "$OUT/toolkit.jsonl" > "$OUT/toolkit.md" || FAILED=1
  if $LOCK; then echo; fi
  cat "$OUT/toolkit.md"
  echo "[bench] wrote $OUT/toolkit.jsonl, $OUT/toolkit.md" >&2
fi

# Rate limiting: ours (with its raw-fred lines beneath it) next to the toolkit peers,
# scenario by scenario, on the same server.
if $RATELIMIT; then
  : > "$OUT/ratelimit.jsonl"
  for scenario in decide parallel hot-key accuracy; do
    echo "[bench] platform-lock / ratelimit $scenario (${DURATION}s)" >&2
    "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario "ratelimit-$scenario" --duration "$DURATION" >> "$OUT/ratelimit.jsonl" \
      || { echo "[bench] platform-lock / ratelimit $scenario failed" >&2; FAILED=1; }
    # A peer that fails leaves its error line; toolkit.sh failing as a whole leaves this one.
    "${CLIENT[@]}" "$PEERS/toolkit/toolkit.sh" --redis-url "$URL" --capability ratelimit --scenario "$scenario" --duration "$DURATION" >> "$OUT/ratelimit.jsonl" \
      || echo "{\"impl\": \"toolkit.sh\", \"scenario\": \"$scenario\", \"error\": \"toolkit.sh exited $?\"}" >> "$OUT/ratelimit.jsonl"
  done
  "$BIN/bench-table" "$OUT/ratelimit.jsonl" > "$OUT/ratelimit.md" || FAILED=1
  if $LOCK || $TOOLKIT; then echo; fi
  cat "$OUT/ratelimit.md"
  echo "[bench] wrote $OUT/ratelimit.jsonl, $OUT/ratelimit.md" >&2
fi
# The cache: ours (platform-lock, and platform-lock-near with the in-process tier) next to the
# toolkit peers, scenario by scenario, on the same server; then our push-delay.
if $CACHE; then
  : > "$OUT/cache.jsonl"
  for scenario in hit hit-parallel miss-load stampede; do
    echo "[bench] platform-lock / cache $scenario (${DURATION}s)" >&2
    "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario "cache-$scenario" --duration "$DURATION" >> "$OUT/cache.jsonl" \
      || { echo "[bench] platform-lock / cache $scenario failed" >&2; FAILED=1; }
    # The cached peer builds with cargo into its own cache: not into this workspace's target dir.
    "${CLIENT[@]}" env -u CARGO_TARGET_DIR "$PEERS/toolkit/toolkit.sh" --redis-url "$URL" --capability cache --scenario "$scenario" --duration "$DURATION" >> "$OUT/cache.jsonl" \
      || echo "{\"impl\": \"toolkit.sh\", \"scenario\": \"$scenario\", \"error\": \"toolkit.sh exited $?\"}" >> "$OUT/cache.jsonl"
  done
  echo "[bench] platform-lock / cache push-delay" >&2
  "${CLIENT[@]}" "$BIN/lock-bench" --redis-url "$URL" --scenario cache-push-delay >> "$OUT/cache.jsonl" \
    || { echo "[bench] platform-lock / cache push-delay failed" >&2; FAILED=1; }
  "$BIN/bench-table" "$OUT/cache.jsonl" > "$OUT/cache.md" || FAILED=1
  if $LOCK || $TOOLKIT || $RATELIMIT; then echo; fi
  cat "$OUT/cache.md"
  echo "[bench] wrote $OUT/cache.jsonl, $OUT/cache.md" >&2
fi
if [ "$FAILED" -ne 0 ]; then
  echo "[bench] some of our steps failed (see above and the error lines in results.jsonl, toolkit.jsonl, ratelimit.jsonl or cache.jsonl)" >&2
  exit 1
fi
