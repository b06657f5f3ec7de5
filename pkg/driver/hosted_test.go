//go:build linux

package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestHostedCommandsKeepExitCodes: with this process supervising, as the
// agent does, Commands applied through the driver (os/exec) while
// supervised processes keep crashing and restarting each get their own
// exit code: the supervisor reaps its own children only.
func TestHostedCommandsKeepExitCodes(t *testing.T) {
	const procs, commands, rounds = 3, 8, 6
	docs := map[string]string{}
	for i := range procs {
		docs[fmt.Sprintf("p%d.yaml", i)] = fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p%d}\nspec:\n  command: [sh, -c, 'sleep 0.02; exit 7']\n  minUptime: 1ms\n  stopTimeout: 1s\n", i)
	}
	for i := range commands {
		docs[fmt.Sprintf("c%d.yaml", i)] = fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Command\nmetadata: {name: c%d}\nspec:\n  command: [sh, -c, 'exit %d']\n", i, i+1)
	}
	set := manifests(t, docs)
	e := env(t, set, &state.Snapshot{})
	t.Cleanup(func() { supervise.StopAll(e.State.Path()) })
	h, err := supervise.NewHost(e.State.Path())
	if errors.Is(err, supervise.ErrNoContainment) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Handover() })
	host := driver.Host{Env: e}
	apply := func(name string) error {
		r := set.Get(resource.ID(name))
		c, err := host.Observe(context.Background(), r, nil)
		if err != nil {
			return err
		}
		c.ID, c.Kind, c.Desired, c.Action = r.ID(), r.Kind, r, diff.Create
		_, err = host.Apply(context.Background(), c)
		return err
	}
	for i := range procs {
		if err := apply(fmt.Sprintf("Process/p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	restarts := func() (n int) {
		for i := range procs {
			if st, _ := supervise.Read(e.State.Path(), fmt.Sprintf("p%d", i)); st != nil {
				if st.Shim != supervise.Self() {
					t.Fatalf("p%d is supervised by pid %d, not by this process", i, st.Shim.PID)
				}
				n += st.Restarts
			}
		}
		return n
	}
	before := restarts()
	var wg sync.WaitGroup
	for i := range commands {
		wg.Go(func() {
			for round := range rounds {
				err := apply(fmt.Sprintf("Command/c%d", i))
				if want := fmt.Sprintf("exit code %d", i+1); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Command/c%d, round %d: %v, want %s", i, round, err, want)
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for restarts()-before < 2*procs {
		if time.Now().After(deadline) {
			t.Fatalf("%d restarts while the commands ran, want crashes throughout", restarts()-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range procs {
		st, _ := supervise.Read(e.State.Path(), fmt.Sprintf("p%d", i))
		if st.LastExit == nil || st.LastExit.Code != 7 {
			t.Errorf("p%d: last exit %+v, want exit code 7", i, st.LastExit)
		}
	}
}
