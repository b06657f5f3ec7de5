package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// gateFlags are the health gate on a new revision: run's, and sync's
// with --wait.
type gateFlags struct {
	minReady         time.Duration
	progressDeadline time.Duration
	onFailure        string
	failureLimit     int
	checks           hostChecks
}

// add adds the flags; the agent's take its defaults, sync's wait for
// health only (minReady 0) and take no progress deadline or onFailure
// (--wait-timeout and --rollback-on-failure say those).
func (f *gateFlags) add(cmd *cobra.Command, agent bool) {
	fs := cmd.Flags()
	if agent {
		fs.DurationVar(&f.minReady, "min-ready", reconcile.DefaultMinReady, "how long a new revision's processes must stay healthy (and its health checks pass) for it to be good")
		fs.DurationVar(&f.progressDeadline, "progress-deadline", reconcile.DefaultProgressDeadline, "how long a new revision has, from its apply, to be good; then it is bad")
		fs.StringVar(&f.onFailure, "on-failure", "", "what becomes of a bad revision: rollback (to the last good one; the default when there is one) or halt (keep it, and report)")
	} else {
		fs.DurationVar(&f.minReady, "min-ready", 0, "with --wait: how long what the sync changed must stay healthy (and the health checks pass)")
	}
	fs.IntVar(&f.failureLimit, "failure-limit", 0, "quick failures in a row of a process a new revision changed that make the revision bad; 0: when the process reaches its own startLimit (it is Failed)")
	fs.Var(&f.checks, "health-check", `a check that must pass for a revision to be good, as YAML: '{name: ssh, tcp: {address: "127.0.0.1:22"}}' (or http: {url: URL}, exec: {command: [ARGV]}); repeatable`)
}

// policy is the revision policy the flags say.
func (f *gateFlags) policy() (reconcile.RevisionPolicy, error) {
	p := reconcile.RevisionPolicy{MinReady: f.minReady, ProgressDeadline: f.progressDeadline, FailureLimit: f.failureLimit, Checks: f.checks}
	switch reconcile.OnFailure(f.onFailure) {
	case "", reconcile.OnFailureRollback, reconcile.OnFailureHalt:
		p.OnFailure = reconcile.OnFailure(f.onFailure)
	default:
		return p, fmt.Errorf("--on-failure %q: use rollback or halt", f.onFailure)
	}
	if f.minReady < 0 || f.progressDeadline < 0 || f.failureLimit < 0 {
		return p, fmt.Errorf("--min-ready, --progress-deadline and --failure-limit must not be negative")
	}
	return p, nil
}

// hostChecks is the --health-check flag: host checks, each given as YAML.
type hostChecks []reconcile.HostCheck

func (h *hostChecks) Set(s string) error {
	c, err := reconcile.ParseHostCheck(s)
	if err != nil {
		return err
	}
	for _, o := range *h {
		if o.Name == c.Name {
			return fmt.Errorf("two health checks are named %q", c.Name)
		}
	}
	*h = append(*h, c)
	return nil
}

func (h *hostChecks) String() string {
	var out []string
	for _, c := range *h {
		out = append(out, c.String())
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func (h *hostChecks) Type() string { return "check" }
