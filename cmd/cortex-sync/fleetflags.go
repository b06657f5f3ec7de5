package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/fleetagent"
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

// etcdFlags reach the fleet's etcd cluster.
type etcdFlags struct {
	endpoints                 []string
	certFile, keyFile, caFile string
	dialTimeout               time.Duration
	fleet                     string
}

func (e *etcdFlags) add(f *pflag.FlagSet) {
	f.StringSliceVar(&e.endpoints, "etcd-endpoints", nil, "client URLs of the fleet's etcd members, comma-separated (https://etcd1:2379,…)")
	f.StringVar(&e.certFile, "etcd-cert-file", "", "client certificate (PEM) for etcd's TLS")
	f.StringVar(&e.keyFile, "etcd-key-file", "", "key (PEM) of --etcd-cert-file")
	f.StringVar(&e.caFile, "etcd-ca-file", "", "CA certificates (PEM) that signed the etcd members' certificates")
	f.DurationVar(&e.dialTimeout, "etcd-dial-timeout", fleet.DefaultDialTimeout, "bound on connecting to etcd")
	f.StringVar(&e.fleet, "fleet", "", "the fleet's name: its keys' prefix in etcd (default metadata.name of fleet.yaml)")
}

// client connects to the fleet's etcd.
func (e *etcdFlags) client(g *globals) (*fleet.Client, error) {
	if e.fleet == "" {
		return nil, errors.New("--fleet: name the fleet (metadata.name of the repository's fleet.yaml)")
	}
	return fleet.Dial(fleet.Config{
		Endpoints: e.endpoints, CertFile: e.certFile, KeyFile: e.keyFile, CAFile: e.caFile,
		DialTimeout: e.dialTimeout, Fleet: e.fleet, // no log: the error says it all
	})
}

// link joins the agent to its fleet: nil without --etcd-endpoints. The
// fleet's name defaults to fleet.yaml's metadata.name, read once the
// first revision is fetched.
func (e *etcdFlags) link(g *globals, singletonTTL time.Duration, outlive func() error) (*fleetagent.Link, error) {
	if len(e.endpoints) > 0 && singletonTTL < 2*time.Second {
		return nil, fmt.Errorf("--singleton-ttl %s: give at least 2s (etcd's shortest lease)", singletonTTL)
	}
	if len(e.endpoints) == 0 {
		if e.fleet != "" {
			return nil, errors.New("--fleet needs --etcd-endpoints: the fleet's etcd members (etcdEndpoints in the Agent config)")
		}
		return nil, nil
	}
	return fleetagent.New(fleetagent.Options{
		Config: fleet.Config{
			Endpoints: e.endpoints, CertFile: e.certFile, KeyFile: e.keyFile, CAFile: e.caFile,
			DialTimeout: e.dialTimeout, Fleet: e.fleet, Log: g.log,
		},
		Host: g.host.value, StateDir: g.stateDir, SingletonTTL: singletonTTL, Outlive: outlive, Log: g.log,
	})
}

// operator names who acts, for holds and rollout controls: user@host.
func operator() string {
	who := os.Getenv("SUDO_USER")
	if who == "" {
		if u, err := user.Current(); err == nil {
			who = u.Username
		}
	}
	host, _ := os.Hostname()
	return who + "@" + host
}
