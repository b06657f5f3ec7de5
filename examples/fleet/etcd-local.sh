#!/bin/sh
# Three etcd members on 127.0.0.1 for trying a fleet by hand: clients on
# 23791-23793, peers on 23801-23803, data and logs under DIR. Plain HTTP on
# loopback only: docs/fleet.md shows a real cluster (TLS, systemd).
#   sh examples/fleet/etcd-local.sh start DIR [ETCD]   # ETCD: default bin/etcd (make etcd)
#   sh examples/fleet/etcd-local.sh stop DIR
# ETCD_PORTS=2479 moves them to 24791-24793 and 24801-24803 (peers: one more).
set -eu
cmd=${1:?start or stop}; dir=${2:?a directory for data and logs}; etcd=${3:-bin/etcd}
c=${ETCD_PORTS:-2379}; p=$((c + 1))
cluster=m1=http://127.0.0.1:${p}1,m2=http://127.0.0.1:${p}2,m3=http://127.0.0.1:${p}3
case $cmd in
start)
	[ -x "$etcd" ] || { echo "$etcd missing: run make etcd" >&2; exit 1; }
	mkdir -p "$dir"
	for i in 1 2 3; do
		[ -f "$dir/m$i.pid" ] && kill -0 "$(cat "$dir/m$i.pid")" 2>/dev/null && continue
		"$etcd" --name m$i --data-dir "$dir/m$i" \
			--listen-client-urls http://127.0.0.1:$c$i --advertise-client-urls http://127.0.0.1:$c$i \
			--listen-peer-urls http://127.0.0.1:$p$i --initial-advertise-peer-urls http://127.0.0.1:$p$i \
			--initial-cluster "$cluster" --initial-cluster-token cortex-sync-demo \
			--log-level warn >"$dir/m$i.log" 2>&1 &
		echo $! >"$dir/m$i.pid"
	done
	# Healthy once a member answers with a leader (python3, not curl: the
	# demo needs only Go, git, python3 and make).
	python3 - "$c" <<'PY' || { echo "etcd did not become healthy: see $dir/m*.log" >&2; exit 1; }
import json, sys, time, urllib.request
for _ in range(100):
    try:
        if json.load(urllib.request.urlopen("http://127.0.0.1:%s1/health" % sys.argv[1], timeout=1)).get("health") == "true":
            raise SystemExit(0)
    except (OSError, ValueError):
        pass
    time.sleep(0.2)
raise SystemExit(1)
PY
	echo "etcd: http://127.0.0.1:${c}1,http://127.0.0.1:${c}2,http://127.0.0.1:${c}3 (logs in $dir)"
	;;
stop)
	for i in 1 2 3; do
		[ -f "$dir/m$i.pid" ] || continue
		pid=$(cat "$dir/m$i.pid")
		kill "$pid" 2>/dev/null || true
		n=0
		while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$dir/m$i.pid"
	done
	;;
*)
	echo "usage: $0 start|stop DIR [ETCD]" >&2; exit 2
	;;
esac
