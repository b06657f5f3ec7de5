package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrRollback reports a snapshot older than the last one its state dir
// wrote.
var ErrRollback = errors.New("the snapshot was rolled back")

// serialFile is state.serial: the lineage and serial of the last snapshot
// saved, kept apart from it, so that an older state.json put back (a
// restored backup, a copied state dir) is noticed.
type serialFile struct {
	Lineage string `json:"lineage"`
	Serial  uint64 `json:"serial"`
}

func (d Dir) serialPath() string { return d.Sub("state.serial") }

// LastWritten reads state.serial: the lineage and serial of the last
// snapshot saved here. ok is false when there is none (a state dir from
// before state.serial, or a new one).
func (d Dir) LastWritten() (lineage string, serial uint64, ok bool, err error) {
	data, err := os.ReadFile(d.serialPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	var f serialFile
	if err := json.Unmarshal(data, &f); err != nil || f.Lineage == "" {
		return "", 0, false, fmt.Errorf("%s is damaged: %q", d.serialPath(), truncate(data, 80))
	}
	return f.Lineage, f.Serial, true, nil
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
	lineage, serial, ok, err := d.LastWritten()
	how := "run `cortex-sync state accept-rollback` (or sync with --accept-state-rollback) once you are sure its inventory is what cortex-sync owns on this host"
	switch {
	case err != nil:
		return fmt.Sprintf("%v; %s", err, how)
	case !ok:
		return ""
	case lineage != s.Lineage:
		return fmt.Sprintf("state.json is of lineage %s, but this state dir last wrote lineage %s (serial %d): it was copied from elsewhere or put back; %s", s.Lineage, lineage, serial, how)
	case s.Serial < serial:
		return fmt.Sprintf("state.json has serial %d, but this state dir last wrote serial %d: an older snapshot was put back; %s", s.Serial, serial, how)
	}
	return ""
}

// writeSerial records s as the last snapshot saved.
func (d Dir) writeSerial(s *Snapshot) error {
	data, err := json.Marshal(serialFile{Lineage: s.Lineage, Serial: s.Serial})
	if err != nil {
		return err
	}
	if err := WriteFile(d.serialPath(), append(data, '\n')); err != nil {
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
	if lineage, serial, ok, err := d.LastWritten(); err == nil && ok && lineage == s.Lineage && serial > s.Serial {
		s.Serial = serial
	}
	s.rollback, s.RolledBack = nil, ""
}
