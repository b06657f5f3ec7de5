package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
)

type controlOptions struct {
	address   string
	listen    string // the config's listen, when --address is not given
	tokenFile string
}

// newControlCmd is a command that asks a running agent to do something:
// reconcile, suspend, resume.
func newControlCmd(g *globals, ios streams, verb, short string) *cobra.Command {
	o := &controlOptions{}
	cmd := &cobra.Command{
		Use:     verb,
		Short:   short,
		Example: fmt.Sprintf("  cortex-sync %s\n  cortex-sync %s --address 127.0.0.1:9797 --token-file /etc/cortex-sync/token", verb, verb),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return controlRun(o, ios, verb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.address, "address", "", "HOST:PORT of the running agent (default: the config's listen, else "+agent.DefaultAddr+")")
	f.StringVar(&o.listen, "listen", agent.DefaultAddr, "the agent's listen address (from --config)")
	f.MarkHidden("listen")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the agent's bearer token")
	return cmd
}

func controlRun(o *controlOptions, ios streams, verb string) error {
	addr := o.address
	if addr == "" {
		addr = o.listen
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/"+verb, nil)
	if err != nil {
		return err
	}
	if o.tokenFile != "" {
		tok, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("no agent answers at %s (is cortex-sync run running? pass --address): %w", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("the agent at %s refused %s: %s %s", addr, verb, resp.Status, bytes.TrimSpace(body))
	}
	fmt.Fprintf(ios.Out, "%s: asked the agent at %s\n", verb, addr)
	return nil
}
