#!/usr/bin/env bash
# probe.sh [CALLS] [PER_CALL] [BYTES]: for each layout of copy.lua, starts a scratch
# redis-server under valgrind's callgrind on a free loopback port, counting the instructions of
# script calls only, sends it CALLS calls (default 250) of PER_CALL messages (default 8, the
# size of a round of 16 goroutines publishing one message each) of BYTES (136: a 100 B payload
# as the default marshaler stores it), and prints the instructions per message of each layout
# and beyond the baseline (layout none). Needs valgrind and python3.
set -euo pipefail
calls=${1:-250}; per=${2:-8}; size=${3:-136}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'for p in "$work"/pid.*; do kill "$(cat "$p")" 2>/dev/null || true; done; sleep 1; rm -rf "$work"' EXIT
# calls SHA LAYOUT writes the calls of one layout in Redis's protocol, for redis-cli --pipe.
calls_of() {
  python3 - "$calls" "$per" "$size" "$1" "$2" <<'PY'
import sys
calls, per, size = map(int, sys.argv[1:4])
sha, layout = sys.argv[4:6]
def resp(*args):
    out = ['*%d\r\n' % len(args)]
    for a in args:
        a = str(a)
        out.append('$%d\r\n%s\r\n' % (len(a.encode()), a))
    return ''.join(out)
msg = 'x' * size
for c in range(calls):
    sys.stdout.write(resp('EVALSHA', sha, 0, layout, 1000000 + c * per, 1764000000000000 + c * 37,
                          *([msg] * per)))
PY
}
base=0
for layout in none zset packed struct list; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0))
print(s.getsockname()[1])')
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect=evalShaCommand \
    --callgrind-out-file="$work/out.$layout" redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly no --dir "$work" --logfile "$work/redis.$layout.log" \
    >"$work/valgrind.$layout.log" 2>&1 &
  echo $! >"$work/pid.$layout"
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
  redis-cli -p "$port" hset window '' 100000 >/dev/null
  sha=$(redis-cli -p "$port" script load "$(cat "$here/copy.lua")")
  calls_of "$sha" "$layout" | redis-cli -p "$port" --pipe >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$(cat "$work/pid.$layout")" 2>/dev/null || true
  total=$(sed -n 's/^summary: //p' "$work/out.$layout")
  per_msg=$(( total / (calls * per) ))
  [ "$layout" = none ] && base=$per_msg
  echo "layout=$layout calls=$calls per_call=$per bytes=$size instructions_per_msg=$per_msg beyond_none=$(( per_msg - base ))"
done
