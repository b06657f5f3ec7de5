#!/bin/sh
# make release-check: a snapshot release of the committed HEAD, then a check
# of the .deb's layout. It builds in a fresh clone, so what is checked is
# what a release would build (uncommitted changes are not in it), and so
# GoReleaser finds the remote it reads the commit and date from.
# Usage: GORELEASER="go run github.com/goreleaser/goreleaser/v2@vX" packaging/release-check.sh
set -eu
cd "$(dirname "$0")/.."
: "${GORELEASER:?set GORELEASER to the goreleaser command}"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "note: uncommitted changes are not in the snapshot (it builds HEAD $(git rev-parse --short HEAD))"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q --no-checkout . "$work/src"
git -C "$work/src" checkout -q --detach "$(git rev-parse HEAD)"
git -C "$work/src" remote set-url origin https://github.com/cortex-sync/cortex-sync.git
(cd "$work/src" && $GORELEASER check && $GORELEASER release --snapshot --clean)
rm -rf dist
cp -r "$work/src/dist" dist
sh packaging/check-deb.sh dist
