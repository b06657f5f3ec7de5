package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

func TestSnapshotRoundTrip(t *testing.T) {
	d := At(filepath.Join(t.TempDir(), "state"))
	s, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Lineage == "" || s.Serial != 0 {
		t.Fatalf("fresh snapshot: %+v", s)
	}
	s.Put(&Entry{ID: "File/a", Kind: "File", Path: "/a", Live: &Fingerprint{Stat: hostfs.Stat{Ino: 7}, SHA256: "ab"}})
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	got, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.Lineage != s.Lineage || got.Serial != 1 || got.Find("File/a").Live.Ino != 7 {
		t.Fatalf("round trip: %+v", got)
	}
	for p, want := range map[string]os.FileMode{d.Path(): 0o700 | os.ModeDir, filepath.Join(d.Path(), "state.json"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode(), want, err)
		}
	}
}

// sampleSnapshot has entries of the shapes other packages record.
func sampleSnapshot() *Snapshot {
	at := time.Date(2025, 3, 1, 12, 30, 0, 123456789, time.UTC)
	return &Snapshot{
		Version: Version, Lineage: "0123456789abcdef0123456789abcdef", Serial: 41,
		Root:     "/",
		Source:   Source{Type: "git", URL: "https://example.com/host.git", Path: "hosts/web"},
		Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567", LastSyncTime: at,
		Inventory: []*Entry{
			{ID: "File/motd", Kind: "File", Path: "/etc/motd", SpecHash: "sha256:aa", ContentID: "blob:bb", Created: true,
				Live:   &Fingerprint{Stat: hostfs.Stat{Ino: 1 << 40, Size: 12, Mtime: 1740832200123456789, Ctime: 1740832200123456789, Mode: 0o644}, SHA256: "cc"},
				Result: &Result{Action: "created", Time: at}},
			{ID: "Process/web", Kind: "Process", SpecHash: "sha256:dd", NoPrune: true,
				Extra:  json.RawMessage(`{"process":{"pid":4242,"start":"<&>\u2028"},"note":"caf\u00e9"}`),
				Result: &Result{Action: "failed", Error: "exit status 1", Time: at}},
		},
	}
}

func TestCorruptSnapshotIsAnError(t *testing.T) {
	valid, err := encodeSnapshot(sampleSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(valid, []byte(`"serial": 41`), []byte(`"serial": 42`), 1)
	if bytes.Equal(edited, valid) {
		t.Fatal("sample snapshot has no serial to edit")
	}
	tests := map[string]string{
		"null":               "null",
		"empty object":       "{}",
		"empty file":         "",
		"only whitespace":    " \n",
		"not json":           "{not json",
		"an array":           "[]",
		"a string":           `"state"`,
		"no lineage":         `{"version": 1, "serial": 3}`,
		"no version":         `{"lineage": "abc", "serial": 3}`,
		"version 2 unsealed": `{"version": 2, "lineage": "abc"}`,
		"null entry":         `{"version": 1, "lineage": "abc", "inventory": [null]}`,
		"trailing garbage":   string(valid) + "}",
		"edited by hand":     string(edited),
	}
	for n := 0; n < len(valid)-1; n += 7 {
		tests[fmt.Sprintf("truncated to %d bytes", n)] = string(valid[:n])
	}
	d := At(t.TempDir())
	for name, data := range tests {
		if err := os.WriteFile(d.File(snapshotFile).Path(), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := d.Load()
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: Load = %+v, %v; want ErrCorruptSnapshot", name, s, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, d.File(snapshotFile).Path()) || !strings.Contains(msg, "move it away") {
			t.Errorf("%s: error %q does not name the file and what to do", name, msg)
		}
	}
}

func TestNewerSnapshotIsRefused(t *testing.T) {
	d := At(t.TempDir())
	os.WriteFile(d.File(snapshotFile).Path(), []byte(`{"version": 3, "lineage": "abc", "checksum": "sha512:x"}`), 0o600)
	_, err := d.Load()
	if err == nil || errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), "upgrade cortex-sync") {
		t.Fatalf("got %v, want an error asking for a newer cortex-sync", err)
	}
}

