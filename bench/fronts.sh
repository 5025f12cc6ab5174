#!/usr/bin/env bash
# Side by side on this machine: `captchaq loadtest --front` against one
# `serve --amqp` gateway on SQLite, and against two replicas on PostgreSQL
# behind HAProxy (deploy/haproxy), alternating, one worker for both, an
# instant simulator. Prints each run's numbers with the load average and
# the CPU seconds each process took during it (where the time goes).
# Needs the broker, PostgreSQL and haproxy (as .ci/run sets up).
# Usage: [FRONTS_CLIENT=JSON] bench/fronts.sh [ROUNDS] [LOADTEST FLAGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}; shift || true
extra=("$@")
dir=$(mktemp -d)
prefix=bench-fronts-$$
db=captchaq_bench_fronts_$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  [ -n "${FRONTS_KEEP:-}" ] && echo "logs kept in $dir" || rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/captchaq" ./cmd/captchaq
# The broker and the database are shared with tests that restart them:
# hold their test locks shared, as their tests do (internal/brokertest:
# through its gate; internal/pgtest), so none restarts them mid-run.
tmp=${TMPDIR:-/tmp}
exec 7>"$tmp/captchaq-broker-test.gate" 8>"$tmp/captchaq-broker-test.lock" 9>"$tmp/captchaq-postgres-test.lock"
flock -s 7; flock -s 8; flock -u 7
flock -s 9
cq="$dir/captchaq"
psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $db" >/dev/null
export CAPTCHAQ_LOADTEST_KEY=bench-client-key
# FRONTS_CLIENT: the load's client, with limits to measure their cost
# (e.g. '{"name":"load","key":"bench-client-key","rate":100000,"max_inflight":100000}').
client=${FRONTS_CLIENT:-'{"name":"load","key":"bench-client-key"}'}
echo "[$client]" > "$dir/clients.json"

# start NAME ARGS...: runs a process with its log in $dir/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
}
# addr NAME REGEX: waits for the log line giving its address.
addr() {
  for _ in $(seq 1 600); do
    local a; a=$(grep -oE "$2" "$dir/$1.log" | head -1 || true)
    if [ -n "$a" ]; then echo "$a"; return; fi
    sleep 0.1
  done
  echo "$1 did not start:" >&2; cat "$dir/$1.log" >&2; exit 1
}
start sim "$cq" sim --addr 127.0.0.1:0 --key bench-provider-key --instant --threads 100000 --no-poll-ban
sim=$(addr sim 'http://127\.0\.0\.1:[0-9]+')
CAPTCHAAI_KEY=bench-provider-key start worker "$cq" worker --amqp amqp://guest:guest@127.0.0.1:5672/ --prefix "$prefix" \
  --api-url "$sim" --threads 5000 --poll-interval 10ms --owner bench-fronts-worker
gw=(serve --amqp amqp://guest:guest@127.0.0.1:5672/ --prefix "$prefix" --clients "$dir/clients.json" --listen 127.0.0.1:0)
start sqlite "$cq" "${gw[@]}" --store "$dir/gateway.db"
start r1 "$cq" "${gw[@]}" --store "postgres://postgres@127.0.0.1:5432/$db"
start r2 "$cq" "${gw[@]}" --store "postgres://postgres@127.0.0.1:5432/$db"
a_sqlite=$(addr sqlite 'addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
a_r1=$(addr r1 'addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
a_r2=$(addr r2 'addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed '/server r3 /d' deploy/haproxy/haproxy.cfg > "$dir/haproxy.cfg"
CAPTCHAQ_LISTEN=127.0.0.1:$port CAPTCHAQ_R1=$a_r1 CAPTCHAQ_R2=$a_r2 start haproxy haproxy -db -f "$dir/haproxy.cfg"
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

# cpu PID...: CPU seconds (user+system) the processes took so far.
cpu() {
  local t=0
  for p in "$@"; do
    read -r -a f < "/proc/$p/stat" || continue
    t=$((t + f[13] + f[14]))
  done
  echo "scale=2; $t / $(getconf CLK_TCK)" | bc
}
pgpids() { pgrep -u postgres -d' ' postgres || true; }
brokerpids() { pgrep -d' ' beam.smp || true; }
# dbstats: the bench database's transactions (each statement outside a
# transaction is one) and the server's WAL flushes, so far.
dbstats() {
  psql -h 127.0.0.1 -U postgres -Atc "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db'),
    (SELECT wal_sync FROM pg_stat_wal)" | tr '|' ' '
}
snapshot() {
  echo "$(cpu "$pid_sqlite") $(cpu "$pid_r1") $(cpu "$pid_r2") $(cpu "$pid_haproxy") $(cpu "$pid_worker") $(cpu $(pgpids)) $(cpu $(brokerpids)) $(dbstats)"
}
run() { # run LABEL URL
  local before after
  before=($(snapshot))
  echo "== $1 ($(cut -d' ' -f1-3 /proc/loadavg) load before)"
  /usr/bin/time -f "loadtest client: %U s user %S s system" "$cq" loadtest --front "$2" "${extra[@]}" 2>&1 | tee "$dir/run.out" | sed 's/^/   /' || true
  after=($(snapshot))
  local names=(sqlite-gateway replica1 replica2 haproxy worker postgresql rabbitmq)
  printf '   CPU s during the run:'
  for i in "${!names[@]}"; do printf ' %s %.1f' "${names[$i]}" "$(echo "${after[$i]} - ${before[$i]}" | bc)"; done
  echo
  local tasks; tasks=$(grep -oE 'tasks: [0-9]+ submitted' "$dir/run.out" | grep -oE '[0-9]+' || echo 0)
  local xacts=$((after[7] - before[7])) syncs=$((after[8] - before[8]))
  if [ "$xacts" -gt 0 ] && [ "$tasks" -gt 0 ]; then
    echo "   PostgreSQL during the run: $xacts statements ($(echo "scale=1; $xacts / $tasks" | bc) a task, res.php and the replicas' reads included), $syncs WAL flushes ($(echo "scale=2; $syncs / $tasks" | bc) a task)"
  fi
}
for r in $(seq 1 "$rounds"); do
  run "round $r: one gateway on SQLite" "http://$a_sqlite"
  run "round $r: two replicas on PostgreSQL behind HAProxy" "http://127.0.0.1:$port"
  if [ -n "${FRONTS_DIRECT:-}" ]; then
    run "round $r: replica 1 on PostgreSQL, straight" "http://$a_r1"
  fi
done
