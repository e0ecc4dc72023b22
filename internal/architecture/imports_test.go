package architecture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/claimscale/claimscale"

// goPackage is what go list says of one package of the module.
type goPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// ours is a package path relative to the module, or "" for another module's.
func ours(path string) string {
	if path == module {
		return "."
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	return rel
}

func under(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// listPackages runs go list over the module: every package with its direct
// imports and everything it depends on, tests left out (a test may reach
// further than the code it tests).
func listPackages(t *testing.T) map[string]goPackage {
	t.Helper()
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	packages := map[string]goPackage{}
	decoder := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := decoder.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's answer: %v", err)
		}
		if rel := ours(p.ImportPath); rel != "" {
			packages[rel] = p
		}
	}
	if len(packages) < 20 {
		t.Fatalf("go list found %d packages of the module; expected the whole tree", len(packages))
	}
	return packages
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// rule is one import rule: no package the rule applies to may depend,
// directly or not, on a package it forbids.
type rule struct {
	name      string
	appliesTo func(rel string) bool
	forbids   func(rel string) bool
}

var rules = []rule{
	{
		name:      "internal/scheduling imports nothing of ours but the API types",
		appliesTo: func(rel string) bool { return under(rel, "internal/scheduling") },
		forbids:   func(rel string) bool { return !under(rel, "api") && !under(rel, "internal/scheduling") },
	},
	{
		name:      "pkg/provider imports nothing under internal/",
		appliesTo: func(rel string) bool { return under(rel, "pkg/provider") },
		forbids:   func(rel string) bool { return under(rel, "internal") },
	},
	{
		name:      "the API imports nothing else of ours",
		appliesTo: func(rel string) bool { return under(rel, "api") },
		forbids:   func(rel string) bool { return !under(rel, "api") },
	},
	{
		name:      "the externalgrpc shim imports no controller",
		appliesTo: func(rel string) bool { return under(rel, "internal/externalgrpc") },
		forbids:   func(rel string) bool { return under(rel, "internal/controllers") },
	},
	{
		name:      "pool usability imports no controller: provisioning, the NodePool status and the shim all read it",
		appliesTo: func(rel string) bool { return under(rel, "internal/poolusability") },
		forbids:   func(rel string) bool { return under(rel, "internal/controllers") },
	},
	{
		name:      "the kubectl plugin takes its cluster picture from clusterstate, not provisioning",
		appliesTo: func(rel string) bool { return under(rel, "internal/kubectlplugin") },
		forbids:   func(rel string) bool { return under(rel, "internal/controllers/provisioning") },
	},
	{
		name: "nothing but the commands, their wiring and the tools imports the operator",
		appliesTo: func(rel string) bool {
			return !under(rel, "cmd") && !under(rel, "internal/operator") && !under(rel, "hack") && !under(rel, "test")
		},
		forbids: func(rel string) bool { return under(rel, "internal/operator") || under(rel, "cmd") },
	},
}

// pending are the breaks of a rule that are known and planned away, each
// with the work that ends it. The test fails when one is no longer there,
// so that the list only ever shrinks.
var pending = map[string]string{}

// violations lists, for each rule, the packages breaking it as
// "package -> forbidden dependency".
func violations(packages map[string]goPackage) map[string][]string {
	found := map[string][]string{}
	for _, r := range rules {
		for rel, p := range packages {
			if !r.appliesTo(rel) {
				continue
			}
			for _, dep := range p.Deps {
				if depRel := ours(dep); depRel != "" && r.forbids(depRel) {
					found[r.name] = append(found[r.name], rel+" -> "+depRel)
				}
			}
		}
		sort.Strings(found[r.name])
	}
	return found
}

func TestImportRules(t *testing.T) {
	packages := listPackages(t)
	seen := map[string]bool{}
	for _, r := range rules {
		for _, v := range violations(packages)[r.name] {
			if _, ok := pending[v]; ok {
				seen[v] = true
				continue
			}
			t.Errorf("%s, but %s", r.name, v)
		}
	}
	for v, why := range pending {
		if !seen[v] {
			t.Errorf("%s is listed as pending (%s) but no longer breaks a rule: remove it from pending", v, why)
		}
	}
}

// group is the part of the tree a package belongs to for the cycle check:
// the controllers are one group, as are the providers and the API; every
// other package under internal/ is a group of its own.
func group(rel string) string {
	parts := strings.Split(rel, "/")
	switch {
	case parts[0] == "api", parts[0] == "cmd", parts[0] == "hack", parts[0] == "test":
		return parts[0]
	case under(rel, "pkg/provider"):
		return "pkg/provider"
	case under(rel, "internal/controllers"):
		return "internal/controllers"
	case parts[0] == "internal" && len(parts) > 1:
		return "internal/" + parts[1]
	}
	return rel
}

// TestNoCycleBetweenGroups checks that the groups of packages form no
// cycle: Go refuses cycles between packages, but not between the parts of
// the tree (controllers importing a package that imports a controller),
// which is how an arrow back up creeps in.
func TestNoCycleBetweenGroups(t *testing.T) {
	if cycle := groupCycle(listPackages(t)); cycle != nil {
		t.Errorf("the groups of packages form a cycle: %s", strings.Join(cycle, " -> "))
	}
}

func groupCycle(packages map[string]goPackage) []string {
	edges := map[string][]string{}
	for rel, p := range packages {
		from := group(rel)
		for _, imp := range p.Imports {
			if impRel := ours(imp); impRel != "" {
				if to := group(impRel); to != from && !slices.Contains(edges[from], to) {
					edges[from] = append(edges[from], to)
				}
			}
		}
	}
	nodes := make([]string, 0, len(edges))
	for from := range edges {
		nodes = append(nodes, from)
		sort.Strings(edges[from])
	}
	sort.Strings(nodes)
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, next := range edges[n] {
			switch state[next] {
			case onPath:
				start := slices.Index(path, next)
				return append(slices.Clone(path[start:]), next)
			case unvisited:
				if cycle := visit(next); cycle != nil {
					return cycle
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, n := range nodes {
		if state[n] == unvisited {
			if cycle := visit(n); cycle != nil {
				return cycle
			}
		}
	}
	return nil
}

// TestRulesCatchABreak feeds the checks a made-up tree with one break of
// each kind, so a rule that silently matches nothing fails here.
func TestRulesCatchABreak(t *testing.T) {
	pkg := func(rel string, deps ...string) goPackage {
		full := make([]string, len(deps))
		for i, d := range deps {
			full[i] = module + "/" + d
		}
		return goPackage{ImportPath: module + "/" + rel, Imports: full, Deps: full}
	}
	broken := map[string]goPackage{
		"internal/scheduling":    pkg("internal/scheduling", "pkg/provider"),
		"pkg/provider/simulated": pkg("pkg/provider/simulated", "internal/metrics"),
		"api/v1alpha1":           pkg("api/v1alpha1", "internal/scheduling"),
		"internal/externalgrpc":  pkg("internal/externalgrpc", "internal/controllers/provisioning"),
		"internal/kubectlplugin": pkg("internal/kubectlplugin", "internal/controllers/provisioning"),
		"internal/metrics":       pkg("internal/metrics", "internal/operator"),
		"internal/poolusability": pkg("internal/poolusability", "internal/controllers/nodepool"),
	}
	found := violations(broken)
	for _, r := range rules {
		if len(found[r.name]) == 0 {
			t.Errorf("rule %q found no break in a tree made to break it", r.name)
		}
	}
	cyclic := map[string]goPackage{
		"internal/decisions":                pkg("internal/decisions", "internal/controllers/provisioning"),
		"internal/controllers/provisioning": pkg("internal/controllers/provisioning", "internal/decisions"),
	}
	if cycle := groupCycle(cyclic); fmt.Sprint(cycle) != "[internal/controllers internal/decisions internal/controllers]" {
		t.Errorf("groupCycle found %v in a tree with the cycle controllers -> decisions -> controllers", cycle)
	}
}
