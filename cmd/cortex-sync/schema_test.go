package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
	orderedmap "github.com/pb33f/ordered-map/v2"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/notify"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// schemaBase is where docs/schema is published; a manifest names a schema
// there in its `# yaml-language-server: $schema=` line.
const schemaBase = "https://raw.githubusercontent.com/cortex-sync/cortex-sync/main/docs/schema/"

const draft = "https://json-schema.org/draft/2020-12/schema"

// Pattern of a Go duration string (time.ParseDuration, never negative).
const durationPattern = `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`

// specRequired and specEnums say what the Go types cannot: the fields the
// loader insists on and the closed sets of values it accepts (see each
// kind's Validate in pkg/driver). The examples test keeps them honest.
var specRequired = map[string][]string{
	"File": {"path"}, "Directory": {"path"}, "Symlink": {"path"},
	"Process": {"command"}, "Command": {"command"},
}

var specEnums = map[string][]any{
	"ensure":        {"present", "absent"},
	"restartPolicy": {"Always", "OnFailure", "Never"},
}

// schemaFor maps the custom scalar types to what they accept in YAML.
func schemaFor(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeFor[resource.Mode]():
		return &jsonschema.Schema{
			Description: `Octal file mode: "0640", 0640, 640 or 0o640 all mean rw-r-----. Quote it to be safe.`,
			AnyOf: []*jsonschema.Schema{
				{Type: "string", Pattern: `^(0[oO])?[0-7]{3,5}$`},
				{Type: "integer", Minimum: "0"},
			},
		}
	case reflect.TypeFor[resource.Duration]():
		return &jsonschema.Schema{Type: "string", Pattern: durationPattern, Description: `A Go duration: "500ms", "30s", "5m".`}
	case reflect.TypeFor[resource.ID]():
		kinds := strings.Join(slices.Sorted(maps.Keys(driver.Kinds())), "|")
		return &jsonschema.Schema{Type: "string", Pattern: `^(` + kinds + `)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`, Description: "A resource ID: Kind/name."}
	}
	return nil
}

func reflector() (*jsonschema.Reflector, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:               "yaml", // manifests are YAML: camelCase as the yaml tags say
		RequiredFromJSONSchemaTags: true,   // nothing is required because of a missing omitempty
		DoNotReference:             true,
		Anonymous:                  true,
		Mapper:                     schemaFor,
	}
	return r, nil
}

