package diff

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// TextOptions shape the text rendering.
type TextOptions struct {
	Color    bool // ANSI colours, for a terminal
	MaxFiles int  // files listed per tree before "and N more"; 0 means 20
}

// Phrase is the one-line count of a plan, terraform style.
func (s Summary) Phrase() string {
	parts := []string{
		fmt.Sprintf("%d to create", s.Create),
		fmt.Sprintf("%d to update", s.Update),
		fmt.Sprintf("%d to delete", s.Delete-s.kept),
	}
	if s.kept > 0 {
		parts = append(parts, fmt.Sprintf("%d removed from Git (kept without --prune)", s.kept))
	}
	if s.Restart > 0 {
		parts = append(parts, fmt.Sprintf("%d to restart", s.Restart))
	}
	if s.Run > 0 {
		parts = append(parts, fmt.Sprintf("%d to run", s.Run))
	}
	if s.Adopt > 0 {
		parts = append(parts, fmt.Sprintf("%d to adopt", s.Adopt))
	}
	if s.Forget > 0 {
		parts = append(parts, fmt.Sprintf("%d to forget", s.Forget))
	}
	out := "Plan: " + strings.Join(parts, ", ")
	if s.Drifted > 0 {
		out += fmt.Sprintf(" (%d drifted)", s.Drifted)
	}
	if s.Errors > 0 {
		out += fmt.Sprintf("; %d could not be planned", s.Errors)
	}
	return out + "."
}

const (
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	red    = "\x1b[31m"
	bold   = "\x1b[1m"
	reset  = "\x1b[0m"
)

func symbol(c *Change) (string, string) {
	switch {
	case c.Err != nil:
		return "!", red
	case c.Suspended:
		return "#", ""
	}
	switch c.Action {
	case Create:
		return "+", green
	case Update:
		return "~", yellow
	case Delete:
		return "-", red
	case Forget:
		return "•", ""
	case Restart:
		return "↻", yellow
	case Run:
		return "▶", green
	case Adopt:
		return "↪", yellow
	}
	return " ", ""
}

// headline is a change's first line after its symbol and ID.
func headline(c *Change, prune bool) string {
	var b strings.Builder
	if c.Path != "" {
		b.WriteString("  " + c.Path)
	}
	if c.Err != nil {
		b.WriteString("  error: " + c.Err.Error())
		return b.String()
	}
	why, detail := c.describe(prune)
	b.WriteString("  (" + why + ")")
	if detail != "" {
		b.WriteString(": " + detail)
	}
	return b.String()
}

// describe is why a change is due, with what a reader must know of it
// (a prune that does not happen, a suspended resource), and its detail:
// every rendering says both.
func (c *Change) describe(prune bool) (why, detail string) {
	switch {
	case c.Suspended:
		why = fmt.Sprintf("suspended; would %s: %s", c.Action, c.Why())
	case c.Action == Forget && c.Record != nil && c.Record.NoPrune:
		why = "removed from Git; prune disabled: left on the host, dropped from the inventory"
	case c.Action == Forget && c.Detail == "":
		why = "removed from Git; already gone from the host"
	case c.Prune && !prune:
		why = "removed from Git; kept without --prune"
	default:
		why = c.Why()
	}
	return why, c.Detail
}

// phrase says how an attribute changes, its field and values quoted by q.
func (a Attr) phrase(q func(string) string) string {
	switch {
	case a.Before == "":
		return q(a.Field) + ": " + q(a.After)
	case a.After == "":
		return q(a.Field) + ": " + q(a.Before) + " (removed)"
	}
	return q(a.Field) + ": " + q(a.Before) + " → " + q(a.After)
}

func plain(s string) string { return s }
func code(s string) string  { return "`" + s + "`" }

