#!/bin/sh
# Writes shell completions to completions/, for the archives and packages
# (a .goreleaser.yaml before-hook). The man pages are committed, under
# docs/man (make docs).
set -eu
cd "$(dirname "$0")/.."
rm -rf completions
mkdir -p completions
go build -o completions/.cortex-sync ./cmd/cortex-sync
for sh in bash zsh fish; do
	completions/.cortex-sync completion "$sh" > "completions/cortex-sync.$sh"
done
rm completions/.cortex-sync
