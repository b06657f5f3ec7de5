package resource_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

const fleetYAML = `apiVersion: cortex-sync/v1alpha1
kind: Fleet
metadata: {name: prod}
spec:
  hosts:
    - match: {name: "db*"}
      paths: [base, roles/db, "hosts/{name}"]
    - match: {labels: {role: web}}
      paths: [base, roles/web, "hosts/{name}"]
    - match: {}
      paths: [base]
  rollout: {maxUnavailable: 10%, canary: 1, minReady: 30s, progressDeadline: 5m, failureThreshold: 2}
`

func file(name, path string) string {
	return header + "kind: File\nmetadata: {name: " + name + "}\nspec: {path: " + path + ", content: x}\n"
}

// fleetRepo is a repository with a Fleet: a base every host runs, a role
// folder each for db and web, and host folders for db1 and web1.
func fleetRepo(extra map[string]string) fstest.MapFS {
	files := map[string]string{
		"fleet.yaml":         fleetYAML,
		"base/motd.yaml":     file("motd", "/etc/motd"),
		"roles/db/pg.yaml":   file("pg", "/etc/pg.conf"),
		"roles/web/ng.yaml":  file("nginx", "/etc/nginx.conf"),
		"hosts/db1/id.yaml":  file("db1-id", "/etc/id"),
		"hosts/web1/id.yaml": file("web1-id", "/etc/id"),
	}
	for k, v := range extra {
		if v == "" {
			delete(files, k)
			continue
		}
		files[k] = v
	}
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	return fsys
}

func ids(s *resource.Set) []string {
	var out []string
	for _, r := range s.Resources() {
		out = append(out, string(r.ID()))
	}
	slices.Sort(out)
	return out
}

func TestFleetTargets(t *testing.T) {
	tests := []struct {
		name  string
		host  resource.Host
		rule  int
		paths []string
		set   []string
	}{
		{"name glob, own folder", resource.Host{Name: "db1"}, 0, []string{"base", "roles/db", "hosts/db1"},
			[]string{"File/db1-id", "File/motd", "File/pg"}},
		{"name glob wins over a label (first match)", resource.Host{Name: "db2", Labels: map[string]string{"role": "web"}}, 0,
			[]string{"base", "roles/db", "hosts/db2"}, []string{"File/motd", "File/pg"}},
		{"label", resource.Host{Name: "web1", Labels: map[string]string{"role": "web", "zone": "a"}}, 1,
			[]string{"base", "roles/web", "hosts/web1"}, []string{"File/motd", "File/nginx", "File/web1-id"}},
		{"label with another value", resource.Host{Name: "web1", Labels: map[string]string{"role": "cache"}}, 2,
			[]string{"base"}, []string{"File/motd"}},
		{"everyone else", resource.Host{Name: "mail"}, 2, []string{"base"}, []string{"File/motd"}},
	}
	repo := fleetRepo(nil)
	f, err := resource.ReadFleet(repo)
	if err != nil || f == nil {
		t.Fatalf("ReadFleet: %v, %v", f, err)
	}
	if f.Name != "prod" || f.Spec.Rollout.MaxUnavailable != (resource.IntOrPercent{Value: 10, Percent: true}) || f.Spec.Rollout.MinReady.Std().Seconds() != 30 {
		t.Fatalf("decoded %+v %+v", f, f.Spec.Rollout)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Target(tt.host)
			if err != nil {
				t.Fatal(err)
			}
			if got.Rule != tt.rule || !slices.Equal(got.Paths, tt.paths) {
				t.Fatalf("Target = %+v, want rule %d paths %v", got, tt.rule, tt.paths)
			}
			set, err := resource.Options{Host: tt.host}.Load(repo, ".", driver.Kinds())
			if err != nil {
				t.Fatal(err)
			}
			if g := ids(set); !slices.Equal(g, tt.set) {
				t.Fatalf("set = %v, want %v", g, tt.set)
			}
		})
	}
}

