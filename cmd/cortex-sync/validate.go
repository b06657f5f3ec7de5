package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type validateOptions struct {
	src    sourceFlags
	output string
}

func newValidateCmd(g *globals, io streams) *cobra.Command {
	o := &validateOptions{}
	cmd := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Load and check the manifests without touching the host",
		Long: `validate loads every manifest below DIR (or the --dir source) and checks it
strictly: unknown fields, wrong types, bad paths and modes, duplicate IDs,
overlapping paths, paths outside --allowed-path, missing dependencies and
cycles. Every problem is listed with its file, line, document, resource and
field.`,
		Example: `  # Check the manifests in the current directory
  cortex-sync validate

  # Check a checkout, refusing paths outside /etc/app and /srv
  cortex-sync validate ./repo --allowed-path /etc/app --allowed-path /srv

  # Check a branch of a remote repository
  cortex-sync validate --repo https://git.example.com/infra.git --branch main --path hosts/web1

  # Every problem as JSON (file, line, document, resource, field, message)
  cortex-sync validate ./repo -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.src.dir = args[0]
			}
			return validateRun(cmd, g, o, io)
		},
	}
	o.src.add(cmd)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func validateRun(cmd *cobra.Command, g *globals, o *validateOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	if !o.src.given() {
		o.src.dir = "."
	}
	// validate touches nothing on the host: a directory needs no stat cache,
	// and a Git source's cache goes to a temp dir unless --state-dir (or a
	// config's stateDir) names where to keep it.
	var cache state.Dir
	if o.src.repo != "" {
		if cmd.Flags().Changed("state-dir") {
			cache = state.At(g.stateDir).Sub("cache")
		} else {
			tmp, err := os.MkdirTemp("", "cortex-sync-validate-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			cache = state.At(tmp)
		}
	}
	s, err := o.src.source(cache, g.log)
	if err != nil {
		return err
	}
	co, err := s.Fetch(cmd.Context())
	if err != nil {
		return err
	}
	defer co.Close()
	set, err := g.engine().Manifests().Load(co.Tree, co.Path, driver.Kinds())
	if o.output == "json" {
		doc := validateDoc{Valid: err == nil, Source: s.Ref().URL, Revision: co.Revision, Problems: []problemDoc{}}
		if err != nil {
			doc.Problems = problemDocs(err)
		} else {
			doc.Resources = set.Len()
		}
		if perr := printJSON(io.Out, doc); perr != nil {
			return perr
		}
	}
	if err != nil {
		return &reconcile.ManifestError{Err: err}
	}
	if o.output == "json" {
		return nil
	}
	at := s.Ref().URL
	if co.Revision != "" {
		at += " at " + co.Revision
	}
	fmt.Fprintf(io.Out, "%d resources valid in %s\n", set.Len(), at)
	return nil
}
