#!/bin/sh
# After install or upgrade: make the state dir and, once, the agent's
# token, then make systemd see the unit. A fresh install is not started (it
# needs a source in /etc/cortex-sync/agent.yaml first); an upgrade restarts
# a running agent, and with KillMode=process the processes it supervises
# keep running and are re-adopted. $DPKG_ROOT (dpkg's, empty on a running
# system) is where the files go; systemd is left alone when it is set.
set -e
root=${DPKG_ROOT:-}
install -d -m 0700 "$root/var/lib/cortex-sync"
# The control API's bearer token (tokenFile in the packaged agent.yaml):
# without it any local user could suspend the agent or roll the host
# back. Made once, 0600, never replaced; the verbs run on the state dir
# find it through the agent's report (docs/agent.md#security).
token=$root/etc/cortex-sync/token
if [ ! -e "$token" ]; then
	install -d -m 0755 "$root/etc/cortex-sync"
	(
		umask 077
		od -An -vtx1 -N32 /dev/urandom | tr -d ' \n' >"$token.new"
		echo >>"$token.new"
		mv -f "$token.new" "$token"
	)
fi
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$1" = "configure" ] && [ -n "$2" ] || [ "$1" = "2" ]; then
		# deb: configure <old-version>; rpm: $1 is the number of installed copies.
		systemctl try-restart cortex-sync.service >/dev/null 2>&1 || true
	fi
fi
exit 0
