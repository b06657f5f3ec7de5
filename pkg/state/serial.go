package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
)

// ErrRollback reports a snapshot older than the last one its state dir
// wrote.
var ErrRollback = errors.New("the snapshot was rolled back")

// serialFile is state.serial: the lineage and serial of the last snapshot
// saved, kept apart from it, so that an older state.json put back (a
// restored backup, a copied state dir) is noticed, and the host that
// saved it, so that a state dir copied whole from another host is too.
type serialFile struct {
	Lineage string `json:"lineage"`
	Serial  uint64 `json:"serial"`
	Host    string `json:"host,omitempty"`
}

// HostIDEnv names the variable that sets this host's identity, recorded in
// state.serial; without it the identity is the machine ID. A host whose
// machine ID changes at each boot (some containers) sets it.
const HostIDEnv = "CORTEX_SYNC_HOST_ID"

// hostID is this host's identity: $CORTEX_SYNC_HOST_ID, else the machine
// ID; "" when there is none, and then no copy between hosts is noticed.
var hostID = sync.OnceValue(func() string {
	if id := os.Getenv(HostIDEnv); id != "" {
		return id
	}
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" && id != "uninitialized" {
				return id
			}
		}
	}
	return ""
})

// serialFileName is state.serial's name in the state dir.
const serialFileName = "state.serial"

// lastWritten reads state.serial: the last snapshot saved here. ok is
// false when there is none (a state dir from before state.serial, or a new
// one).
func (d Dir) lastWritten() (f serialFile, ok bool, err error) {
	data, err := d.ReadFile(serialFileName)
	if errors.Is(err, fs.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return f, false, err
	}
	if err := json.Unmarshal(data, &f); err != nil || f.Lineage == "" {
		return f, false, fmt.Errorf("%s is damaged: %q", d.File(serialFileName), truncate(data, 80))
	}
	return f, true, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// checkSerial compares a loaded snapshot with state.serial. A snapshot with
// an empty inventory is never a rollback: it cannot make prune delete
// anything.
func (d Dir) checkSerial(s *Snapshot) string {
	if len(s.Inventory) == 0 {
		return ""
	}
	f, ok, err := d.lastWritten()
	lineage, serial, host := f.Lineage, f.Serial, hostID()
	how := "run `cortex-sync state accept-rollback` (or sync with --accept-state-rollback) once you are sure its inventory is what cortex-sync owns on this host"
	switch {
	case err != nil:
		return fmt.Sprintf("%v; %s", err, how)
	case !ok:
		return ""
	case f.Host != "" && host != "" && f.Host != host:
		return fmt.Sprintf("this state dir was last written on host %s, and this is host %s (its %s): it was copied here; %s", f.Host, host, hostIDName(), how)
	case lineage != s.Lineage:
		return fmt.Sprintf("state.json is of lineage %s, but this state dir last wrote lineage %s (serial %d): it was copied from elsewhere or put back; %s", s.Lineage, lineage, serial, how)
	case s.Serial < serial:
		return fmt.Sprintf("state.json has serial %d, but this state dir last wrote serial %d: an older snapshot was put back; %s", s.Serial, serial, how)
	}
	return ""
}

// hostIDName says where hostID comes from.
func hostIDName() string {
	if os.Getenv(HostIDEnv) != "" {
		return "$" + HostIDEnv
	}
	return "machine ID"
}

// writeSerial records s as the last snapshot saved.
func (d Dir) writeSerial(s *Snapshot) error {
	data, err := json.Marshal(serialFile{Lineage: s.Lineage, Serial: s.Serial, Host: hostID()})
	if err != nil {
		return err
	}
	if err := d.WriteFile(serialFileName, append(data, '\n')); err != nil {
		return fmt.Errorf("save state.serial: %w", err)
	}
	return nil
}

// AcceptRollback takes s as the current snapshot despite its rollback: its
// serial moves past the last one written, so serials only grow, and the
// next Save records it in state.serial. Call it holding the lock.
func (d Dir) AcceptRollback(s *Snapshot) {
	if s.rollback == nil {
		return
	}
	if f, ok, err := d.lastWritten(); err == nil && ok && f.Lineage == s.Lineage && f.Serial > s.Serial {
		s.Serial = f.Serial
	}
	s.rollback, s.RolledBack = nil, ""
}

// HostID is this host's identity: $CORTEX_SYNC_HOST_ID, else the machine
// ID; "" when neither is known.
func HostID() string { return hostID() }
