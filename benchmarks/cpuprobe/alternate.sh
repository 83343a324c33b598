#!/usr/bin/env bash
# alternate.sh OLD_CHECKOUT [ROUNDS] [probe flags...]: builds cpuprobe against this checkout
# and against OLD_CHECKOUT (e.g. `git worktree add ../old ae81ee4`; the old build runs with
# -tags old and no new-group window), starts a scratch redis-server on a free loopback port,
# runs the two builds alternately ROUNDS times (default 3), and prints every line and then the
# median of each figure over the rounds.
#
# With CALLGRIND=1 the server runs under valgrind's callgrind, counting the instructions of
# script calls only (--toggle-collect=evalShaCommand): a count that does not move with the
# machine's load, unlike the usec of INFO commandstats. It runs about 40 times slower: use a
# smaller -n (2000).
set -euo pipefail
old=$(cd "$1" && pwd); rounds=${2:-3}; shift; [ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; sleep 1; rm -rf "$work"' EXIT
(cd "$here/.." && go build -o "$work/new" ./cpuprobe)
rm -rf "$old/benchmarks/cpuprobe" && cp -r "$here" "$old/benchmarks/cpuprobe"
(cd "$old/benchmarks" && go build -tags old -o "$work/old" ./cpuprobe)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
server=(redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --logfile "$work/redis.log")
grind=()
if [ "${CALLGRIND:-}" = 1 ]; then
  taskset -c 1 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=evalShaCommand \
    --callgrind-out-file="$work/callgrind.out.%p" "${server[@]}" >"$work/valgrind.log" 2>&1 &
  echo $! >"$work/pid"
  grind=(-callgrind "$(cat "$work/pid"):$work")
else
  taskset -c 1 "${server[@]}" --daemonize yes --pidfile "$work/pid"
fi
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
for r in $(seq "$rounds"); do
  taskset -c 0 "$work/new" -addr "127.0.0.1:$port" -label new "${grind[@]}" "$@" | tee -a "$work/out"
  taskset -c 0 "$work/old" -addr "127.0.0.1:$port" -label old "${grind[@]}" "$@" -windows none | tee -a "$work/out"
done
cp "$work/out" /tmp/cpuprobe.last
echo "== medians over $rounds rounds (Redis CPU µs per message; commands per message; with CALLGRIND=1, instructions per message)"
grep -v 'n/a' "$work/out" | sed -E \
  -e 's/.*build=([a-z]+) window=([a-z]+) case=([a-z0-9-]+) phase=([a-z+]+) .*script_us_per_msg=([0-9.]+) cmds_per_msg=([0-9.]+).*/\1 \2 \3 \4 µs\/msg \5 cmds\/msg \6/' \
  -e 's/.*build=([a-z]+) window=([a-z]+) case=([a-z0-9-]+) phase=([a-z+]+) instructions_per_msg=([0-9]+).*/\1 \2 \3 \4 instr\/msg \5 - -/' |
  sort -k3,3 -k4,4 -k5,5 -k1,1 -k2,2 -k6,6n | awk '
  { k=$1" "$2" "$3" "$4" "$5; v[k]=v[k]" "$6; c[k]=$8; n[k]++; if (!(k in seen)) { seen[k]=1; order[++m]=k } }
  END { for (i=1;i<=m;i++) { k=order[i]; split(substr(v[k],2),a," "); printf "%-44s %10.2f  %s cmds/msg  (rounds:%s)\n", k, a[int((n[k]+1)/2)], c[k], v[k] } }'
