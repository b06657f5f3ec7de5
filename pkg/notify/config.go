package notify

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Type is where a notifier delivers.
type Type string

// The types.
const (
	Webhook Type = "webhook" // a JSON body per event, HMAC-signed
	Slack   Type = "slack"   // a Slack-compatible incoming webhook
	GitHub  Type = "github"  // commit status
	GitLab  Type = "gitlab"  // commit status
	Gitea   Type = "gitea"   // commit status
)

// Types are the types, in the order the docs list them.
var Types = []Type{Webhook, Slack, GitHub, GitLab, Gitea}

// forge reports whether t writes commit statuses.
func (t Type) forge() bool { return t == GitHub || t == GitLab || t == Gitea }

// DefaultDedup is the de-duplication window when a notifier gives none.
const DefaultDedup = 5 * time.Minute

// Config is one entry of the Agent's notify list.
type Config struct {
	Type Type `yaml:"type" json:"type" jsonschema:"enum=webhook,enum=slack,enum=github,enum=gitlab,enum=gitea"`
	// URL is the webhook's URL, or a forge's API (default: from the Git
	// URL: https://api.github.com, https://HOST/api/v4, https://HOST/api/v1).
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// SecretFile holds a webhook's HMAC-SHA256 key; TokenFile a forge's
	// token. Both are read on every delivery, and never logged.
	SecretFile string `yaml:"secretFile,omitempty" json:"secretFile,omitempty"`
	TokenFile  string `yaml:"tokenFile,omitempty" json:"tokenFile,omitempty"`
	// Repository is a forge's owner/name (GitLab: the project's path or
	// numeric ID); default: from the Git URL of the source.
	Repository string `yaml:"repository,omitempty" json:"repository,omitempty"`
	// Severity is the least severity told (default info: everything).
	Severity events.Severity `yaml:"severity,omitempty" json:"severity,omitempty" jsonschema:"enum=info,enum=warning,enum=error"`
	// Reasons, when given, are the only reasons told; Exclude are never.
	Reasons []events.Reason `yaml:"reasons,omitempty" json:"reasons,omitempty"`
	Exclude []events.Reason `yaml:"exclude,omitempty" json:"exclude,omitempty"`
	// Dedup is the window within which the same event is told once, then
	// once more with its count (default 5m; 0s: every event).
	Dedup *resource.Duration `yaml:"dedup,omitempty" json:"dedup,omitempty"`
}

// Fields are the fields a notify entry may have, as the config spells
// them: an unknown one is refused where it is written.
func Fields() []string {
	t := reflect.TypeFor[Config]()
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		out = append(out, strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return out
}

// Parse reads one notify entry written as YAML (a flow mapping on a
// command line: {type: webhook, url: https://…, secretFile: /etc/…}),
// strictly, and checks it.
func Parse(text string) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("a notify entry is {type: webhook|slack|github|gitlab|gitea, url: URL, secretFile: FILE or tokenFile: FILE, severity: …, reasons: […]}: %v", err)
	}
	return c, c.Validate()
}

// ParseList reads a YAML list of notify entries (the notify field of an
// Agent file, for a command that does not notify but must reserve the
// files it names).
func ParseList(text string) ([]Config, error) {
	var cs []Config
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&cs); err != nil {
		return nil, err
	}
	return cs, nil
}

// Validate checks what an entry says by itself; New checks what needs
// the agent's other settings (a forge's repository from the Git URL).
func (c Config) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	switch {
	case c.Type == "":
		add("type is required: one of %s", typeList())
	case !slices.Contains(Types, c.Type):
		add("type %q: use one of %s", c.Type, typeList())
	}
	switch {
	case c.URL == "" && !c.Type.forge():
		add("url is required")
	case c.URL != "":
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("url must be an http:// or https:// URL")
		}
	}
	if c.SecretFile != "" && c.Type != Webhook {
		add("secretFile is a webhook's HMAC key: a %s takes none", c.Type)
	}
	if c.Type.forge() && c.TokenFile == "" {
		add("tokenFile is required: the file holding the %s token that may write commit statuses", c.Type)
	}
	if c.TokenFile != "" && !c.Type.forge() {
		add("tokenFile is a forge's token: a %s takes none (a webhook signs with secretFile)", c.Type)
	}
	if c.Repository != "" && !c.Type.forge() {
		add("repository names a forge's repository: a %s takes none", c.Type)
	}
	switch c.Severity {
	case "", events.Info, events.Warning, events.Error:
	default:
		add("severity %q: use info, warning or error", c.Severity)
	}
	for _, field := range []struct {
		name string
		list []events.Reason
	}{{"reasons", c.Reasons}, {"exclude", c.Exclude}} {
		for _, r := range field.list {
			if !slices.Contains(Reasons, r) {
				names := make([]string, len(Reasons))
				for i, k := range Reasons {
					names[i] = string(k)
				}
				add("%s: unknown reason %q%s", field.name, r, resource.DidYouMean(string(r), names))
			}
		}
	}
	if c.Dedup != nil && *c.Dedup < 0 {
		add("dedup must not be negative")
	}
	if len(problems) > 0 {
		return fmt.Errorf("notify %s: %s", c.Type, strings.Join(problems, "; "))
	}
	return nil
}

// window is the de-duplication window.
func (c Config) window() time.Duration {
	if c.Dedup == nil {
		return DefaultDedup
	}
	return time.Duration(*c.Dedup)
}

// Files are the files the entry reads its secrets from.
func (c Config) Files() []string {
	var out []string
	for _, f := range []string{c.SecretFile, c.TokenFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// String is the entry as a flag value reads it (file names, never what
// they hold).
func (c Config) String() string {
	b, _ := yaml.Marshal(c)
	var m yaml.Node
	if yaml.Unmarshal(b, &m) == nil && len(m.Content) == 1 {
		m.Content[0].Style = yaml.FlowStyle
		if out, err := yaml.Marshal(m.Content[0]); err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	return string(c.Type)
}

// Reasons are the reasons a filter may name (all of pkg/events'): a
// filter naming another is refused.
var Reasons = events.Reasons

func typeList() string {
	s := make([]string, len(Types))
	for i, t := range Types {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}