// TestVersion1SnapshotLoads reads state.json as the previous format wrote
// it, without a checksum, and saves it in the current one.
func TestVersion1SnapshotLoads(t *testing.T) {
	d := At(t.TempDir())
	v1 := `{
  "version": 1,
  "lineage": "5f2c",
  "serial": 7,
  "root": "/",
  "source": {"type": "dir", "url": "/srv/repo", "path": ""},
  "lastSyncTime": "2025-01-02T03:04:05Z",
  "inventory": [
    {"id": "File/motd", "kind": "File", "path": "/etc/motd", "specHash": "x", "created": true,
     "live": {"ino": 9, "size": 3, "mtime": 1, "ctime": 2, "mode": 420, "uid": 0, "gid": 0, "sha256": "ab"}}
  ]
}
`
	os.WriteFile(d.File(snapshotFile).Path(), []byte(v1), 0o600)
	s, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != 1 || s.Lineage != "5f2c" || s.Serial != 7 || s.Find("File/motd").Live.Ino != 9 {
		t.Fatalf("format 1 snapshot: %+v", s)
	}
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(d.File(snapshotFile).Path())
	if !bytes.Contains(data, []byte(`"version": 2`)) || !bytes.Contains(data, []byte(`"checksum": "sha256:`)) {
		t.Fatalf("saved snapshot is not format 2 with a checksum:\n%s", data)
	}
	if s, err = d.Load(); err != nil || s.Serial != 8 || s.Lineage != "5f2c" {
		t.Fatalf("reload: %+v, %v", s, err)
	}
}

// FuzzLoadSnapshot feeds the snapshot decoder damaged state.json files: it
// must refuse them with ErrCorruptSnapshot (or ask for a newer cortex-sync),
// or return a snapshot with a lineage that saves and loads back unchanged.
func FuzzLoadSnapshot(f *testing.F) {
	valid, err := encodeSnapshot(sampleSnapshot())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"version":1,"lineage":"abc","inventory":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) && !errors.Is(err, errNewerSnapshot) {
				t.Fatalf("undesigned error: %v", err)
			}
			return
		}
		if s.Lineage == "" || s.Version < 1 || s.Version > Version {
			t.Fatalf("accepted a snapshot without lineage or format: %+v", s)
		}
		once, err := encodeSnapshot(s)
		if err != nil {
			t.Fatalf("accepted snapshot does not encode: %v", err)
		}
		again, err := decodeSnapshot(once)
		if err != nil {
			t.Fatalf("saved snapshot does not load: %v\n%s", err, once)
		}
		twice, err := encodeSnapshot(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the snapshot (%v):\n%s\n%s", err, once, twice)
		}
	})
}

func TestLockNamesHolder(t *testing.T) {
	d := At(t.TempDir())
	ctx := context.Background()
	first, err := d.Lock(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = d.Lock(ctx, 150*time.Millisecond)
	// Who holds it: pid, command line and since when.
	who := regexp.MustCompile(`held by pid ` + strconv.Itoa(os.Getpid()) + ` \(` + regexp.QuoteMeta(os.Args[0]) + `.*, since \d{4}-\d\d-\d\dT[0-9:]+Z, \d+s ago\)`)
	if !errors.Is(err, ErrLocked) || !who.MatchString(err.Error()) {
		t.Fatalf("second lock: %v, want ErrLocked matching %s", err, who)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before the timeout", waited)
	}
	first.Unlock()
	second, err := d.Lock(ctx, time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	second.Unlock()
}

// A lock file an older version wrote holds a bare pid; one being written
// holds nothing.
func TestLockHolderFormats(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"4242\n", "held by pid 4242 (waited"},
		{"", "held by an unknown process (waited"},
		{`{"pid":7,"command":"cortex-sync run --config /etc/cortex-sync/agent.yaml","since":"2026-01-02T03:04:05Z"}`, "held by pid 7 (cortex-sync run --config /etc/cortex-sync/agent.yaml, since 2026-01-02T03:04:05Z, "},
	} {
		d := At(t.TempDir())
		f, err := os.Create(d.Sub("lock").Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		f.WriteString(tc.content)
		_, err = d.Lock(context.Background(), 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lock file %q: %v, want %q", tc.content, err, tc.want)
		}
	}
}
