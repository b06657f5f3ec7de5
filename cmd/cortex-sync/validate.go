package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type validateOptions struct {
	src     sourceFlags
	output  string
	decrypt bool
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
field.

In a repository with a Fleet manifest (fleet.yaml at its top) and no
--path, it checks every desired set the Fleet can give: each rule's paths
together, once per host folder a {name} path finds; --host-name or --label
checks only what that host gets.`,
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
	cmd.Flags().BoolVar(&o.decrypt, "decrypt", false, "also decrypt every SOPS file the manifests name (decrypt: sops) with this host's age key (--age-key-file), touching nothing")
	return cmd
}

func validateRun(cmd *cobra.Command, g *globals, o *validateOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	co, done, err := fetchOffline(cmd, g, &o.src)
	if err != nil {
		return err
	}
	defer done()
	if f, err := resource.ReadFleet(co.Tree); co.Path == "." && !hostGiven(cmd) && (f != nil || err != nil) {
		return validateFleet(g, o, io, co, f, err)
	}
	opts := g.engine().Manifests()
	varsDecrypted := countDecrypts(&opts.Decrypt, o.decrypt)
	set, err := opts.Load(co.Tree, co.Path, driver.Kinds())
	decrypted := 0
	if err == nil && o.decrypt {
		decrypted, err = driver.CheckDecrypt(co.Tree, set, driver.NewDecrypter(g.ageKeyFile))
		decrypted += varsDecrypted()
	}
	if o.output == "json" {
		doc := validateDoc{Valid: err == nil, Source: co.url, Revision: co.Revision, Problems: []problemDoc{}}
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
	fmt.Fprintf(io.Out, "%s valid in %s\n", plural(set.Len(), "resource"), co.where)
	if o.decrypt {
		fmt.Fprintf(io.Out, "%s decrypted with this host's key\n", plural(decrypted, "SOPS file"))
	}
	return nil
}

// checkout is a fetched revision, and where it came from for messages.
type checkout struct {
	*source.Checkout
	url   string // the source's URL
	where string // … and its revision
}

// fetchOffline fetches the source (the current directory when none is
// given) touching nothing on the host: a directory needs no stat cache,
// and a Git source's cache goes to a temp dir unless --state-dir (or a
// config's stateDir) names where to keep it. done releases it all.
func fetchOffline(cmd *cobra.Command, g *globals, src *sourceFlags) (*checkout, func(), error) {
	if !src.given() {
		src.dir = "."
	}
	var cache state.Dir
	cleanup := func() {}
	if src.repo != "" {
		if cmd.Flags().Changed("state-dir") {
			cache = state.At(g.stateDir).Sub("cache")
		} else {
			tmp, err := os.MkdirTemp("", "cortex-sync-validate-")
			if err != nil {
				return nil, nil, err
			}
			cache, cleanup = state.At(tmp), func() { os.RemoveAll(tmp) }
		}
	}
	s, err := src.source(cache, g.log)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	co, err := s.Fetch(cmd.Context())
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	c := &checkout{Checkout: co, url: s.Ref().URL, where: s.Ref().URL}
	if p := s.Ref().Path; p != "" && p != "." {
		c.where += " (path " + p + ")"
	}
	if co.Revision != "" {
		c.where += " at " + co.Revision
	}
	return c, func() { co.Close(); cleanup() }, nil
}
