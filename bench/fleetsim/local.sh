#!/bin/sh
# make fleetsim: three fresh etcd members on 127.0.0.1 (clients on
# 24791-24793, so beside make fleet-etcd), PROXIES etcd gRPC proxies in
# front of them (on 24781…, metrics on 24771…; 0: none), fleetsim with HOSTS hosts and the
# flags given, then everything stops. Members, proxies and fleetsim run
# at nice 10.
#   sh bench/fleetsim/local.sh DIR ETCD HOSTS PROXIES [fleetsim flags]
set -eu
dir=${1:?a directory for data and logs}; etcd=${2:?the etcd binary}; hosts=${3:?hosts}; proxies=${4:?proxies}
shift 4
rm -rf "$dir"
mkdir -p "$dir"
members=http://127.0.0.1:24791,http://127.0.0.1:24792,http://127.0.0.1:24793
stop() {
	for f in "$dir"/proxy*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	ETCD_PORTS=2479 sh examples/fleet/etcd-local.sh stop "$dir/etcd"
}
trap stop EXIT
ETCD_PORTS=2479 nice -n 10 sh examples/fleet/etcd-local.sh start "$dir/etcd" "$etcd"
eps=$members
pm=
if [ "$proxies" -gt 0 ]; then
	eps=
	i=1
	while [ $i -le "$proxies" ]; do
		nice -n 10 "$etcd" grpc-proxy start --endpoints "$members" --listen-addr 127.0.0.1:2478$i \
			--advertise-client-url 127.0.0.1:2478$i --metrics-addr http://127.0.0.1:2477$i >"$dir/proxy$i.log" 2>&1 &
		echo $! >"$dir/proxy$i.pid"
		eps=$eps${eps:+,}http://127.0.0.1:2478$i
		pm=$pm${pm:+,}http://127.0.0.1:2477$i
		i=$((i + 1))
	done
	sleep 1
	echo "etcd gRPC proxies: $eps (logs in $dir)"
fi
nice -n 10 go run ./bench/fleetsim -endpoints "$eps" -metrics-urls "$members" -proxy-metrics-urls "$pm" -hosts "$hosts" "$@"
