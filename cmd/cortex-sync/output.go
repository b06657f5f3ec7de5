package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/spf13/cobra"
)

// The JSON documents of the read commands other than diff, sync and status
// (docs/plan-json.md lists them all). Field names are the contract: new ones
// may appear, none changes meaning.

// addOutputFlag gives a read command -o/--output, text or json.
func addOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "text", "text or json")
}

// printJSON writes v indented, as every -o json does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// versionDoc is `version -o json`.
type versionDoc struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Date     string `json:"date,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func (b buildInfo) doc() versionDoc {
	return versionDoc{Version: b.Version, Commit: b.Commit, Date: b.Date, Modified: b.Modified,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// validateDoc is `validate -o json`.
type validateDoc struct {
	Valid     bool         `json:"valid"`
	Source    string       `json:"source"`
	Revision  string       `json:"revision,omitempty"`
	Resources int          `json:"resources"`
	Problems  []problemDoc `json:"problems"`
	// Targets are the desired sets checked in a repository with a Fleet
	// manifest: one a rule, and one a host folder for a {name} path.
	Targets []targetDoc `json:"targets,omitempty"`
}

// problemDoc is one problem in the manifests, located as far as known.
type problemDoc struct {
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Document int    `json:"document,omitempty"`
	Resource string `json:"resource,omitempty"`
	Field    string `json:"field,omitempty"`
	Message  string `json:"message"`
}

// problemDocs lists what Load found wrong, one entry a problem.
func problemDocs(err error) []problemDoc {
	var all resource.Problems
	if !errors.As(err, &all) {
		all = resource.Problems{err}
	}
	out := make([]problemDoc, 0, len(all))
	for _, e := range all {
		var fe *resource.FieldError
		if errors.As(e, &fe) {
			out = append(out, problemDoc{File: fe.Origin.File, Line: fe.Line, Document: fe.Origin.Doc,
				Resource: string(fe.ID), Field: fe.Field, Message: fe.Msg})
			continue
		}
		out = append(out, problemDoc{Message: e.Error()})
	}
	return out
}

// checkDoc is `state check -o json`.
type checkDoc struct {
	StateDir string       `json:"stateDir"`
	Problems int          `json:"problems"`
	Findings []findingDoc `json:"findings"`
}

type findingDoc struct {
	File       string `json:"file"`
	OK         bool   `json:"ok"`
	What       string `json:"what"`
	Fix        string `json:"fix,omitempty"`
	Repairable bool   `json:"repairable,omitempty"`
}

func findingDocs(fs []state.Finding) (docs []findingDoc, bad int) {
	docs = make([]findingDoc, 0, len(fs))
	for _, f := range fs {
		if !f.OK {
			bad++
		}
		docs = append(docs, findingDoc{File: f.File, OK: f.OK, What: f.What, Fix: f.Fix, Repairable: f.Repairable})
	}
	return docs, bad
}

// backupsDoc is `state backups -o json`, newest first.
type backupsDoc struct {
	StateDir string      `json:"stateDir"`
	Backups  []backupDoc `json:"backups"`
}

type backupDoc struct {
	Name  string    `json:"name"`
	Path  string    `json:"path"`
	Time  time.Time `json:"time"`
	Files int       `json:"files"`
	Bytes int64     `json:"bytes"`
}

func backupDocs(runs []state.BackupRun) []backupDoc {
	out := make([]backupDoc, 0, len(runs))
	for _, r := range runs {
		out = append(out, backupDoc{Name: r.Name, Path: r.Path, Time: r.Time, Files: r.Files, Bytes: r.Bytes})
	}
	return out
}
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
