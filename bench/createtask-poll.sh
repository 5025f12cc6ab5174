#!/usr/bin/env bash
# Side by side on this machine, alternating: `captchaq batch --providers`
# at its defaults on one createTask provider (the simulator, enforcing
# CapMonster Cloud's rule with --task-result-gap 2s), on the same with
# "poll_gap": "500ms" and no rule at the simulator (one gap for every
# provider, as before per-provider gaps), and on an in.php provider with
# bulk polls. 40 Turnstile and 40 reCAPTCHA v2 tasks, 40 threads, the
# simulator's solve times at scale 1 (Turnstile 8 s, reCAPTCHA 25 s
# median). Prints each run's requests a task, the simulator's
# ready-to-fetched quantiles, its too_many_requests and bans, and the load
# average at the start of the run.
# Usage: bench/createtask-poll.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
dir=$(mktemp -d)
sim=""
cleanup() {
  [ -n "$sim" ] && kill "$sim" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/captchaq" ./cmd/captchaq
cq="$dir/captchaq"
for i in $(seq 1 40); do
  echo '{"id":"ts-'"$i"'","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB3x","pageurl":"https://shop.example/p'"$i"'"}}'
  echo '{"id":"rc-'"$i"'","method":"userrecaptcha","params":{"googlekey":"6Le-x","pageurl":"https://shop.example/r'"$i"'"}}'
done > "$dir/tasks.jsonl"

# run NAME PORT PROVIDERS_JSON [SIM FLAGS...]
run() {
  local name=$1 port=$2 providers=$3
  shift 3
  "$cq" sim --addr "127.0.0.1:$port" --key sim-key --threads 40 --methods turnstile,userrecaptcha,base64 --seed 7 "$@" 2>"$dir/$name.sim.log" &
  sim=$!
  until curl -fs -o /dev/null "http://127.0.0.1:$port/sim/stats"; do sleep 0.1; done
  echo "${providers//PORT/$port}" > "$dir/providers.json"
  local load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  BENCH_KEY=sim-key "$cq" batch "$dir/tasks.jsonl" --providers "$dir/providers.json" --store memory --out "$dir/$name.jsonl" 2>"$dir/$name.batch.log" || true
  curl -fs "http://127.0.0.1:$port/sim/stats" > "$dir/$name.stats.json"
  kill "$sim"; wait "$sim" 2>/dev/null || true
  sim=""
  python3 - "$name" "$load" "$dir/$name.stats.json" "$dir/$name.jsonl" <<'PY'
import json, sys
name, load, stats, results = sys.argv[1:]
s = json.load(open(stats))
c, r = s["calls"], s["ready_to_fetched"]
solved = sum(1 for l in open(results) if json.loads(l)["status"] == "solved")
reqs = sum(c[k] for k in ("submit", "poll_single", "poll_bulk", "balance", "report", "threadsinfo", "other"))
print(f"{name}: load {load}; {solved}/80 solved; {reqs / 80:.2f} requests a task "
      f"(submit {c['submit']}, single polls {c['poll_single']}, bulk polls {c['poll_bulk']}); "
      f"ready->fetched p50 {r['p50_seconds']:.2f} s, p90 {r['p90_seconds']:.2f} s, p99 {r['p99_seconds']:.2f} s; "
      f"too_many_requests {s['too_many_requests']}, bans {s['bans']}, utilization {s['utilization']:.3f}")
PY
}

ct='[{"name":"cm","url":"http://127.0.0.1:PORT","key_env":"BENCH_KEY","protocol":"createtask","threads":40}]'
ct500='[{"name":"cm","url":"http://127.0.0.1:PORT","key_env":"BENCH_KEY","protocol":"createtask","threads":40,"poll_gap":"500ms"}]'
inphp='[{"name":"ai","url":"http://127.0.0.1:PORT","key_env":"BENCH_KEY","threads":40,"methods":["turnstile","userrecaptcha","base64"]}]'
for round in $(seq 1 "$rounds"); do
  run "createtask-default-r$round" 18195 "$ct" --task-result-gap 2s
  run "createtask-500ms-r$round" 18196 "$ct500"
  run "inphp-bulk-r$round" 18197 "$inphp"
done
