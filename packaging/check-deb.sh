#!/bin/sh
# Checks a built .deb's layout: extracts it into a scratch root (dpkg -x)
# and checks that every file is where the systemd unit and the docs say,
# with the right modes, that the config is a conffile, and that the
# packaged binary runs, carries its stamp and reads the packaged config.
# Usage: packaging/check-deb.sh DIST_DIR
# With DEB_ONLY=1 (make package-check: nfpm alone), the release's other
# artifacts (.rpm, SBOMs, checksums.txt) are not looked for.
set -eu
dist=${1:-dist}
arch=$(dpkg --print-architecture)
deb=$(ls "$dist"/cortex-sync_*_"$arch".deb | head -n1)
[ -f "$deb" ] || { echo "no $arch .deb in $dist"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root
dpkg -x "$deb" "$root"
dpkg-deb -e "$deb" "$scratch/control"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

unit=$root/usr/lib/systemd/system/cortex-sync.service
[ -f "$unit" ] && ok "unit at /usr/lib/systemd/system/cortex-sync.service" || bad "no unit"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
bin=${exec_start%% *}
[ -x "$root$bin" ] && ok "ExecStart binary $bin is in the package" || bad "ExecStart names $bin, not in the package"
config=$(printf '%s\n' "$exec_start" | sed -n 's/.*--config \([^ ]*\).*/\1/p')
[ -f "$root$config" ] && ok "ExecStart config $config is in the package" || bad "ExecStart reads $config, not in the package"
grep -qx "$config" "$scratch/control/conffiles" && ok "$config is a conffile (kept on upgrade)" || bad "$config is not a conffile"
[ "$(stat -c %a "$root$config")" = 640 ] && ok "$config is 0640" || bad "$config mode $(stat -c %a "$root$config")"
[ -d "$root/var/lib/cortex-sync" ] && [ "$(stat -c %a "$root/var/lib/cortex-sync")" = 700 ] \
	&& ok "/var/lib/cortex-sync is 0700" || bad "/var/lib/cortex-sync missing or not 0700"
for f in /usr/share/man/man1/cortex-sync.1 /usr/share/man/man1/cortex-sync-sync.1 \
	/usr/share/bash-completion/completions/cortex-sync /usr/share/zsh/vendor-completions/_cortex-sync \
	/usr/share/fish/vendor_completions.d/cortex-sync.fish; do
	[ -s "$root$f" ] && ok "$f" || bad "no $f"
done
for s in postinst prerm postrm; do
	[ -x "$scratch/control/$s" ] && ok "maintainer script $s" || bad "no $s"
done

version=$("$root$bin" version)
echo "$version" | grep -q "(commit [0-9a-f]\{12\}\(-dirty\)\{0,1\}, committed " && ok "stamped: $version" || bad "not stamped: $version"
[ "$("$root$bin" --version)" = "$version" ] && ok "--version = version" || bad "--version differs"
"$root$bin" state export --config "$root$config" --state-dir "$scratch/state" >/dev/null \
	&& ok "the packaged binary reads the packaged config" || bad "the packaged config does not load"

if command -v systemd-analyze >/dev/null 2>&1; then
	# verify checks ExecStart's binary on this host: point it at the scratch root.
	sed "s#$bin#$root$bin#; s#--config $config#--config $root$config#" "$unit" > "$scratch/cortex-sync.service"
	systemd-analyze verify --man=no "$scratch/cortex-sync.service" && ok "systemd-analyze verify" || bad "systemd-analyze verify"
else
	echo "skip: systemd-analyze not installed (apt-get install -y systemd)"
fi
if [ "${DEB_ONLY:-}" = 1 ]; then
	echo "skip: .rpm, SBOMs and checksums.txt (DEB_ONLY=1: make release-check builds them)"
	exit $fail
fi
rpm=$(ls "$dist"/cortex-sync-*.x86_64.rpm "$dist"/cortex-sync-*.aarch64.rpm 2>/dev/null | head -n1)
[ -n "$rpm" ] && ok "rpm built: $(basename "$rpm")" || bad "no .rpm"
ls "$dist"/*.cdx.json >/dev/null 2>&1 && ok "SBOMs: $(ls "$dist"/*.cdx.json | wc -l)" || bad "no SBOM"
(cd "$dist" && sha256sum --quiet -c checksums.txt) && ok "checksums.txt verifies" || bad "checksums.txt"
exit $fail
