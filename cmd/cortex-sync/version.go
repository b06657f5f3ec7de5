package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Stamped by release builds (.goreleaser.yaml):
//
//	-ldflags "-X main.version=1.2.0 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// and by `make build` (commit, date, and modified=true for a work tree with
// changes). Left empty, they are read from the build info Go records: the
// module version for `go install …@v1.2.0`, the VCS revision and time for
// a build in a Git checkout, and "(devel)" when Go recorded nothing.
var version, commit, date, modified string

// buildInfo says which cortex-sync this is.
type buildInfo struct {
	Version, Commit, Date string
	Modified              bool // built from a work tree with uncommitted changes
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date, Modified: commit != "" && modified == "true"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b = fromBuildInfo(b, bi)
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	return b
}

// fromBuildInfo fills what the linker flags left empty from Go's build info.
func fromBuildInfo(b buildInfo, bi *debug.BuildInfo) buildInfo {
	if b.Version == "" && bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.time":
			if b.Date == "" {
				b.Date = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true" && commit == ""
		}
	}
	return b
}

// String is the line `cortex-sync version` and `--version` print.
func (b buildInfo) String() string {
	s := "cortex-sync " + b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if b.Modified {
			c += "-dirty"
		}
		s += " (commit " + c
		if b.Date != "" {
			s += ", committed " + b.Date // the commit's time: releases stamp it too
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd(io streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long: `version prints the release, the commit it was built from and when, and the
Go toolchain and platform. Release binaries and packages carry what the
release stamped; "go install" builds carry the module version; a build in
a Git checkout carries the commit.`,
		Example: `  cortex-sync version
  cortex-sync --version
  cortex-sync version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(io.Out, currentBuild().doc())
			}
			_, err := fmt.Fprintln(io.Out, currentBuild())
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// addVersionFlag gives the root command --version, printing exactly what
// `cortex-sync version` prints.
func addVersionFlag(root *cobra.Command) {
	root.Version = currentBuild().String()
	root.SetVersionTemplate("{{.Version}}\n")
}
