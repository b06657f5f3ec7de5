package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func newVersionCmd(io streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			v := version
			if v == "" {
				v = "(devel)"
				if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
					v = bi.Main.Version
				}
			}
			fmt.Fprintf(io.Out, "cortex-sync %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
