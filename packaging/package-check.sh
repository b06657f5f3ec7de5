#!/bin/sh
# make package-check: the fast local check of the .deb. It builds the
# binary from the work tree (uncommitted changes included) stamped as a
# release stamps it, packs it with nfpm alone (packaging/nfpm.yaml, the
# same as .goreleaser.yaml's nfpms) and checks the .deb's layout with
# check-deb.sh. No goreleaser, no archives, SBOMs or .rpm: make
# release-check builds the whole release.
# Usage: NFPM="go run github.com/goreleaser/nfpm/v2/cmd/nfpm@vX" packaging/package-check.sh
set -eu
cd "$(dirname "$0")/.."
: "${NFPM:?set NFPM to the nfpm command}"
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
commit=$(git rev-parse HEAD)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
modified=$(test -n "$(git status --porcelain)" && echo true || true) # the binary says -dirty
export ARCH="$(dpkg --print-architecture)"
export VERSION="0.0.0~local"
export BINARY="$work/cortex-sync"
CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$commit -X main.date=$date -X main.modified=$modified" -o "$BINARY" ./cmd/cortex-sync
sh packaging/completions.sh
mkdir -p "$work/dist"
$NFPM package --config packaging/nfpm.yaml --packager deb --target "$work/dist/"
DEB_ONLY=1 sh packaging/check-deb.sh "$work/dist"
