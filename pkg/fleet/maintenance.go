package fleet

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// MaintenanceName is the maintenance file's name in the state dir: while
// it exists the host takes no rollout slot (its content, if any, says
// why). It works with etcd down, where cortex-sync hold cannot.
const MaintenanceName = "maintenance"

// Maintenance reports whether the maintenance file at path exists, and
// its first line as the reason (": reason", or ""). It is read through
// the state dir's door: a link planted there is refused, never followed.
func Maintenance(path string) (on bool, why string, err error) {
	data, err := state.At(filepath.Dir(path)).ReadFile(filepath.Base(path))
	if errors.Is(err, fs.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if line != "" {
		why = ": " + line
	}
	return true, why, nil
}
