package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// hostGiven reports whether the command line or config named this host.
func hostGiven(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("host-name") || cmd.Flags().Changed("label")
}

// targetDoc is one desired set `validate -o json` checked in a fleet.
type targetDoc struct {
	Rule      int      `json:"rule"` // 1-based
	Match     string   `json:"match"`
	Host      string   `json:"host,omitempty"`
	Paths     []string `json:"paths"`
	Resources int      `json:"resources"`
	Valid     bool     `json:"valid"`
}

// caseError is a problem found in one desired set of a fleet.
type caseError struct {
	what string
	err  error
}

func (e *caseError) Error() string { return e.err.Error() + " [" + e.what + "]" }
func (e *caseError) Unwrap() error { return e.err }

// validateFleet checks every desired set the Fleet can give (ferr: the
// Fleet manifest's own problems).
func validateFleet(g *globals, o *validateOptions, io streams, co *checkout, f *resource.Fleet, ferr error) error {
	var problems resource.Problems
	var targets []targetDoc
	seen := map[string]bool{}
	add := func(what string, err error) {
		var p resource.Problems
		if !errors.As(err, &p) {
			p = resource.Problems{err}
		}
		for _, e := range p {
			if !seen[e.Error()] { // a base's problem shows once, not once a rule
				seen[e.Error()] = true
				if what != "" {
					e = &caseError{what, e}
				}
				problems = append(problems, e)
			}
		}
	}
	if ferr != nil {
		add("", ferr)
	} else {
		opts := g.engine().Manifests()
		for _, c := range f.Cases(co.Tree) {
			rule := f.Spec.Hosts[c.Rule]
			t := targetDoc{Rule: c.Rule + 1, Match: matchText(rule.Match.Name, rule.Match.Labels), Host: c.Host, Paths: []string{}}
			what := fmt.Sprintf("%s rule %d (%s)", resource.FleetFile, t.Rule, t.Match)
			if c.Host != "" {
				what += ", host " + c.Host
			}
			paths, err := f.RulePaths(co.Tree, c.Rule, c.Host)
			if err == nil {
				t.Paths = paths
				var set *resource.Set
				copts := opts
				copts.Vars = caseVars(g, co, f, c, func(err error) { add(what, err) })
				if set, err = copts.LoadPaths(co.Tree, paths, driver.Kinds()); err == nil {
					t.Resources, t.Valid = set.Len(), true
				}
			}
			if err != nil {
				add(what, err)
			}
			targets = append(targets, t)
		}
	}
	if o.output == "json" {
		doc := validateDoc{Valid: len(problems) == 0, Source: co.url, Revision: co.Revision, Problems: []problemDoc{}, Targets: targets}
		if len(problems) > 0 {
			doc.Problems = problemDocs(problems)
		}
		for _, t := range targets {
			doc.Resources += t.Resources
		}
		if err := printJSON(io.Out, doc); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &reconcile.ManifestError{Err: problems}
	}
	if o.output == "json" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Fleet %s in %s: every rule's paths are valid\n", f.Name, co.where)
	for _, t := range targets {
		host := ""
		if t.Host != "" {
			host = ", host " + t.Host
		}
		fmt.Fprintf(&b, "  rule %d (%s)%s: %s: %s\n", t.Rule, t.Match, host, strings.Join(t.Paths, ", "), plural(t.Resources, "resource"))
	}
	_, err := fmt.Fprint(io.Out, b.String())
	return err
}

// caseVars are the variables to check a desired set of the fleet with: its
// host is not known (a host folder gives at most its name), so every name
// is taken as defined and only each template's syntax is checked; the
// vars files the rule names are read, and their problems reported (of an
// encrypted one this machine has no key for, its names and shape).
// validate --host-name checks one host strictly.
func caseVars(g *globals, co *checkout, f *resource.Fleet, c resource.Case, report func(error)) *vars.Set {
	h := resource.Host{Name: c.Host}
	for k, v := range f.Spec.Hosts[c.Rule].Match.Labels {
		if h.Labels == nil {
			h.Labels = map[string]string{}
		}
		h.Labels[k] = v // a host this rule matches has these
	}
	s, err := f.Vars(co.Tree, h, g.engine().Decrypt())
	var p resource.Problems
	if errors.As(err, &p) {
		for _, e := range p {
			report(e)
		}
	}
	if s == nil {
		s = resource.HostVars(h)
	}
	return s.Lenient()
}