// Text renders the plan for a person.
func Text(w io.Writer, p *Plan, o TextOptions) error {
	if o.MaxFiles == 0 {
		o.MaxFiles = 20
	}
	paint := func(color, s string) string {
		if !o.Color || color == "" {
			return s
		}
		return color + s + reset
	}
	var b strings.Builder
	shown := 0
	for _, c := range p.Changes {
		if c.Err == nil && c.Action == NoOp {
			continue
		}
		shown++
		sym, color := symbol(c)
		fmt.Fprintf(&b, "%s %s%s\n", paint(color, sym), paint(bold, string(c.ID)), headline(c, p.Prune))
		for _, a := range c.Attrs {
			b.WriteString("    " + a.phrase(plain) + "\n")
		}
		if c.Content != nil {
			if c.Content.Summary != "" {
				fmt.Fprintf(&b, "    content: %s\n", c.Content.Summary)
			}
			for _, l := range strings.Split(strings.TrimSuffix(c.Content.Diff, "\n"), "\n") {
				if l == "" {
					continue
				}
				color := ""
				switch {
				case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
					color = bold
				case l[0] == '+':
					color = green
				case l[0] == '-':
					color = red
				}
				b.WriteString("      " + paint(color, l) + "\n")
			}
		}
		for i, f := range c.Files {
			if i == o.MaxFiles {
				fmt.Fprintf(&b, "    … and %d more files\n", c.FileCount()-i)
				break
			}
			sym, color := symbol(&Change{Action: f.Action})
			fmt.Fprintf(&b, "    %s %s (%s)%s\n", paint(color, sym), f.Path, f.Reason.Phrase(), f.backupNote())
		}
	}
	if shown == 0 {
		b.WriteString("No changes. The host matches the desired state.\n")
	} else {
		b.WriteString("\n" + p.Summary().Phrase() + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Markdown renders the plan for a pull-request comment.
func Markdown(w io.Writer, p *Plan) error {
	var b strings.Builder
	b.WriteString("### cortex-sync plan\n\n")
	if p.Revision != "" {
		fmt.Fprintf(&b, "Revision `%s`\n\n", p.Revision)
	}
	if !p.HasChanges() && len(p.Errors()) == 0 {
		b.WriteString("No changes. The host matches the desired state.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "**%s**\n\n", p.Summary().Phrase())
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "> [!WARNING]\n> %s\n\n", escapeLine(w))
	}
	b.WriteString("| | Resource | Path | Why |\n|---|---|---|---|\n")
	var details strings.Builder
	for _, c := range p.Changes {
		if c.Err == nil && c.Action == NoOp {
			continue
		}
		action, why := string(c.Action), ""
		switch {
		case c.Err != nil:
			action, why = "error", c.Err.Error()
		default:
			if c.Suspended {
				action = "suspended"
			}
			var detail string
			if why, detail = c.describe(p.Prune); detail != "" {
				why += ": " + detail
			}
		}
		path := ""
		if c.Path != "" {
			path = codeCell(c.Path) // a process or a command has none
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", action, codeCell(string(c.ID)), path, escapeCell(why))
		if (c.Content != nil && (c.Content.Diff != "" || c.Content.Summary != "")) || len(c.Attrs) > 0 || len(c.Files) > 0 {
			fmt.Fprintf(&details, "\n<details><summary><code>%s</code></summary>\n\n", c.ID)
			for _, a := range c.Attrs {
				details.WriteString("- " + a.phrase(code) + "\n")
			}
			for _, f := range c.Files {
				fmt.Fprintf(&details, "- %s %s (%s)%s\n", f.Action, codeCell(f.Path), f.Reason.Phrase(), f.backupNote())
			}
			if c.Content != nil && c.Content.Summary != "" {
				fmt.Fprintf(&details, "- content: %s\n", c.Content.Summary)
			}
			if c.Content != nil && c.Content.Diff != "" {
				fence := fenceFor(c.Content.Diff, "```")
				fmt.Fprintf(&details, "\n%sdiff\n%s%s\n", fence, c.Content.Diff, fence)
			}
			details.WriteString("\n</details>\n")
		}
	}
	b.WriteString(details.String())
	_, err := io.WriteString(w, b.String())
	return err
}

// escapeLine keeps s on one markdown line.
func escapeLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

func escapeCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

// codeCell is s as a code span that stays inside its table cell, whatever
// a path holds: pipes escaped, line breaks as spaces, and a fence longer
// than any run of backticks in it.
func codeCell(s string) string {
	s = escapeCell(s)
	fence := fenceFor(s, "`")
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// fenceFor is min, or a longer run of backticks than any in s, so that
// content cannot close the code span or block it is shown in.
func fenceFor(s, min string) string {
	fence := min
	for strings.Contains(s, fence) {
		fence += "`"
	}
	return fence
}

// FormatVersion is the version of the JSON plan schema (docs/plan-json.md).
const FormatVersion = "1"

type jsonPlan struct {
	FormatVersion string       `json:"formatVersion"`
	Source        any          `json:"source"`
	Revision      string       `json:"revision"`
	HasChanges    bool         `json:"hasChanges"`
	Summary       Summary      `json:"summary"`
	Warnings      []string     `json:"warnings,omitempty"`
	Changes       []jsonChange `json:"changes"`
	// A saved plan's (diff --out): see saved.go.
	MadeFor *MadeFor     `json:"madeFor,omitempty"`
	Policy  *SavedPolicy `json:"policy,omitempty"`
}

type jsonChange struct {
	ID        string       `json:"id"`
	Kind      string       `json:"kind"`
	Path      string       `json:"path,omitempty"`
	Action    Action       `json:"action"`
	Reason    Reason       `json:"reason,omitempty"`
	Drift     bool         `json:"drift"`
	Prune     bool         `json:"prune"`
	Suspended bool         `json:"suspended"`
	Error     string       `json:"error,omitempty"`
	Detail    string       `json:"detail,omitempty"`
	Attrs     []Attr       `json:"attributes,omitempty"`
	Content   *Content     `json:"content,omitempty"`
	Files     []FileChange `json:"files,omitempty"`
	Variables []string     `json:"variables,omitempty"` // reason variableChanged: which
	Facts     string       `json:"facts,omitempty"`     // a saved plan's
}

// JSON renders the plan for programs, in the schema of docs/plan-json.md.
func JSON(w io.Writer, p *Plan) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonOf(p))
}

// jsonOf is the plan in the schema of docs/plan-json.md.
func jsonOf(p *Plan) *jsonPlan {
	out := &jsonPlan{
		FormatVersion: FormatVersion, Source: p.Source, Revision: p.Revision,
		HasChanges: p.HasChanges(), Summary: p.Summary(), Warnings: p.Warnings, Changes: []jsonChange{},
	}
	for _, c := range p.Changes {
		out.Changes = append(out.Changes, jsonChange{
			ID: string(c.ID), Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason,
			Drift: c.IsDrift(), Prune: c.Prune, Suspended: c.Suspended, Error: errText(c.Err), Detail: c.Detail,
			Attrs: c.Attrs, Content: c.Content, Files: c.Files, Variables: c.variables(),
		})
	}
	return out
}
