#!/bin/sh
# After install or upgrade: make systemd see the unit. A fresh install is
# not started (it needs a source in /etc/cortex-sync/agent.yaml first); an
# upgrade restarts a running agent, and with KillMode=process the processes
# it supervises keep running and are re-adopted.
set -e
install -d -m 0700 /var/lib/cortex-sync
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$1" = "configure" ] && [ -n "$2" ] || [ "$1" = "2" ]; then
		# deb: configure <old-version>; rpm: $1 is the number of installed copies.
		systemctl try-restart cortex-sync.service >/dev/null 2>&1 || true
	fi
fi
exit 0
