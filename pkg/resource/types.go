package resource

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Mode is a file mode written in octal, quoted or not: "0640", 0640, 640 and
// 0o640 all mean rw-r-----. The raw text is read, so YAML 1.1's octal
// conversion (0640 → 416) never happens.
type Mode fs.FileMode

// UnmarshalYAML reads the scalar's text as octal.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be an octal file mode such as \"0644\", not %s", describe(n))
	}
	v, err := ParseMode(n.Value)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseMode parses an octal permission string such as "0644" or "1777".
func ParseMode(s string) (Mode, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	bad := fmt.Errorf("%q is not an octal file mode; write one such as \"0644\"", s)
	if len(digits) < 3 || len(digits) > 5 {
		return 0, bad
	}
	v, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, bad
	}
	m := fs.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return Mode(m), nil
}

// FileMode is the mode as the os package spells it.
func (m Mode) FileMode() fs.FileMode { return fs.FileMode(m) }

// String prints the mode the way it is written: "0640".
func (m Mode) String() string {
	v := uint32(fs.FileMode(m).Perm())
	if fs.FileMode(m)&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if fs.FileMode(m)&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if fs.FileMode(m)&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// MarshalText keeps the octal form in JSON and hashes.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Duration is a Go duration string: "500ms", "30s", "5m".
type Duration time.Duration

// UnmarshalYAML parses the duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a duration such as \"30s\", not %s", describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a duration; write one such as \"500ms\", \"30s\" or \"5m\"", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalText keeps the readable form in JSON and hashes.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Std is the duration as the time package spells it.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalText reads what MarshalText wrote.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalText reads what MarshalText wrote.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
