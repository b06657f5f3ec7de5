package main

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// agentField is one field of the Agent file: a flag's field.
type agentField struct {
	Name, Flag, Type, Default, Usage string
	Commands                         []string // the commands that read it
}

// agentFields lists every field the Agent file may hold, grouped as
// docs/config.md shows them: every command's, the source's, and each
// command's own.
func agentFields() (groups []string, byGroup map[string][]agentField) {
	root := docRoot()
	src := map[string]bool{}
	probe := &cobra.Command{}
	(&sourceFlags{}).add(probe)
	probe.Flags().VisitAll(func(f *pflag.Flag) { src[f.Name] = true })
	etcd := map[string]bool{}
	(&etcdFlags{}).add(probe.Flags())
	probe.Flags().VisitAll(func(f *pflag.Flag) {
		if !src[f.Name] {
			etcd[f.Name] = true
		}
	})

	byGroup = map[string][]agentField{}
	seen := map[string]*agentField{}
	var order []string // group + flag, in the order first seen
	add := func(group, cmd string, f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" || f.Name == "version" {
			return
		}
		key := group + "\x00" + f.Name
		if a := seen[key]; a != nil {
			a.Commands = append(a.Commands, cmd)
			return
		}
		seen[key] = &agentField{Name: fieldName(f.Name), Flag: f.Name, Type: f.Value.Type(), Default: f.DefValue, Usage: f.Usage, Commands: []string{cmd}}
		order = append(order, key)
	}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) { add("Every command", "every command", f) })
	walkCommands(root, func(c *cobra.Command) {
		if c == root || c.Name() == "completion" || c.HasParent() && c.Parent().Name() == "completion" {
			return // cobra's completion scripts read no config
		}
		name := strings.TrimPrefix(c.CommandPath(), "cortex-sync ")
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			switch {
			case src[f.Name]:
				add("Source", name, f)
			case etcd[f.Name]:
				add("Fleet (etcd)", name, f)
			default:
				add(name, name, f)
			}
		})
	})
	for _, key := range order {
		group, _, _ := strings.Cut(key, "\x00")
		byGroup[group] = append(byGroup[group], *seen[key])
	}
	groups = []string{"Every command", "Source", "Fleet (etcd)"}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		slices.SortFunc(byGroup[g], func(a, b agentField) int { return strings.Compare(a.Name, b.Name) })
	}
	return groups, byGroup
}

// fieldExamples are example values for fields whose type says too little.
var fieldExamples = map[string]string{
	"repo": "https://git.example.com/infra.git", "branch": "main", "tag": "v1.4.0",
	"semver": `">=1.2.0 <2.0.0"`, "commit": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
	"path": "hosts/web1", "dir": "/srv/infra", "root": "/", "stateDir": "/var/lib/cortex-sync",
	"username": "deploy", "passwordFile": "/etc/cortex-sync/git-token",
	"sshKeyFile": "/etc/cortex-sync/id_ed25519", "sshKeyPassphraseFile": "/etc/cortex-sync/id_ed25519.pass",
	"knownHostsFile": "/etc/cortex-sync/known_hosts", "caFile": "/etc/cortex-sync/ca.pem",
	"verifyKeyring": "/etc/cortex-sync/keyring.asc", "allowedPaths": "[/etc/app, /srv]",
	"verifyAllowedSigners": "/etc/cortex-sync/allowed_signers", "verifyMode": "ancestry",
	"ageKeyFile": "/etc/cortex-sync/age.key",
	"logLevel":   "info", "logFormat": "json", "output": "json", "against": "/tmp/host.json",
	"listen": "127.0.0.1:9797", "address": "127.0.0.1:9797", "tokenFile": "/etc/cortex-sync/token",
	"webhookSecretFile": "/etc/cortex-sync/webhook-secret",
	"hostName":          "web1", "labels": "{role: web, zone: eu-1}", "fleet": "prod",
	"etcdEndpoints": "[https://etcd1.example.com:2379, https://etcd2.example.com:2379, https://etcd3.example.com:2379]",
	"etcdCertFile":  "/etc/cortex-sync/etcd-client.pem", "etcdKeyFile": "/etc/cortex-sync/etcd-client-key.pem",
	"etcdCaFile":   "/etc/cortex-sync/etcd-ca.pem",
	"healthChecks": `[{name: ssh, tcp: {address: "127.0.0.1:22"}}]`, "onFailure": "halt",
	"notify": `[{type: github, tokenFile: /etc/cortex-sync/github-token}, {type: webhook, url: "https://hooks.example.com/cortex", secretFile: /etc/cortex-sync/hook-key, severity: warning}]`,
	"to":     "main@sha1:4b825dc642cb",
}

