package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/notify"
)

// notifyFlags is the --notify flag (the Agent file's notify list): where
// the agent tells what it decides, each entry given as YAML.
type notifyFlags []notify.Config

func (n *notifyFlags) Set(s string) error {
	c, err := notify.Parse(s)
	if err != nil {
		return err
	}
	*n = append(*n, c)
	return nil
}

func (n *notifyFlags) String() string {
	var out []string
	for _, c := range *n {
		out = append(out, c.String())
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func (n *notifyFlags) Type() string { return "notifier" }

// Fields are the fields an entry may have: the Agent file refuses
// another on its own line.
func (n *notifyFlags) Fields() []string { return notify.Fields() }

// notifiers makes the configured notifiers (nil when none is) and what
// delivers for them until its ctx ends (then briefly what is queued).
func (n notifyFlags) notifiers(g *globals, gitURL string, reg prometheus.Registerer) (events.Sink, func(context.Context), error) {
	if len(n) == 0 {
		return nil, func(context.Context) {}, nil
	}
	metrics := notify.NewMetrics(reg)
	var sinks events.Tee
	var all []*notify.Notifier
	for i, c := range n {
		nt, err := notify.New(c, notify.Options{Host: g.host.value.Name, GitURL: gitURL, Metrics: metrics, Log: g.log})
		if err != nil {
			return nil, nil, fmt.Errorf("notify entry %d (--notify): %w", i+1, err)
		}
		sinks = append(sinks, nt)
		all = append(all, nt)
	}
	run := func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, nt := range all {
			wg.Go(func() { nt.Run(ctx) })
		}
		wg.Wait()
	}
	if len(sinks) == 1 {
		return sinks[0], run, nil
	}
	return sinks, run, nil
}

// notifyFiles are the secret and token files notify entries name: the
// agent's own, reserved from every manifest.
func notifyFiles(entries []notify.Config) []string {
	var out []string
	for _, c := range entries {
		out = append(out, c.Files()...)
	}
	return out
}
