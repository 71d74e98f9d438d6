#!/bin/sh
# Run inside ghcr.io/rolloutfleet/redis by build.sh, as the chart runs it: uid 999, a
# read-only root, /data and /tmp writable (tmpfs here, emptyDirs in the chart), the
# password on redis-server's stdin. Exits non-zero on any difference.
set -eu
redis-server --version
[ "$(id -u):$(id -g)" = 999:999 ] || { echo "runs as $(id -u):$(id -g), not 999:999"; exit 1; }
if touch /written 2>/dev/null; then echo "the root filesystem is writable"; exit 1; fi
# The chart's redis.conf (templates/redis.yaml), with persistence on: /data is written.
cat >/tmp/redis.conf <<'CONF'
bind * -::*
port 6379
dir /data
save ""
appendonly yes
maxmemory 64mb
maxmemory-policy noeviction
CONF
REDIS_PASSWORD=smoke-password
export REDIS_PASSWORD
sh -c 'exec redis-server /tmp/redis.conf - <<END
requirepass $REDIS_PASSWORD
END' &
server=$!
tries=0
# The chart's readiness probe.
until REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli ping 2>/dev/null | grep -q PONG; do
  tries=$((tries + 1))
  [ "$tries" -lt 100 ] || { echo "redis-server did not answer PING"; kill "$server"; exit 1; }
  sleep 0.1
done
[ "$(redis-cli ping 2>&1)" != PONG ] || { echo "PING answered without the password"; exit 1; }
export REDISCLI_AUTH="$REDIS_PASSWORD"
[ "$(redis-cli set smoke ok)" = OK ] && [ "$(redis-cli get smoke)" = ok ]
redis-cli shutdown >/dev/null 2>&1 || true
wait "$server" || true
ls -la /data /data/appendonlydir
[ -n "$(ls /data/appendonlydir)" ] || { echo "nothing written to /data"; exit 1; }
echo "redis smoke: uid 999, read-only root, /data written, PING with the password"