func (a agentField) example() string {
	v := fieldExamples[a.Name]
	switch {
	case v != "":
	case a.Type == "bool" && a.Default == "true":
		v = "false"
	case a.Type == "bool":
		v = "true"
	case a.Type == "duration" && a.Default != "0s":
		v = a.Default
	case a.Type == "duration":
		v = "30s"
	case a.Type == "int" && a.Default != "0":
		v = a.Default
	case a.Type == "int":
		v = "4"
	default:
		v = "…"
	}
	return a.Name + ": " + v
}

func genConfigDoc(files map[string][]byte) error {
	groups, byGroup := agentFields()
	var b bytes.Buffer
	b.WriteString(`<!-- Generated from the flags by ` + "`make docs`" + ` (cmd/cortex-sync/configdoc_test.go); do not edit. -->

# Agent configuration

Every setting is a flag, and every flag is a field of the Agent file, named
in camelCase (` + "`--fetch-timeout` ↔ `fetchTimeout`, `--allowed-path` (repeatable) ↔ `allowedPaths`" + `).
Give the file with ` + "`--config FILE`" + ` to any command; flags given on the command
line win over the file. One file serves every command: each reads the fields
it has and ignores the others, but a field no command has is an error that
names the file and line.

` + "```yaml" + `
# yaml-language-server: $schema=https://raw.githubusercontent.com/cortex-sync/cortex-sync/main/docs/schema/agent.json
apiVersion: cortex-sync/v1alpha1
kind: Agent
metadata:
  name: web1
spec:
  repo: https://git.example.com/infra.git
  branch: main
  path: hosts/web1
  prune: true
  allowedPaths: [/etc/app, /srv]
` + "```" + `

A list field takes a YAML list or a single value. Values are read as the
flag reads them: durations are Go durations (` + "`500ms`, `30s`, `5m`" + `), booleans
` + "`true`/`false`" + `. The packages install a commented default at
` + "`/etc/cortex-sync/agent.yaml`" + ` ([packaging/agent.yaml](../packaging/agent.yaml)); the
JSON Schema of the file is [schema/agent.json](schema/agent.json).
`)
	for _, g := range groups {
		fields := byGroup[g]
		switch g {
		case "Every command":
			b.WriteString("\n## Every command\n\n")
		case "Source":
			fmt.Fprintf(&b, "\n## Source\n\nWhere desired state comes from: `dir`, or `repo` with one of `branch`, `tag`,\n`semver` or `commit`. Read by %s.\n\n", commandList(fields[0].Commands))
		case "Fleet (etcd)":
			fmt.Fprintf(&b, "\n## Fleet (etcd)\n\nHow to reach the fleet's etcd cluster (see [fleet.md](fleet.md)). Read by %s.\n\n", commandList(fields[0].Commands))
		default:
			fmt.Fprintf(&b, "\n## `%s`\n\nRead only by `cortex-sync %s`; other commands ignore them.\n\n", g, g)
		}
		b.WriteString("| field | type | default | flag | example | meaning |\n|---|---|---|---|---|---|\n")
		for _, f := range fields {
			def := "—"
			if f.Default != "" && f.Default != "[]" {
				def = "`" + f.Default + "`"
			}
			flag := "`--" + f.Flag + "`"
			if f.Type == "stringArray" || f.Type == "stringSlice" || f.Type == "check" {
				flag += " (repeatable)"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` | %s |\n", f.Name, typeWord(f.Type), def, flag, f.example(), mdEscape(f.Usage))
		}
	}
	files["docs/config.md"] = b.Bytes()
	return nil
}

func commandList(cmds []string) string {
	q := make([]string, len(cmds))
	for i, c := range cmds {
		q[i] = "`" + c + "`"
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

func typeWord(t string) string {
	switch t {
	case "stringArray", "stringSlice":
		return "list of strings"
	case "bool":
		return "boolean"
	case "int":
		return "integer"
	case "check":
		return "list of checks"
	}
	return t
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