// specDocs describe spec fields for editors, by "Kind.field" or "field"
// (dotted below a field: "readinessProbe.http.url"). The Go comments are
// written for maintainers, so they are not used. A field without a
// description fails generation: a new field must say what it is.
var specDocs = map[string]string{
	"Process.minUptime":        "A run at least this long (default 10s) is restarted at once; a shorter one is a quick failure.",
	"Process.restartDelay":     "Wait before restarting after a quick failure (default 1s), doubling each time.",
	"Process.maxRestartDelay":  "Cap of the doubling restart delay (default 1m).",
	"Process.startLimit":       "Quick failures in a row that make the process Failed until its spec changes or cortex-sync restart (default 5).",
	"Process.resources":        "Limits applied in the process's own cgroup where the controllers are available.",
	"Process.resources.memory": "Memory limit: bytes, or with a suffix (512Mi, 1G); memory.max.",
	"Process.resources.cpu":    "CPU limit in cores (0.5, 2, 500m); cpu.max.",
	"Process.resources.tasks":  "Processes and threads at most; pids.max.",
	"dependsOn":                "Resources (Kind/name) applied, and healthy, before this one.",
	"substitute":               "true: render ${NAME} with this host's variables (a File's content or source, a Directory's source tree, a Process's or Command's env and command); $${ is a literal ${. Not for a Symlink.",
	"path":                     "Absolute host path, resolved under --root.",
	"File.content":             "The file's content, inline. Give content or source.",
	"File.source":              "A repository file, relative to this manifest's directory. Give content or source.",
	"Directory.source":         "A repository directory to mirror, file by file, relative to this manifest's directory.",
	"mode":                     "Octal mode; unmanaged when absent.",
	"owner":                    "User name or id; managed only when cortex-sync runs as root.",
	"group":                    "Group name or id; managed only when cortex-sync runs as root.",
	"sensitive":                "true: the content is never shown in diffs or logs, and is named in state.json only by IDs keyed with the host key.",
	"ensure":                   "present (default) or absent.",
	"decrypt":                  "sops: the source is a SOPS-encrypted file (YAML, JSON, dotenv or binary) decrypted on the host with --age-key-file; the plaintext is handled as sensitive content and written with mode 0600 unless mode is given. See docs/secrets.md.",
	"Directory.decrypt":        "sops: each SOPS-encrypted file of the source becomes a File of its own, File/<name>/<path below source>, decrypted on the host with --age-key-file into a 0600 file (owner and group as the Directory's); the mirror leaves those files out. See docs/secrets.md.",
	"replace":                  "false: create the file when absent, never overwrite its content.",
	"purge":                    "true: delete entries inside that nothing manages.",
	"target":                   "What the link points at, written as given.",
	"command":                  "The program and its arguments, as a list; run on the real host with CORTEX_SYNC_ROOT set.",
	"env":                      "Environment variables.",
	"secretEnvFile":            "A SOPS-encrypted dotenv file of the repository (source, a name ending in .env; decrypt: sops), decrypted with --age-key-file as the program starts: each variable is a secret as secretEnv's are (redacted in output, never in the plan, the snapshot or the logs); a change of its plaintext restarts the process (runs the command again), a new encryption of the same plaintext does not.",
	"secretEnvFile.source":     "The SOPS dotenv file, relative to this manifest's directory.",
	"secretEnv":                "Environment variables whose values are read from host files (absolute paths, under --root) as the program starts; the values never enter the plan, the snapshot or the logs, output showing them is redacted, and a change of a file restarts the process (runs the command again).",
	"workingDir":               "Absolute working directory.",
	"user":                     "User to run as (when cortex-sync runs as root).",
	"restartPolicy":            "Always (default), OnFailure or Never.",
	"stopSignal":               "Signal that asks it to stop; default SIGTERM.",
	"stopTimeout":              "How long to wait after stopSignal before SIGKILL; default 10s.",
	"livenessProbe":            "Restart the process when this probe keeps failing.",
	"readinessProbe":           "Healthy once this probe passes; dependents wait for it.",
	"restartOn":                "Resources (Kind/name) whose change restarts the process.",
	"singleton":                "true: in a fleet, runs on one host at a time of those whose desired set has it (an election in etcd, fenced by the supervisor); on a host in no fleet it never runs.",
	"Command.timeout":          "Bound on one run; default 5m.",
	"creates":                  "A path (under --root): when it exists, the command need not run.",
	"unless":                   "A guard command: when it exits 0, the command need not run.",
	"onlyIf":                   "A guard command: when it exits non-zero, the command need not run.",
	"refreshOn":                "Resources (Kind/name) whose change makes the command run again.",
	"retryDelay":               "Wait before trying a failed command again (default 5s), doubling with each failure in a row.",
	"maxRetryDelay":            "The longest wait between retries of a failed command (default 10m).",
	"exec":                     "Passes when the command exits 0.",
	"exec.command":             "The program and its arguments, as a list.",
	"http":                     "Passes on a status of 200-399, or exactly expectStatus.",
	"http.url":                 "The URL to GET.",
	"http.expectStatus":        "The one status that passes.",
	"tcp":                      "Passes when a connection opens.",
	"tcp.address":              "host:port to connect to.",
	"initialDelay":             "Wait this long after start before the first probe.",
	"period":                   "Time between probes; default 10s.",
	"timeout":                  "Bound on one probe; default 1s.",
	"failureThreshold":         "Failures in a row that count as failing; default 3.",
	"successThreshold":         "Successes in a row that count as passing; default 1.",
}

