package agent

import "github.com/cortex-sync/cortex-sync/pkg/resource"

// A key's scope is the part of it an event named: the entries of a
// mirrored tree that changed. A converge in scope observes those entries
// alone, so an edit in a tree of 45,000 files costs one file, not 45,000.
// A key queued for any other reason (a new revision, the drift scan, a
// retry) is converged whole.

// maxScope bounds a scope: past it, the key is converged whole.
const maxScope = 256

// scopeOf is what has been asked of a key since its last converge.
type scopeOf struct {
	whole bool
	paths map[string]struct{} // slash paths relative to the tree's top
}

// narrow asks for rel, an entry of id's tree, to be looked at.
func (a *Agent) narrow(id resource.ID, rel string) {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	s := a.keys.scopes[id]
	if s == nil {
		s = &scopeOf{paths: map[string]struct{}{}}
		a.keys.scopes[id] = s
	}
	if s.whole {
		return
	}
	s.paths[rel] = struct{}{}
	if len(s.paths) > maxScope {
		s.whole, s.paths = true, nil
	}
}

// widen asks for all of id to be looked at.
func (a *Agent) widen(id resource.ID) {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	a.keys.scopes[id] = &scopeOf{whole: true} // stays whole until taken
}

// enqueue queues id whole, at once.
func (a *Agent) enqueue(id resource.ID) {
	a.widen(id)
	a.keys.queue.Add(id)
}

// takeScope is what to look at of id now, and forgets it: nil for all of
// it (asked whole, or never narrowed).
func (a *Agent) takeScope(id resource.ID) []string {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	s := a.keys.scopes[id]
	delete(a.keys.scopes, id)
	if s == nil || s.whole || len(s.paths) == 0 {
		return nil
	}
	out := make([]string, 0, len(s.paths))
	for p := range s.paths {
		out = append(out, p)
	}
	return out
}
