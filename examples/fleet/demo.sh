#!/bin/sh
# make fleet-demo: a fleet of five agents on one machine. Three etcd
# members on 127.0.0.1, five agents (h1…h5, role=web) on sandbox roots
# under DIR, all following a Git repository made from this folder. It
# rolls out a change (a canary, then one host at a time), rolls out a
# broken one (the canary rolls itself back and the rollout pauses), moves
# the singleton by SIGKILLing its host's agent, and heals a hand edit with
# every etcd member down. Everything it started is stopped on the way out.
#   sh examples/fleet/demo.sh BIN ETCD DIR    # make fleet-demo passes them
set -eu
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); etcd=$2; dir=$3
here=$(cd "$(dirname "$0")" && pwd)
E=http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793
F="--etcd-endpoints $E --fleet example"
HOSTS="h1 h2 h3 h4 h5"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

cleanup() {
	set +e
	say "Stopping everything"
	for h in $HOSTS; do
		[ -f "$dir/$h.pid" ] && kill "$(cat "$dir/$h.pid")" 2>/dev/null
	done
	for h in $HOSTS; do
		[ -f "$dir/$h.pid" ] || continue
		pid=$(cat "$dir/$h.pid"); n=0
		while kill -0 "$pid" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
		rm -f "$dir/$h.pid"
	done
	# The agents leave their processes to their supervisors; an empty
	# desired set, pruned, stops them, and the supervisors exit.
	mkdir -p "$dir/empty"
	for h in $HOSTS; do
		[ -d "$dir/$h/state" ] && "$bin" sync --dir "$dir/empty" --root "$dir/$h/root" --state-dir "$dir/$h/state" \
			--prune --allow-empty --allow-source-change >/dev/null 2>&1
	done
	sh "$here/etcd-local.sh" stop "$dir/etcd"
	echo "stopped: no agent, supervisor, process or etcd member of the demo runs (files are under $dir)"
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND until it succeeds.
wait_for() {
	limit=$1; what=$2; shift 2; n=0
	until "$@" >/dev/null 2>&1; do
		n=$((n + 1))
		if [ $n -gt $((limit * 2)) ]; then echo "gave up waiting for $what" >&2; exit 1; fi
		sleep 0.5
	done
}
# on_head: every live host is Synced and Healthy on the repository's head.
on_head() {
	"$bin" fleet status $F --revision "main@sha1:$(git -C "$dir/repo" rev-parse HEAD)"
}
# paused: the newest rollout is paused, and its bad hosts are back on
# their last good revision.
paused() {
	"$bin" fleet status $F -o json | python3 -c 'import json,sys; d=json.load(sys.stdin); bad=[h for h in d["hosts"] if h.get("phase")=="bad"]
sys.exit(0 if any(r["newest"] and r["state"]=="paused" for r in d["rollouts"]) and bad and all(h["onLastGood"] for h in bad) else 1)'
}
holder() { "$bin" fleet status $F -o json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(next((s["holder"] for s in d["singletons"] if s["name"]=="report"), ""))'; }
runs_on() { [ "$(holder)" != "" ] && [ "$(holder)" != "$1" ]; }
commit() { git -C "$dir/repo" -c user.name=demo -c user.email=demo@example.com commit -qam "$1"; }
web_starts() {
	for h in $HOSTS; do sed "s/^/$h  /" "$dir/$h/state/logs/web.log" 2>/dev/null; done | sort -k2 | grep "$1" || true
}
start_agent() {
	h=$1
	"$bin" run --repo "file://$dir/repo" --branch main --root "$dir/$h/root" --state-dir "$dir/$h/state" \
		--host-name "$h" --label role=web $F --interval 2s --listen 127.0.0.1:0 --log-level info \
		>"$dir/$h.log" 2>&1 &
	echo $! >"$dir/$h.pid"
}

rm -rf "$dir"; mkdir -p "$dir"
trap cleanup EXIT
trap 'exit 130' INT TERM

say "The repository: examples/fleet, with a quick rollout (minReady 3s) for the demo"
mkdir -p "$dir/repo"; cp -R "$here/." "$dir/repo/"
sed -i.orig 's/^  rollout: .*/  rollout: {maxUnavailable: 1, canary: 1, minReady: 3s, progressDeadline: 20s, failureThreshold: 1}/' "$dir/repo/fleet.yaml"
rm -f "$dir/repo/fleet.yaml.orig"
git -C "$dir/repo" init -q -b main && git -C "$dir/repo" add -A && commit "the fleet"
run "$bin" fleet targets "$dir/repo" --host-name h1 --label role=web

say "Three etcd members on 127.0.0.1"
sh "$here/etcd-local.sh" start "$dir/etcd" "$etcd"

say "Five agents: h1…h5, role=web, each on its own root and state dir under $dir"
for h in $HOSTS; do mkdir -p "$dir/$h/root"; start_agent "$h"; done
echo "waiting until every host is Synced and Healthy (the first install rolls out too: one host at a time)"
wait_for 180 "the fleet converged" on_head
run "$bin" fleet status $F

say "A change that restarts the web server: the canary first, then one host at a time, minReady apart"
sed -i.orig 's/version: 1/version: 2/' "$dir/repo/roles/web/app.yaml"; rm -f "$dir/repo/roles/web/app.yaml.orig"
commit "web: version 2"
wait_for 180 "version 2 everywhere" on_head
web_starts "version: 2"
run "$bin" fleet status $F

say "A broken change (readiness never passes): it stops at the canary, which rolls itself back"
sed -i.orig "s/version: 2/version: 3/; s/^    status: ok\$/    status: broken/" "$dir/repo/roles/web/app.yaml"; rm -f "$dir/repo/roles/web/app.yaml.orig"
commit "web: version 3, broken"
wait_for 120 "the rollout paused" paused
web_starts "version: 3"
set +e; run "$bin" fleet status $F; echo "exit status $? (1: not converged)"; set -e

say "The singleton runs on one host; SIGKILL that host's agent and another takes it over"
h=$(holder); echo "report runs on $h"
kill -9 "$(cat "$dir/$h.pid")"; echo "$ kill -9 <agent of $h>"
wait_for 60 "another host running report" runs_on "$h"
echo "report now runs on $(holder)"
tail -n 2 "$dir/$h/state/logs/report.log"
start_agent "$h"

say "Every etcd member stopped: a hand edit is still healed, fleet status cannot tell (exit 2)"
sh "$here/etcd-local.sh" stop "$dir/etcd"
echo "edited by hand" >"$dir/h2/root/etc/web/app.conf"; echo "$ echo 'edited by hand' > h2/root/etc/web/app.conf"
wait_for 30 "the hand edit healed" grep -q "version: 2" "$dir/h2/root/etc/web/app.conf"
run cat "$dir/h2/root/etc/web/app.conf"
set +e; run "$bin" fleet status $F; echo "exit status $? (2: etcd could not be read)"; set -e
run "$bin" status --root "$dir/h2/root" --state-dir "$dir/h2/state" | sed -n '1,14p'
