package main

// The monitoring kit under docs/monitoring: the alert rules pass promtool
// and their own unit tests, the dashboard is importable JSON, and every
// metric an alert or a panel reads is one the agent serves.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/health"
)

const monitoringDir = repoRoot + "/docs/monitoring"

// TestMonitoringRules checks the alert rules and runs their unit tests,
// where promtool is installed.
func TestMonitoringRules(t *testing.T) {
	promtool := lookPromtool(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Join(monitoringDir, "alerts.yaml")},
		{"test", "rules", filepath.Join(monitoringDir, "alerts_test.yaml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoringAlerts: every alert says how bad it is and what to do, and
// reads only metrics the agent serves.
func TestMonitoringAlerts(t *testing.T) {
	series := agentSeries(t)
	for _, r := range loadAlerts(t) {
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		checkNames(t, "alert "+r.Alert, r.Expr, series)
	}
}

// TestMonitoringDashboard: the dashboard parses, its panels sit on the grid
// without overlapping, every query goes to the $datasource variable and
// reads only metrics the agent serves, and (with promtool) every query is
// valid PromQL.
func TestMonitoringDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and a schemaVersion of 30 or more", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || v.Query != "prometheus" {
		t.Errorf("no datasource variable of Prometheus data sources: %+v", v)
	}

	series := agentSeries(t)
	var queries []string // as PromQL, the Grafana variables filled in
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		checkDatasource(t, "variable "+v.Name, v.Datasource)
		checkNames(t, "variable "+v.Name, q, series)
	}
	ids := map[int]bool{}
	for i, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id used twice", where)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v is off the 24-column grid", where, g)
		}
		for _, o := range d.Panels[:i] {
			if g.X < o.GridPos.X+o.GridPos.W && o.GridPos.X < g.X+g.W && g.Y < o.GridPos.Y+o.GridPos.H && o.GridPos.Y < g.Y+g.H {
				t.Errorf("%s overlaps panel %d %q", where, o.ID, o.Title)
			}
		}
		if p.Type == "row" {
			continue
		}
		checkDatasource(t, where, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		for _, q := range p.Targets {
			checkDatasource(t, where, q.Datasource)
			checkNames(t, where, q.Expr, series)
			queries = append(queries, grafanaVars.Replace(q.Expr))
		}
	}

	t.Run("promql", func(t *testing.T) {
		promtool := lookPromtool(t)
		// promtool parses PromQL only in rule files: one recording rule a
		// query.
		var rules strings.Builder
		rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
		for i, q := range queries {
			quoted, _ := json.Marshal(q)
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, quoted)
		}
		file := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
		if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules (the dashboard's queries): %v\n%s", err, out)
		}
	})
}

// grafanaVars fills in the dashboard's variables with values of their kind.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h",
	"$job", "cortex-sync", "$instance", ".+",
)

func lookPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install -y prometheus): rules and queries not checked by promtool")
	}
	return p
}

type alertRule struct {
	Alert       string
	Expr        string
	Labels      map[string]string
	Annotations map[string]string
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule
		}
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	return rules
}

// The parts of a Grafana dashboard the test reads.
type (
	dashboard struct {
		Title         string
		UID           string
		SchemaVersion int
		Templating    struct{ List []variable }
		Panels        []panel
	}
	variable struct {
		Name       string
		Type       string
		Query      any // a string, or an object in newer Grafanas
		Datasource any
	}
	panel struct {
		ID         int
		Type       string
		Title      string
		Datasource any
		GridPos    struct{ X, Y, W, H int }
		Targets    []struct {
			Datasource any
			Expr       string
		}
	}
)

// checkDatasource: a panel or query goes to the $datasource variable, so
// the dashboard imports onto any Prometheus.
func checkDatasource(t *testing.T, where string, ds any) {
	t.Helper()
	m, _ := ds.(map[string]any)
	if m["uid"] != "${datasource}" || m["type"] != "prometheus" {
		t.Errorf("%s: datasource %v, want {type: prometheus, uid: ${datasource}}", where, ds)
	}
}

