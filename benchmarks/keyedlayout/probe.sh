#!/usr/bin/env bash
# probe.sh [MESSAGES] [BYTES] [INDEX_HASHES]: starts a scratch redis-server on a free loopback
# port, writes MESSAGES (default 1,000,000) messages of BYTES (136: a 100 B payload as the
# default marshaler stores it) in each layout of layout.lua, and prints Redis's used_memory per
# message for each (INFO memory, after minus before). Keys of 16 bytes ("order-" and 10 digits).
set -euo pipefail
n=${1:-1000000}; size=${2:-136}; nb=${3:-4096}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0))
print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --daemonize yes --pidfile "$work/pid" --logfile "$work/redis.log"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
used() { redis-cli -p "$port" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'; }
for layout in unkeyed keyed embedded; do
  redis-cli -p "$port" flushall >/dev/null
  before=$(used)
  redis-cli -p "$port" --eval "$here/layout.lua" , "$layout" "$n" "$size" "$nb" >/dev/null
  after=$(used)
  per=$(( (after - before) / n ))
  echo "layout=$layout messages=$n bytes=$size index_hashes=$nb used_memory_per_msg=$per"
done
