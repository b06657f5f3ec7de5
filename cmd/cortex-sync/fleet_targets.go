package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

type fleetTargetsOptions struct {
	src    sourceFlags
	output string
	vars   bool
}

func newFleetTargetsCmd(g *globals, io streams) *cobra.Command {
	o := &fleetTargetsOptions{}
	cmd := &cobra.Command{
		Use:   "targets [DIR]",
		Short: "Show which hosts get which paths from fleet.yaml (offline)",
		Long: `targets reads fleet.yaml at the top of the source (DIR, --dir or --repo) and
prints its rules in order — the host pattern and labels each matches, and
the paths it gives — then what this host gets (--host-name, default the
hostname, and --label). It needs no etcd: targeting is decided from Git,
on the host. --vars adds the variables this host's resources are rendered
with (substitute: true): its facts, then what the rules give it; a value
from an encrypted vars file shows as (secret), or as (secret; no age key on
this host) without --age-key-file.`,
		Example: `  cortex-sync fleet targets ./infra
  cortex-sync fleet targets --dir ./infra --host-name web3 --label role=web
  cortex-sync fleet targets ./infra --host-name web3 --vars
  cortex-sync fleet targets --repo https://git.example.com/infra.git --branch main -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.src.dir = args[0]
			}
			return fleetTargetsRun(cmd, g, o, io)
		},
	}
	o.src.add(cmd)
	addOutputFlag(cmd, &o.output)
	cmd.Flags().BoolVar(&o.vars, "vars", false, "show this host's variables for substitution (secret values redacted)")
	return cmd
}

// targetsDoc is `fleet targets -o json`.
type targetsDoc struct {
	Fleet   string            `json:"fleet"`
	Rules   []ruleDoc         `json:"rules"`
	Rollout *resource.Rollout `json:"rollout,omitempty"`
	Host    hostTargetDoc     `json:"host"`
}

type ruleDoc struct {
	Name    string            `json:"name,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Paths   []string          `json:"paths"`
	Windows resource.Windows  `json:"windows,omitempty"`
}

type hostTargetDoc struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Rule   int               `json:"rule"` // 1-based; 0 when none matches
	Paths  []string          `json:"paths"`
	Error  string            `json:"error,omitempty"`
	// Vars are the host's variables (--vars); VarsError why they cannot
	// be read.
	Vars      []varDoc `json:"vars,omitempty"`
	VarsError string   `json:"varsError,omitempty"`
	// Windows are the deploy windows the host takes a new revision in
	// (its rule's, else the rollout's), from WindowsFrom; WindowOpen says
	// whether one is open now, else WindowOpens when the next opens.
	Windows     resource.Windows `json:"windows,omitempty"`
	WindowsFrom string           `json:"windowsFrom,omitempty"`
	WindowOpen  bool             `json:"windowOpen,omitempty"`
	WindowOpens time.Time        `json:"windowOpens,omitzero"`
}

// windowText is a window as targets prints it.
func windowText(w resource.Window) string {
	return fmt.Sprintf("%q for %s (%s)", w.Schedule, w.Duration.Std(), cmp.Or(w.TimeZone, "UTC"))
}

func windowsText(ws resource.Windows) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = windowText(w)
	}
	return strings.Join(parts, ", ")
}

