package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// hostFlags are the host's identity in a fleet: its name and labels pick
// its paths from the repository's Fleet manifest (fleet.yaml), and name it
// in etcd.
type hostFlags struct {
	name   string
	labels []string
	value  resource.Host // parsed
}

func (h *hostFlags) add(f *pflag.FlagSet) {
	f.StringVar(&h.name, "host-name", "", "this host's name in a fleet: matched by fleet.yaml's rules and its {name} paths (default the hostname)")
	f.StringArrayVar(&h.labels, "label", nil, "a label of this host, KEY=VALUE, matched by fleet.yaml's rules; repeatable")
}

// parse checks the flags and fills value.
func (h *hostFlags) parse() error {
	h.value = resource.Host{Name: h.name}
	if h.value.Name == "" {
		name, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--host-name: the hostname cannot be read (%v); give --host-name", err)
		}
		h.value.Name = name
	}
	for _, l := range h.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: write KEY=VALUE, e.g. --label role=web", l)
		}
		if h.value.Labels == nil {
			h.value.Labels = map[string]string{}
		}
		h.value.Labels[k] = v
	}
	return nil
}