func TestFleetProblems(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
		host  resource.Host
		want  string
	}{
		{"unknown field", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "paths: [base]\n", "paths: [base]\n      path: x\n", 1)},
			resource.Host{Name: "x"}, `fleet.yaml:12: document 1 (Fleet/prod): spec.hosts[2].path: unknown field (did you mean "paths"?)`},
		{"unknown rollout field", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "canary: 1", "canaries: 1", 1)},
			resource.Host{Name: "x"}, `fleet.yaml:12: document 1 (Fleet/prod): spec.rollout.canaries: unknown field (known fields: canary, failureThreshold,`},
		{"bad percentage", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "10%", "110%", 1)},
			resource.Host{Name: "x"}, `spec.rollout.maxUnavailable: "110%" is neither a count`},
		{"other placeholder", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "hosts/{name}", "hosts/{labels.role}", 1)},
			resource.Host{Name: "x"}, `fleet.yaml:7: document 1 (Fleet/prod): spec.hosts[0].paths[2]: "hosts/{labels.role}": {labels.role} is not a placeholder`},
		{"outside the repository", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "paths: [base]", "paths: [../x]", 1)},
			resource.Host{Name: "x"}, `spec.hosts[2].paths[0]: "../x" must be a folder inside the repository`},
		{"no rule matches", map[string]string{"fleet.yaml": strings.Replace(fleetYAML, "    - match: {}\n      paths: [base]\n", "", 1)},
			resource.Host{Name: "mail", Labels: map[string]string{"zone": "a"}},
			`fleet.yaml:6: document 1 (Fleet/prod): spec.hosts: no fleet rule matches this host: host "mail" (labels zone=a); add a rule that matches it, or a last rule with match: {}`},
		{"a written path missing", map[string]string{"roles/db/pg.yaml": ""}, resource.Host{Name: "db1"},
			`fleet.yaml:7: document 1 (Fleet/prod): spec.hosts[0].paths[1]: "roles/db" is not a folder of the repository; create it or fix the path`},
		{"one resource in two paths", map[string]string{"roles/db/motd.yaml": file("motd", "/etc/motd2")}, resource.Host{Name: "db1"},
			`roles/db/motd.yaml:3: document 1 (File/motd): metadata.name: File/motd is already declared in base/motd.yaml (document 1)`},
		{"one host path in two paths", map[string]string{"roles/db/motd.yaml": file("motd2", "/etc/motd")}, resource.Host{Name: "db1"},
			`/etc/motd is also managed by File/motd (base/motd.yaml, document 1)`},
		{"a Fleet elsewhere", map[string]string{"base/fleet.yaml": fleetYAML}, resource.Host{Name: "db1"},
			`base/fleet.yaml:2: document 1 (Fleet/prod): kind: a Fleet manifest is read only from fleet.yaml at the repository's top; move it there`},
		{"fleet.yaml with more", map[string]string{"fleet.yaml": fleetYAML + "---\n" + file("x", "/x")}, resource.Host{Name: "db1"},
			`fleet.yaml:14: document 2: fleet.yaml holds the Fleet manifest and nothing else`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resource.Options{Host: tt.host}.Load(fleetRepo(tt.extra), ".", driver.Kinds())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant %q", err, tt.want)
			}
			if tt.name == "no rule matches" && !errors.Is(err, resource.ErrNoRule) {
				t.Fatalf("%v is not ErrNoRule", err)
			}
		})
	}
}