// describe fills every property's description from specDocs, and reports
// the fields it has none for.
func describeSpec(kind, prefix string, s *jsonschema.Schema, missing *[]string) {
	if s.Properties == nil {
		return
	}
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		field := prefix + pair.Key
		d := specDocs[kind+"."+field]
		for f := field; d == ""; {
			if d = specDocs[f]; d != "" {
				break
			}
			_, rest, ok := strings.Cut(f, ".")
			if !ok {
				break
			}
			f = rest
		}
		if d == "" {
			*missing = append(*missing, kind+" spec."+field)
		}
		v := pair.Value
		if v.Description == "" || prefix == "" {
			v.Description = d
		}
		describeSpec(kind, field+".", v, missing)
		if v.Items != nil {
			describeSpec(kind, field+".", v.Items, missing)
		}
	}
}

// kindSchema is the whole manifest document of one kind.
func kindSchema(r *jsonschema.Reflector, kind string, spec resource.Spec) (*jsonschema.Schema, error) {
	s := r.Reflect(spec)
	s.Version = ""
	var missing []string
	describeSpec(kind, "", s, &missing)
	if len(missing) > 0 {
		return nil, fmt.Errorf("no description for %s: add them to specDocs in cmd/cortex-sync/schema_test.go", strings.Join(missing, ", "))
	}
	s.Required = specRequired[kind]
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		if e := specEnums[pair.Key]; e != nil {
			pair.Value.Enum = e
		}
	}
	if kind == "File" {
		s.Not = &jsonschema.Schema{Required: []string{"content", "source"}, Description: "content or source, not both"}
	}
	md := r.Reflect(&resource.Metadata{})
	md.Version = ""
	md.Required = []string{"name"}
	if name, ok := md.Properties.Get("name"); ok {
		name.Pattern = `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
		name.MaxLength = ptr(uint64(253))
		name.Description = "Lowercase RFC 1123 name; Kind/name is the resource's ID."
	}
	if ann, ok := md.Properties.Get("annotations"); ok {
		ann.Properties = jsonschema.NewProperties()
		ann.Properties.Set(resource.AnnotationPrune, &jsonschema.Schema{Enum: []any{"disabled", "enabled"}, Description: "disabled: keep on the host when removed from Git"})
		ann.Properties.Set(resource.AnnotationReconcile, &jsonschema.Schema{Enum: []any{"disabled", "enabled"}, Description: "disabled: observe and report Suspended, never change"})
	}
	doc := &jsonschema.Schema{
		Type:                 "object",
		Title:                "cortex-sync " + kind,
		Properties:           jsonschema.NewProperties(),
		Required:             []string{"apiVersion", "kind", "metadata", "spec"},
		AdditionalProperties: jsonschema.FalseSchema,
	}
	doc.Properties.Set("apiVersion", &jsonschema.Schema{Const: resource.APIVersion})
	doc.Properties.Set("kind", &jsonschema.Schema{Const: kind})
	doc.Properties.Set("metadata", md)
	doc.Properties.Set("spec", s)
	return doc, nil
}

func ptr[T any](v T) *T { return &v }

// agentSchema is the Agent file, built from the same field list as
// docs/config.md.
func agentSchema() *jsonschema.Schema {
	groups, byGroup := agentFields()
	spec := &jsonschema.Schema{Type: "object", Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema}
	for _, g := range groups {
		for _, f := range byGroup[g] {
			if _, dup := spec.Properties.Get(f.Name); dup {
				continue // output: one field, several commands
			}
			var s *jsonschema.Schema
			switch f.Type {
			case "bool":
				s = &jsonschema.Schema{Type: "boolean", Default: f.Default == "true"}
			case "int":
				s = &jsonschema.Schema{Type: "integer"}
			case "duration":
				s = &jsonschema.Schema{Type: "string", Pattern: durationPattern, Default: f.Default}
			case "stringArray", "stringSlice":
				s = &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "string"}, {Type: "array", Items: &jsonschema.Schema{Type: "string"}}}}
				if mapFields[f.Name] { // labels: {role: web}
					s.AnyOf = append(s.AnyOf, &jsonschema.Schema{Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"}})
				}
			case "check": // healthChecks: a list of probes
				r, _ := reflector()
				item := r.Reflect(&reconcile.HostCheck{})
				item.Version, item.Required = "", []string{"name"}
				s = &jsonschema.Schema{Type: "array", Items: item}
			case "notifier": // notify: a list of entries
				r, _ := reflector()
				item := r.Reflect(&notify.Config{})
				item.Version, item.Required = "", []string{"type"}
				s = &jsonschema.Schema{Type: "array", Items: item}
			default:
				s = &jsonschema.Schema{Type: "string"}
				if f.Default != "" {
					s.Default = f.Default
				}
			}
			if s.Description == "" {
				s.Description = f.Usage + " (--" + f.Flag + ")"
			}
			spec.Properties.Set(f.Name, s)
		}
	}
	doc := &jsonschema.Schema{
		Version:              draft,
		ID:                   schemaBase + "agent.json",
		Title:                "cortex-sync Agent configuration",
		Type:                 "object",
		Properties:           jsonschema.NewProperties(),
		Required:             []string{"apiVersion", "kind", "spec"},
		AdditionalProperties: jsonschema.FalseSchema,
	}
	doc.Properties.Set("apiVersion", &jsonschema.Schema{Const: resource.APIVersion})
	doc.Properties.Set("kind", &jsonschema.Schema{Const: "Agent"})
	doc.Properties.Set("metadata", &jsonschema.Schema{Type: "object"})
	doc.Properties.Set("spec", spec)
	return doc
}

// genSchemas writes one schema per kind (file.json, …), manifest.json (any
// kind: what a manifest file's $schema line names, since one file may hold
// documents of several kinds), and agent.json.
func genSchemas(files map[string][]byte) error {
	r, err := reflector()
	if err != nil {
		return err
	}
	kinds := driver.Kinds()
	all := &jsonschema.Schema{
		Version:     draft,
		ID:          schemaBase + "manifest.json",
		Title:       "cortex-sync manifest (any kind)",
		Type:        "object",
		Required:    []string{"kind"},
		Definitions: jsonschema.Definitions{},
	}
	names := slices.Sorted(maps.Keys(kinds))
	kindEnum := make([]any, len(names))
	for i, kind := range names {
		kindEnum[i] = kind
		doc, err := kindSchema(r, kind, kinds[kind]())
		if err != nil {
			return err
		}
		def, _ := kindSchema(r, kind, kinds[kind]())
		all.Definitions[kind] = def
		all.AllOf = append(all.AllOf, &jsonschema.Schema{
			If:   &jsonschema.Schema{Properties: props("kind", &jsonschema.Schema{Const: kind}), Required: []string{"kind"}},
			Then: &jsonschema.Schema{Ref: "#/$defs/" + kind},
		})
		doc.Version, doc.ID = draft, jsonschema.ID(schemaBase+strings.ToLower(kind)+".json")
		if err := addJSON(files, "docs/schema/"+strings.ToLower(kind)+".json", doc); err != nil {
			return err
		}
	}
	all.Properties = props("kind", &jsonschema.Schema{Enum: kindEnum})
	if err := addJSON(files, "docs/schema/manifest.json", all); err != nil {
		return err
	}
	if err := addJSON(files, "docs/schema/fleet.json", fleetSchema()); err != nil {
		return err
	}
	return addJSON(files, "docs/schema/agent.json", agentSchema())
}

// fleetSchema is the Fleet manifest (fleet.yaml at a repository's top).
func fleetSchema() *jsonschema.Schema {
	str := func(desc string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: desc} }
	obj := func(props [][2]any, required ...string) *jsonschema.Schema {
		s := &jsonschema.Schema{Type: "object", Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema, Required: required}
		for _, p := range props {
			s.Properties.Set(p[0].(string), p[1].(*jsonschema.Schema))
		}
		return s
	}
	labels := &jsonschema.Schema{Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"}, Description: "Each label must be present with this value (--label KEY=VALUE)."}
	windows := &jsonschema.Schema{Type: "array", Items: obj([][2]any{
		{"schedule", str("When the window opens, in cron's five fields: minute hour day-of-month month day-of-week, e.g. \"0 22 * * 1-5\".")},
		{"duration", &jsonschema.Schema{Type: "string", Pattern: durationPattern, Description: "How long the window stays open: 1m to 168h."}},
		{"timeZone", str("The IANA time zone the schedule is read in, e.g. Europe/Paris; default UTC.")},
	}, "schedule", "duration"), Description: "Deploy windows: a host takes a new revision only while one is open."}
	rule := obj([][2]any{
		{"match", obj([][2]any{{"name", str("A glob on the host's name (--host-name).")}, {"labels", labels}})},
		{"paths", &jsonschema.Schema{Type: "array", MinItems: ptr(uint64(1)), Items: str("A folder of the repository; {name} is the host's name."),
			Description: "Folders whose manifests together are the host's desired set."}},
		{"vars", &jsonschema.Schema{Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"},
			Description: "Variables for substitute: true, for every host this rule matches; an earlier matching rule's win."}},
		{"varsFiles", &jsonschema.Schema{Type: "array", Items: str("A flat YAML map of variables in the repository; {name} is the host's name (such a file may be missing); one with a top-level sops key is decrypted, its values secret."),
			Description: "Files of variables, a later one overriding an earlier one; this rule's vars override them."}},
		{"windows", windows},
	}, "paths")
	count := &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "integer", Minimum: "1"}, {Type: "string", Pattern: `^[0-9]+%?$`}},
		Description: "A count, or a percentage of the live hosts (rounded down, at least 1)."}
	rollout := obj([][2]any{
		{"maxUnavailable", count},
		{"canary", &jsonschema.Schema{Type: "integer", Minimum: "0", Description: "Hosts that go first, alone."}},
		{"minReady", &jsonschema.Schema{Type: "string", Pattern: durationPattern, Description: "How long a host must stay healthy for the revision to be good there."}},
		{"progressDeadline", &jsonschema.Schema{Type: "string", Pattern: durationPattern, Description: "How long a host may take to be good."}},
		{"failureThreshold", &jsonschema.Schema{Type: "integer", Minimum: "1", Description: "Bad hosts that pause the rollout fleet-wide."}},
		{"windows", windows},
	})
	md := obj([][2]any{{"name", &jsonschema.Schema{Type: "string", Pattern: `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`, Description: "The fleet's name: its keys' prefix in etcd."}}}, "name")
	md.AdditionalProperties = nil
	doc := obj([][2]any{
		{"apiVersion", &jsonschema.Schema{Const: resource.APIVersion}},
		{"kind", &jsonschema.Schema{Const: resource.FleetKind}},
		{"metadata", md},
		{"spec", obj([][2]any{{"hosts", &jsonschema.Schema{Type: "array", MinItems: ptr(uint64(1)), Items: rule, Description: "Rules matched in order; the first that matches a host decides."}}, {"rollout", rollout}}, "hosts")},
	}, "apiVersion", "kind", "metadata", "spec")
	doc.Version, doc.ID, doc.Title = draft, schemaBase+"fleet.json", "cortex-sync Fleet (fleet.yaml)"
	return doc
}

func props(key string, s *jsonschema.Schema) *orderedmap.OrderedMap[string, *jsonschema.Schema] {
	p := jsonschema.NewProperties()
	p.Set(key, s)
	return p
}

func addJSON(files map[string][]byte, name string, s *jsonschema.Schema) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	files[name] = append(data, '\n')
	return nil
}
