package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/events"
)

// repoFromGitURL splits a Git URL (https://host/owner/repo.git,
// ssh://git@host/owner/repo.git, git@host:owner/repo.git) into its host
// and repository path ("owner/repo"; GitLab: "group/sub/project").
func repoFromGitURL(raw string) (host, path string, ok bool) {
	if raw == "" {
		return "", "", false
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		host, path = u.Hostname(), u.Path
	} else if at, rest, found := strings.Cut(raw, ":"); found && !strings.Contains(at, "/") {
		// scp-like: [user@]host:path
		if i := strings.LastIndex(at, "@"); i >= 0 {
			at = at[i+1:]
		}
		host, path = at, rest
	} else {
		return "", "", false
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if host == "" || strings.Count(path, "/") < 1 {
		return "", "", false
	}
	return host, path, true
}

// forgeTarget is where a forge notifier writes: its API and repository.
type forgeTarget struct {
	api  string // without a trailing slash
	repo string // owner/name; GitLab: the project's path or ID
}

// resolveForge fills a forge's API and repository from the Git URL where
// the entry does not give them.
func resolveForge(c Config, gitURL string) (forgeTarget, error) {
	t := forgeTarget{api: strings.TrimSuffix(c.URL, "/"), repo: strings.Trim(c.Repository, "/")}
	host, path, ok := repoFromGitURL(gitURL)
	if t.repo == "" {
		if !ok {
			return t, fmt.Errorf("notify %s: repository is required: the source's Git URL %q names none (give repository: owner/name)", c.Type, gitURL)
		}
		t.repo = path
		if c.Type != GitLab {
			// A forge under a sub-path (https://host/gitea/owner/repo): the last two.
			parts := strings.Split(path, "/")
			t.repo = strings.Join(parts[len(parts)-2:], "/")
		}
	}
	if c.Type != GitLab && strings.Count(t.repo, "/") != 1 {
		return t, fmt.Errorf("notify %s: repository %q: write owner/name", c.Type, t.repo)
	}
	if t.api == "" && c.Type == GitHub && (!ok || host == "github.com") {
		t.api = "https://api.github.com"
	}
	if t.api == "" {
		if !ok {
			return t, fmt.Errorf("notify %s: url is required: the source's Git URL %q names no host (give the API's URL)", c.Type, gitURL)
		}
		switch c.Type {
		case GitHub:
			t.api = "https://" + host + "/api/v3" // GitHub Enterprise Server
		case GitLab:
			t.api = "https://" + host + "/api/v4"
		case Gitea:
			t.api = "https://" + host + "/api/v1"
		}
	}
	return t, nil
}

// commitSHA is the commit of a revision ("main@sha1:<hex>"), or "".
var commitSHA = regexp.MustCompile(`@sha1:([0-9a-f]{40})$`)

func shaOf(revision string) string {
	if m := commitSHA.FindStringSubmatch(revision); m != nil {
		return m[1]
	}
	return ""
}

// statusDescriptionMax bounds a status's description: GitHub refuses
// more than 140 characters.
const statusDescriptionMax = 140

// forgeSender writes commit statuses: pending when a revision is applied
// on trial (GitLab: running), success when it is judged good, failure when it is
// bad or rolled back, error when it is refused; one context per host.
type forgeSender struct {
	typ     Type
	target  forgeTarget
	token   secretFile
	context string // cortex-sync/<host>
	// trial is the revision last applied: a rollback fails it, whatever
	// revision the rollback event names. Only the delivering goroutine
	// touches it.
	trial string
}

// forgeReasons are the reasons a commit status tells.
var forgeReasons = map[events.Reason]bool{
	events.RevisionApplied: true, events.RevisionGood: true, events.RevisionBad: true,
	events.RevisionRolledBack: true, events.RevisionRefused: true,
}

func (f *forgeSender) wants(r events.Reason) bool { return forgeReasons[r] }

func (f *forgeSender) state(r events.Reason) string {
	gl := f.typ == GitLab
	switch r {
	case events.RevisionApplied:
		if gl {
			return "running" // GitLab's pending is "queued"
		}
		return "pending"
	case events.RevisionGood:
		return "success"
	case events.RevisionBad, events.RevisionRolledBack:
		if gl {
			return "failed"
		}
		return "failure"
	case events.RevisionRefused:
		if gl {
			return "failed"
		}
		return "error"
	}
	return ""
}

func (f *forgeSender) request(ctx context.Context, it item) (*http.Request, error) {
	revision := it.Revision
	switch it.Reason {
	case events.RevisionApplied:
		if it.Condition == "" {
			// The revision a rollback went back to, applied again: not
			// on trial, and judged before; the status it has stands (a
			// "pending" would undo its "success" for good).
			return nil, nil
		}
		f.trial = revision
	case events.RevisionRolledBack:
		if f.trial != "" {
			revision = f.trial
		}
	}
	sha, state := shaOf(revision), f.state(it.Reason)
	if sha == "" || state == "" || it.Count > 1 {
		return nil, nil // no commit to mark, or a repeat: the status stands
	}
	desc := string(it.Reason)
	if it.Message != "" {
		desc += ": " + it.Message
	}
	if r := []rune(desc); len(r) > statusDescriptionMax {
		desc = string(r[:statusDescriptionMax-1]) + "…"
	}
	body := map[string]string{"state": state, "description": desc}
	var path string
	switch f.typ {
	case GitHub, Gitea:
		body["context"] = f.context
		path = "/repos/" + f.target.repo + "/statuses/" + sha
	case GitLab:
		body["name"] = f.context
		// One path segment: group%2Fproject (PathEscape escapes "/").
		path = "/projects/" + url.PathEscape(f.target.repo) + "/statuses/" + sha
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	token, err := f.token.read()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.target.api+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	switch f.typ {
	case GitHub:
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	case GitLab:
		req.Header.Set("PRIVATE-TOKEN", token)
	case Gitea:
		req.Header.Set("Authorization", "token "+token)
		req.Header.Set("Accept", "application/json")
	}
	return req, nil
}
