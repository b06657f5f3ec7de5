#!/bin/sh
# Before removal (not upgrade): stop and disable the agent. The processes
# it supervises keep running (KillMode=process) and the state dir stays:
# see "Uninstalling" in docs/install.md to stop them first.
set -e
if [ -d /run/systemd/system ]; then
	case "$1" in
	remove|purge|0)
		systemctl disable --now cortex-sync.service >/dev/null 2>&1 || true
		;;
	esac
fi
exit 0