func fleetTargetsRun(cmd *cobra.Command, g *globals, o *fleetTargetsOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	f, co, done, err := readFleet(cmd, g, &o.src)
	if err != nil {
		return err
	}
	defer done()
	host := g.host.value
	doc := targetsDoc{Fleet: f.Name, Rules: []ruleDoc{}, Rollout: f.Spec.Rollout, Host: hostTargetDoc{Name: host.Name, Labels: host.Labels, Paths: []string{}}}
	for _, r := range f.Spec.Hosts {
		doc.Rules = append(doc.Rules, ruleDoc{Name: r.Match.Name, Labels: r.Match.Labels, Paths: r.Paths, Windows: r.Windows})
	}
	doc.Host.Windows, doc.Host.WindowsFrom = f.WindowsFor(host, true)
	if len(doc.Host.Windows) > 0 {
		doc.Host.WindowOpen, doc.Host.WindowOpens = doc.Host.Windows.At(time.Now())
		doc.Host.WindowOpens = doc.Host.WindowOpens.UTC()
	}
	t, terr := f.Resolve(co.Tree, host)
	if terr == nil {
		doc.Host.Rule, doc.Host.Paths = t.Rule+1, t.Paths
	} else {
		doc.Host.Error = terr.Error()
	}
	var verr error
	if o.vars {
		if doc.Host.Vars, verr = hostVarDocs(f, co, host, g.engine().Decrypt()); verr != nil {
			doc.Host.VarsError = verr.Error()
		}
	}
	if o.output == "json" {
		if err := printJSON(io.Out, doc); err != nil {
			return err
		}
		if terr != nil && hostGiven(cmd) || verr != nil {
			return &exitError{code: exitFailure}
		}
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Fleet %s (%s)\n\n", f.Name, resource.FleetFile)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tMATCH\tPATHS")
	for i, r := range doc.Rules {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", i+1, matchText(r.Name, r.Labels), strings.Join(r.Paths, ", "))
	}
	tw.Flush()
	for i, r := range doc.Rules {
		if len(r.Windows) > 0 {
			fmt.Fprintf(&b, "Rule %d deploy windows: %s\n", i+1, windowsText(r.Windows))
		}
	}
	if ro := f.Spec.Rollout; ro != nil {
		d, _ := ro.Settle() // ReadFleet refused one that does not settle
		fmt.Fprintf(&b, "\nRollout: maxUnavailable %s, canary %d, minReady %s, progressDeadline %s, failureThreshold %d\n",
			d.MaxUnavailable, d.Canary, d.MinReady.Std(), d.ProgressDeadline.Std(), d.FailureThreshold)
		if len(d.Windows) > 0 {
			fmt.Fprintf(&b, "Rollout deploy windows: %s\n", windowsText(d.Windows))
		}
	} else {
		b.WriteString("\nRollout: none (every host applies a new revision when it fetches it)\n")
	}
	fmt.Fprintf(&b, "\nThis host (%s, %s): ", host.Name, labelsText(host.Labels))
	if terr != nil {
		fmt.Fprintf(&b, "no paths:\n  %s\n", strings.ReplaceAll(terr.Error(), "\n", "\n  "))
	} else {
		fmt.Fprintf(&b, "rule %d: %s\n", t.Rule+1, strings.Join(t.Paths, ", "))
	}
	switch h := doc.Host; {
	case len(h.Windows) > 0 && h.WindowOpen:
		fmt.Fprintf(&b, "Deploy window: open now (%s)\n", h.WindowsFrom)
	case len(h.Windows) > 0:
		fmt.Fprintf(&b, "Deploy window: closed; the next opens at %s (%s)\n", h.WindowOpens.Format(time.RFC3339), h.WindowsFrom)
	}
	if o.vars && verr != nil {
		fmt.Fprintf(&b, "\nVariables: cannot be read:\n  %s\n", strings.ReplaceAll(verr.Error(), "\n", "\n  "))
	} else if o.vars {
		b.WriteString("\nVariables (substitute: true):\n")
		varsText(&b, doc.Host.Vars)
	}
	if _, err := fmt.Fprint(io.Out, b.String()); err != nil {
		return err
	}
	if terr != nil && hostGiven(cmd) {
		return &exitError{code: exitFailure} // the host named gets nothing
	}
	if verr != nil {
		return &exitError{code: exitFailure}
	}
	return nil
}

// readFleet fetches the source and reads its fleet.yaml; a source without
// one is an error saying what a Fleet is.
func readFleet(cmd *cobra.Command, g *globals, src *sourceFlags) (*resource.Fleet, *checkout, func(), error) {
	co, done, err := fetchOffline(cmd, g, src)
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := resource.ReadFleet(co.Tree)
	if err == nil && f == nil {
		err = fmt.Errorf("%s has no %s of kind Fleet at its top; see docs/fleet.md", co.where, resource.FleetFile)
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return f, co, done, nil
}

func matchText(name string, labels map[string]string) string {
	var parts []string
	if name != "" {
		parts = append(parts, "name "+name)
	}
	if len(labels) > 0 {
		parts = append(parts, "labels "+labelsText(labels))
	}
	if len(parts) == 0 {
		return "every host"
	}
	return strings.Join(parts, ", ")
}

func labelsText(labels map[string]string) string {
	if len(labels) == 0 {
		return "no labels"
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return strings.Join(kv, ",")
}
