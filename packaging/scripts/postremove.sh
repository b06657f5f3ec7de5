#!/bin/sh
# After removal: forget the unit; on purge, the token the package made.
# /var/lib/cortex-sync is kept, even on purge: it records what cortex-sync
# applied and holds the backups of what it overwrote. Remove it by hand
# when neither is wanted.
set -e
if [ "$1" = "purge" ]; then
	rm -f "${DPKG_ROOT:-}/etc/cortex-sync/token"
fi
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