var (
	quotedString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	grafanaVar   = regexp.MustCompile(`\$\{?\w+\}?`)
	identifier   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// PromQL (and Grafana's label_values) functions that hold an
	// underscore, so are not taken for metric names.
	promqlFuncs = []string{
		"histogram_quantile", "histogram_count", "histogram_sum", "histogram_fraction",
		"label_values", "label_replace", "label_join", "count_values", "predict_linear",
		"absent_over_time", "avg_over_time", "count_over_time", "last_over_time", "max_over_time",
		"min_over_time", "present_over_time", "quantile_over_time", "stddev_over_time",
		"stdvar_over_time", "sum_over_time", "clamp_max", "clamp_min", "sort_desc",
		"day_of_month", "day_of_week", "day_of_year", "days_in_month",
	}
)

// checkNames fails for every metric expr reads that the agent does not
// serve. Metric names are told from label names and functions by their
// underscore: every cortexsync_, process_ and go_ metric has one, as has
// every label name and function that does not count (those are listed);
// up is the one metric without.
func checkNames(t *testing.T, where, expr string, s seriesNames) {
	t.Helper()
	expr = quotedString.ReplaceAllString(expr, `""`)
	expr = grafanaVar.ReplaceAllString(expr, "")
	var seen int
	for _, id := range identifier.FindAllString(expr, -1) {
		if id != "up" && (!strings.Contains(id, "_") || slices.Contains(promqlFuncs, id) || s.labels[id]) {
			continue
		}
		seen++
		if !s.series[id] {
			t.Errorf("%s reads %s, which the agent does not serve", where, id)
		}
	}
	if seen == 0 {
		t.Errorf("%s reads no metric: %s", where, expr)
	}
}

// seriesNames are the series names the agent's registry serves (a
// histogram's _bucket, _sum and _count, not its own name), and its label
// names.
type seriesNames struct {
	series, labels map[string]bool
}

// agentSeries builds the registry `cortex-sync run` serves, gives every
// metric a series, and lists them. The list of metrics comes from what
// NewMetrics registers (their descriptors), so a metric missed here fails
// the test rather than going unchecked.
func agentSeries(t *testing.T) seriesNames {
	t.Helper()
	reg := agent.NewRegistry()
	rec := &recordingRegisterer{Registerer: reg}
	m := agent.NewMetrics(rec)

	m.ObserveReconcile(agent.TriggerRevision, agent.ResultSuccess, time.Second)
	m.ObserveConvergence(agent.TriggerRevision, time.Second)
	m.DriftDetected("File")
	m.DriftCorrected("File")
	m.ObserveApply("File", "update", agent.ResultSuccess)
	m.ObserveFetch(time.Second, nil)
	m.ObserveFetch(time.Second, errors.New("unreachable"))
	m.ObserveApplied("0123456789abcdef0123456789abcdef01234567", time.Now())
	m.ProcessRestarted(agent.RestartCrash)
	m.ObserveError("Directory")
	m.SetResources([]agent.ResourceState{{Kind: "File", Sync: health.OutOfSync, Health: health.Degraded, Fighting: true}})
	m.Workqueue.NewDepthMetric("resources").Inc()
	m.Workqueue.NewAddsMetric("resources").Inc()
	m.Workqueue.NewLatencyMetric("resources").Observe(0.1)
	m.Workqueue.NewWorkDurationMetric("resources").Observe(0.1)
	m.Workqueue.NewUnfinishedWorkSecondsMetric("resources").Set(0)
	m.Workqueue.NewLongestRunningProcessorSecondsMetric("resources").Set(0)
	m.Workqueue.NewRetriesMetric("resources").Inc()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := seriesNames{
		series: map[string]bool{"up": true}, // Prometheus's own, per target
		labels: map[string]bool{"job": true, "instance": true, "le": true, "quantile": true},
	}
	gathered := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		gathered[name] = true
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				s.series[name+"_bucket"], s.series[name+"_sum"], s.series[name+"_count"] = true, true, true
			case m.GetSummary() != nil:
				s.series[name], s.series[name+"_sum"], s.series[name+"_count"] = true, true, true
			default:
				s.series[name] = true
			}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = true
			}
		}
	}
	if len(rec.names) < 20 {
		t.Fatalf("NewMetrics registered %d metrics: %v", len(rec.names), rec.names)
	}
	for _, name := range rec.names {
		if !gathered[name] {
			t.Errorf("%s has no series: give it one in agentSeries", name)
		}
	}
	return s
}

// recordingRegisterer notes the name of every metric registered through
// it, from the collectors' descriptors.
type recordingRegisterer struct {
	prometheus.Registerer
	names []string
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
