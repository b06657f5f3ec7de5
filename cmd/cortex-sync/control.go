package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type controlOptions struct {
	address   string
	listen    string // the config's listen, when --address is not given
	tokenFile string
	// state is the state dir whose agent is asked: where it listens, it
	// says in its report.
	state state.Dir
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
			o.state = stateDirOf(g)
			return controlRun(o, ios, verb)
		},
	}
	addControlFlags(cmd, o)
	return cmd
}

func controlRun(o *controlOptions, ios streams, verb string) error {
	addr, body, err := o.post(verb, nil)
	if err != nil {
		return err
	}
	var answer struct{ Message string }
	if json.Unmarshal(body, &answer) == nil && answer.Message != "" {
		fmt.Fprintf(ios.Out, "%s: %s (the agent at %s)\n", verb, answer.Message, addr)
		return nil
	}
	fmt.Fprintf(ios.Out, "%s: asked the agent at %s\n", verb, addr)
	return nil
}

// errNoAgent: nothing answers at the agent's address.
var errNoAgent = errors.New("no agent answers")

// post asks the agent to do verb (POST /api/v1/VERB?query) and returns
// where it asked and the agent's answer: the agent --address names, else
// the one running on the state dir where its report says it listens, else
// the config's listen address. The token is --token-file's, else that of
// the agent on the state dir, from the file its report names. Nothing
// answering is errNoAgent.
func (o *controlOptions) post(verb string, query url.Values) (addr string, body []byte, err error) {
	addr, tokenFile := o.address, o.tokenFile
	if addr == "" {
		addr = o.listen
		if r := reconcile.ReadAgentReport(o.state); r != nil && r.Address != "" {
			addr = r.Address
			if tokenFile == "" {
				tokenFile = r.TokenFile
			}
		}
	}
	u := "http://" + addr + "/api/v1/" + verb
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(http.MethodPost, u, nil)
	if err != nil {
		return addr, nil, err
	}
	// The agent refuses a control request a web page could send.
	req.Header.Set(agent.ControlHeader, "1")
	if tokenFile != "" {
		tok, err := os.ReadFile(tokenFile)
		switch {
		case err != nil && o.tokenFile != "":
			return addr, nil, fmt.Errorf("--token-file: %w", err)
		case err != nil:
			return addr, nil, fmt.Errorf("the agent at %s needs the bearer token in %s: %w (run as a user who can read it, or pass --token-file)", addr, tokenFile, err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	// A rollback answers once its revision is fetched: allow for a fetch.
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		return addr, nil, fmt.Errorf("%w at %s (is cortex-sync run running? pass --address): %w", errNoAgent, addr, err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" && resp.StatusCode == http.StatusConflict {
			return addr, body, fmt.Errorf("the agent at %s: %s", addr, e.Error)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return addr, body, fmt.Errorf("the agent at %s refused %s: it needs its bearer token: pass --token-file (the file its tokenFile names)", addr, verb)
		}
		return addr, body, fmt.Errorf("the agent at %s refused %s: %s %s", addr, verb, resp.Status, bytes.TrimSpace(body))
	}
	return addr, body, nil
}
