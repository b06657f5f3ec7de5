package driver

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// owner resolves an owner or group (a name or a numeric id); "" is -1, left
// alone. Ownership is managed only when cortex-sync runs as root.
func owner(name string, group bool) (int, error) {
	if name == "" || os.Geteuid() != 0 {
		return -1, nil
	}
	if id, err := strconv.Atoi(name); err == nil {
		return id, nil
	}
	if group {
		g, err := user.LookupGroup(name)
		if err != nil {
			return 0, fmt.Errorf("group %q: %w", name, err)
		}
		return strconv.Atoi(g.Gid)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("owner %q: %w", name, err)
	}
	return strconv.Atoi(u.Uid)
}

// attrs are the mode and owners a resource wants; a zero Mode is unmanaged.
type attrs struct {
	mode     fs.FileMode
	uid, gid int
}

func wantAttrs(mode *resource.Mode, ownerName, groupName string) (attrs, error) {
	a := attrs{uid: -1, gid: -1}
	if mode != nil {
		a.mode = mode.FileMode()
	}
	var err error
	if a.uid, err = owner(ownerName, false); err != nil {
		return a, err
	}
	if a.gid, err = owner(groupName, true); err != nil {
		return a, err
	}
	return a, nil
}

// diffs lists the attributes in which live (nil: nothing there yet)
// differs from what is wanted.
func (a attrs) diffs(live *hostfs.Stat) []diff.Attr {
	if live == nil {
		var out []diff.Attr
		if a.mode != 0 {
			out = append(out, diff.Attr{Field: "mode", After: resource.Mode(a.mode).String()})
		}
		if a.uid >= 0 {
			out = append(out, diff.Attr{Field: "owner", After: strconv.Itoa(a.uid)})
		}
		if a.gid >= 0 {
			out = append(out, diff.Attr{Field: "group", After: strconv.Itoa(a.gid)})
		}
		return out
	}
	var out []diff.Attr
	perm := live.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if a.mode != 0 && perm != a.mode {
		out = append(out, diff.Attr{Field: "mode", Before: resource.Mode(perm).String(), After: resource.Mode(a.mode).String()})
	}
	if a.uid >= 0 && int(live.UID) != a.uid {
		out = append(out, diff.Attr{Field: "owner", Before: strconv.Itoa(int(live.UID)), After: strconv.Itoa(a.uid)})
	}
	if a.gid >= 0 && int(live.GID) != a.gid {
		out = append(out, diff.Attr{Field: "group", Before: strconv.Itoa(int(live.GID)), After: strconv.Itoa(a.gid)})
	}
	return out
}

// host turns wanted attributes into what hostfs sets, with a default mode.
func (a attrs) host(def fs.FileMode) hostfs.Attrs {
	m := a.mode
	if m == 0 {
		m = def
	}
	return hostfs.Attrs{Mode: m, UID: a.uid, GID: a.gid}
}