func TestFleetYAMLOfAnotherKindIsAManifest(t *testing.T) {
	repo := fstest.MapFS{"fleet.yaml": {Data: []byte(file("fleet", "/etc/fleet"))}, "base/motd.yaml": {Data: []byte(file("motd", "/etc/motd"))}}
	set, err := resource.Options{}.Load(repo, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	if set.Get("File/fleet") == nil {
		t.Fatalf("fleet.yaml of kind File not loaded: %v", ids(set))
	}
}

func TestFleetIgnoredBelowAPath(t *testing.T) {
	set, err := resource.Options{}.Load(fleetRepo(nil), "hosts/db1", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	if g := ids(set); !slices.Equal(g, []string{"File/db1-id"}) {
		t.Fatalf("--path hosts/db1 loaded %v", g)
	}
}

func TestLoadPathsReadsAFileOnce(t *testing.T) {
	set, err := resource.Options{}.LoadPaths(fleetRepo(nil), []string{"roles", "roles/db"}, driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	if g := ids(set); !slices.Equal(g, []string{"File/nginx", "File/pg"}) {
		t.Fatalf("loaded %v", g)
	}
}

func TestFleetCases(t *testing.T) {
	repo := fleetRepo(map[string]string{"hosts/dbx/id.yaml": file("dbx-id", "/etc/id")})
	f, err := resource.ReadFleet(repo)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Cases(repo)
	want := []resource.Case{{Rule: 0, Host: "db1"}, {Rule: 0, Host: "dbx"}, {Rule: 1, Host: "web1"}, {Rule: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("Cases = %v, want %v (db* hosts are rule 0's alone)", got, want)
	}
}

func TestIntOrPercent(t *testing.T) {
	for _, tt := range []struct {
		in    string
		total int
		want  int
	}{{"3", 100, 3}, {"10%", 100, 10}, {"10%", 5, 1}, {"25%", 10, 2}, {"100%", 7, 7}} {
		v, err := resource.ParseIntOrPercent(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Of(tt.total); got != tt.want {
			t.Errorf("%s of %d = %d, want %d", tt.in, tt.total, got, tt.want)
		}
	}
	for _, bad := range []string{"0", "-1", "x", "0%", "101%", "1.5"} {
		if _, err := resource.ParseIntOrPercent(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Settle is the one rule for a rollout: fleet.yaml's, and the copy a host
// recorded in etcd (pkg/fleet reads it through Settle too).
func TestRolloutSettle(t *testing.T) {
	def := resource.Rollout{MaxUnavailable: resource.IntOrPercent{Value: 1}, MinReady: resource.DefaultMinReady,
		ProgressDeadline: resource.DefaultProgressDeadline, FailureThreshold: 1}
	for _, tt := range []struct {
		name string
		in   resource.Rollout
		want resource.Rollout
		err  string
	}{
		{"empty takes every default", resource.Rollout{}, def, ""},
		{"given fields kept", resource.Rollout{Canary: 2, FailureThreshold: 3}, func() resource.Rollout { r := def; r.Canary, r.FailureThreshold = 2, 3; return r }(), ""},
		{"zero count", resource.Rollout{MaxUnavailable: resource.IntOrPercent{Value: 0, Percent: true}}, resource.Rollout{}, "maxUnavailable must be 1 or more"},
		{"over 100%", resource.Rollout{MaxUnavailable: resource.IntOrPercent{Value: 101, Percent: true}}, resource.Rollout{}, "maxUnavailable must be a percentage of at most 100%"},
		{"negative", resource.Rollout{Canary: -1, FailureThreshold: -1, MinReady: -1}, resource.Rollout{},
			"canary must be 0 or more; minReady must not be negative; failureThreshold must be 1 or more"},
		{"too long", resource.Rollout{ProgressDeadline: resource.MaxRolloutDuration + 1}, resource.Rollout{}, "progressDeadline must be at most 168h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.Settle()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Settle() = %+v, %v; want %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Settle() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// fleet.yaml goes through the same rule, at the field's line.
	f := strings.Replace(fleetYAML, "minReady: 30s", "minReady: 200h", 1)
	if _, err := resource.ReadFleet(fleetRepo(map[string]string{"fleet.yaml": f})); err == nil || !strings.Contains(err.Error(), "spec.rollout.minReady: must be at most 168h0m0s") {
		t.Fatalf("ReadFleet: %v", err)
	}
}
