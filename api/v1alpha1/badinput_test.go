package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/internal/testenv"
)

// rejection is an object the API server must refuse, and a part of the
// message it must refuse it with (which names the field).
type rejection = struct{ name, manifest, message string }

func poolNamed(name, spec string) string {
	return "apiVersion: claimscale.io/v1alpha1\nkind: NodePool\nmetadata: {name: " + name + "}\nspec:\n  providerRef: {name: simulated}\n" + spec
}

const oneShape = "  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: 4Gi}]\n"

func flexible(fields string) string {
	return "  shapes:\n    flexible: {" + fields + "}\n"
}

func templateWith(yaml string) string {
	return oneShape + "  template:\n" + yaml
}

func budget(fields string) string {
	return oneShape + "  disruption:\n    budgets: [{" + fields + "}]\n"
}

// badInputCases are values that can never work: the API server accepted
// them once, and the controller failed on them later (or, for the grid,
// crashed).
func badInputCases() []rejection {
	pool := func(spec string) string { return poolNamed("invalid", spec) }
	return []rejection{
		// Names that leave no room for claim and node names.
		{"pool name of 58 characters", poolNamed(strings.Repeat("a", 58), oneShape), "metadata.name: a NodePool's name must be at most 57 characters"},
		{"pool name of 253 characters", poolNamed(strings.Repeat("a", 63)+"."+strings.Repeat("b", 63)+"."+strings.Repeat("c", 63)+"."+strings.Repeat("d", 61), oneShape), "metadata.name: a NodePool's name must be at most 57 characters"},
		{"pool name with a dot", poolNamed("team.a", oneShape), "metadata.name: a NodePool's name must be a DNS-1123 label"},
		{"provider name of 64 characters", "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: " + strings.Repeat("p", 64) + "}\nspec: {type: simulated}\n", "metadata.name: a NodeProvider's name must be at most 63 characters"},
		{"simulated zone that is no label value", "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: invalid}\nspec:\n  type: simulated\n  simulated: {zones: [\"zone a\"]}\n", "simulated.zones: every zone must be a label value"},
		{"claim name of 64 characters", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: " + strings.Repeat("c", 64) + "}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: \"2\", memory: 4Gi}\n", "metadata.name: a NodeClaim's name must be at most 63 characters"},
		{"provider reference longer than a provider name may be", "apiVersion: claimscale.io/v1alpha1\nkind: NodePool\nmetadata: {name: invalid}\nspec:\n  providerRef: {name: " + strings.Repeat("p", 64) + "}\n" + oneShape, "spec.providerRef.name: Too long"},
		{"claim of a pool whose name is too long for a pool", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: " + strings.Repeat("a", 58) + "}\n  shape: {name: small, cpu: \"2\", memory: 4Gi}\n", "spec.nodePoolRef.name: Too long"},

		// Template labels.
		{"label key with a space", pool(templateWith("    labels: {\"team name\": a}\n")), "template.labels: every key must be a qualified name"},
		{"label key with two slashes", pool(templateWith("    labels: {a/b/c: x}\n")), "template.labels: every key must be a qualified name"},
		{"label key name longer than 63", pool(templateWith("    labels: {example.com/" + strings.Repeat("k", 64) + ": x}\n")), "template.labels: every key must be a qualified name"},
		{"label value with a slash", pool(templateWith("    labels: {team: a/b}\n")), "template.labels: every value must be a label value"},
		{"label value ending in a dash", pool(templateWith("    labels: {team: a-}\n")), "template.labels: every value must be a label value"},
		{"label value longer than 63", pool(templateWith("    labels: {team: " + strings.Repeat("v", 64) + "}\n")), "spec.template.labels.team: Too long"},
		{"label in a subdomain of claimscale.io", pool(templateWith("    labels: {x.claimscale.io/team: a}\n")), "template.labels: labels in the claimscale.io/ domain are reserved"},
		{"kubernetes.io label a kubelet may not set", pool(templateWith("    labels: {kubernetes.io/team: a}\n")), "template.labels: in the kubernetes.io and k8s.io domains only labels a kubelet may set"},
		{"k8s.io subdomain label a kubelet may not set", pool(templateWith("    labels: {node-role.k8s.io/worker: \"\"}\n")), "template.labels: in the kubernetes.io and k8s.io domains only labels a kubelet may set"},
		{"node-role label a kubelet may not set", pool(templateWith("    labels: {node-role.kubernetes.io/worker: \"\"}\n")), "template.labels: in the kubernetes.io and k8s.io domains only labels a kubelet may set"},

		// Taints and startup taints.
		{"taint key with a space", pool(templateWith("    taints: [{key: \"a b\", effect: NoSchedule}]\n")), "template.taints: every key must be a qualified name"},
		{"taint key longer than a qualified name", pool(templateWith("    taints: [{key: " + strings.Repeat("k", 320) + ", effect: NoSchedule}]\n")), "spec.template.taints[0].key: Too long"},
		{"taint value with a slash", pool(templateWith("    taints: [{key: dedicated, value: a/b, effect: NoSchedule}]\n")), "template.taints: every value must be"},
		{"unknown taint effect", pool(templateWith("    taints: [{key: dedicated, effect: NoExecution}]\n")), "template.taints: effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"taint key twice with one effect", pool(templateWith("    taints: [{key: dedicated, value: a, effect: NoSchedule}, {key: dedicated, value: b, effect: NoSchedule}]\n")), "template.taints: a key may appear only once per effect"},
		{"startup taint key with a space", pool(templateWith("    startupTaints: [{key: \"a b\", effect: NoSchedule}]\n")), "template.startupTaints: every key must be a qualified name"},
		{"startup taint value too odd", pool(templateWith("    startupTaints: [{key: cni, value: \"-x\", effect: NoSchedule}]\n")), "template.startupTaints: every value must be"},
		{"unknown startup taint effect", pool(templateWith("    startupTaints: [{key: cni, effect: Never}]\n")), "template.startupTaints: effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"startup taint key twice with one effect", pool(templateWith("    startupTaints: [{key: cni, effect: NoSchedule}, {key: cni, value: x, effect: NoSchedule}]\n")), "template.startupTaints: a key may appear only once per effect"},
		{"a taint that is also a startup taint", pool(templateWith("    taints: [{key: cni, effect: NoSchedule}]\n    startupTaints: [{key: cni, effect: NoSchedule}]\n")), "template.startupTaints: a key and effect may not be both a taint and a startup taint"},
		{"claim taint with an unknown effect", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: \"2\", memory: 4Gi}\n  taints: [{key: a, effect: Sometimes}]\n", "spec.taints: effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"claim startup taint key with a space", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: \"2\", memory: 4Gi}\n  startupTaints: [{key: \"a b\", effect: NoSchedule}]\n", "spec.startupTaints: every key must be a qualified name"},

		// Percentages above 100 %.
		{"eviction threshold of 150 percent", pool(templateWith("    kubelet:\n      evictionHard: {memory.available: \"150%\"}\n")), "evictionHard: a percentage must be at most 100%"},
		{"memory eviction threshold of 100 percent", pool(templateWith("    kubelet:\n      evictionHard: {memory.available: \"100%\"}\n")), "memory.available of 100% leaves the node no allocatable memory"},
		{"memory eviction threshold of 100.0 percent", pool(templateWith("    kubelet:\n      evictionHard: {memory.available: \"100.0%\"}\n")), "memory.available of 100% leaves the node no allocatable memory"},
		{"one hostname for every node", pool(templateWith("    labels: {kubernetes.io/hostname: worker}\n")), "kubernetes.io/hostname may not be set"},
		{"eviction threshold of 100.5 percent", pool(templateWith("    kubelet:\n      evictionHard: {nodefs.available: \"100.5%\"}\n")), "evictionHard: a percentage must be at most 100%"},
		{"budget of 101 percent", pool(budget("nodes: \"101%\"")), "budget nodes must be a count of at most 9 digits, such as 3, or a percentage of at most 100%"},

		// Quantities beyond what the controller can count.
		{"limits cpu of 1e18", pool(oneShape + "  limits: {cpu: \"1e18\"}\n"), "limits.cpu must be at most 1e9 cores"},
		{"limits cpu of 10P", pool(oneShape + "  limits: {cpu: 10P}\n"), "limits.cpu must be at most 1e9 cores"},
		{"limits memory of 2Ei", pool(oneShape + "  limits: {memory: 2Ei}\n"), "limits.memory must be at most 1Ei"},
		{"shape cpu of 1e6", pool("  shapes:\n    fixed: [{name: huge, cpu: \"1e6\", memory: 4Gi}]\n"), "shape cpu must be at most 10000"},
		{"shape memory of 1Ei", pool("  shapes:\n    fixed: [{name: huge, cpu: \"2\", memory: 1Ei}]\n"), "shape memory must be at most 64Ti"},
		{"claim cpu of 10P", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: 10P, memory: 4Gi}\n", "shape cpu must be at most 10000"},
		{"eviction threshold of 2Pi", pool(templateWith("    kubelet:\n      evictionHard: {nodefs.available: 2Pi}\n")), "evictionHard: a quantity must be at most 1Pi"},
		{"negative kube-reserved memory", pool(templateWith("    kubelet:\n      kubeReserved: {memory: -1Gi}\n")), "kubeReserved: values must not be negative"},
		{"kube-reserved cpu of 1e18", pool(templateWith("    kubelet:\n      kubeReserved: {cpu: \"1e18\"}\n")), "kubeReserved.cpu must be at most 10000"},
		{"system-reserved memory of 10P", pool(templateWith("    kubelet:\n      systemReserved: {memory: 10P}\n")), "systemReserved.memory must be at most 64Ti"},
		{"system-reserved pid beyond pid_max", pool(templateWith("    kubelet:\n      systemReserved: {pid: \"5000000\"}\n")), "systemReserved.pid must be at most 4194304"},
		{"kube-reserved ephemeral storage of 1Ei", pool(templateWith("    kubelet:\n      kubeReserved: {ephemeral-storage: 1Ei}\n")), "kubeReserved.ephemeral-storage must be at most 1Pi"},
		{"limits cpu with an exponent that takes the API server seconds to compare", pool(oneShape + "  limits: {cpu: \"1e33333336\"}\n"), "spec.limits.cpu in body should match"},
		{"claim cpu with an exponent that takes minutes to parse", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: \"1e3333333336\", memory: 4Gi}\n", "spec.shape.cpu in body should match"},
		{"shape memory with an exponent of three digits", pool("  shapes:\n    fixed: [{name: huge, cpu: \"2\", memory: \"1e100\"}]\n"), "spec.shapes.fixed[0].memory in body should match"},
		{"price too long to be a number", pool("  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: 4Gi, price: \"" + strings.Repeat("9", 40) + "\"}]\n"), "spec.shapes.fixed[0].price: Too long"},

		// Flexible ranges whose grid would overflow or is unbounded.
		{"the flexible range that crashed the controller", pool(flexible("minCPU: 1m, maxCPU: \"1e6\", minMemory: 1Mi, maxMemory: 1Ei")), "flexible maxCPU must be at most 10000"},
		{"flexible memory of 1Ei", pool(flexible("minCPU: \"1\", maxCPU: \"8\", minMemory: 1Mi, maxMemory: 1Ei")), "flexible maxMemory must be at most 64Ti"},
		{"flexible cpu step below a millicore", pool(flexible("minCPU: \"1\", maxCPU: \"8\", cpuStep: 100u, minMemory: 1Gi, maxMemory: 8Gi")), "flexible cpuStep must be at least 1m"},
		{"flexible memory step below a MiB", pool(flexible("minCPU: \"1\", maxCPU: \"8\", minMemory: 1Gi, maxMemory: 8Gi, memoryStep: 1Ki")), "flexible memoryStep must be at least 1Mi"},
		{"flexible cpu axis of 10000 sizes", pool(flexible("minCPU: 1m, maxCPU: \"10\", cpuStep: 1m, minMemory: 1Gi, maxMemory: 8Gi")), "flexible cpu has more than 1024 sizes"},
		{"flexible memory axis of 2048 sizes", pool(flexible("minCPU: \"1\", maxCPU: \"8\", minMemory: 1Gi, maxMemory: 2Ti, memoryStep: 1Gi")), "flexible memory has more than 1024 sizes"},
		{"flexible grid of 1024 by 1024 sizes", pool(flexible("minCPU: \"1\", maxCPU: \"1024\", minMemory: 1Gi, maxMemory: 1Ti, memoryStep: 1Gi")), "flexible shapes has more than 65536 sizes"},
		{"flexible cpu step of 1e6", pool(flexible("minCPU: \"1\", maxCPU: \"8\", cpuStep: \"1e6\", minMemory: 1Gi, maxMemory: 8Gi")), "flexible cpuStep must be at most 10000"},

		// Durations below a sane floor, or beyond what Go can read.
		{"expireAfter of 1s", pool(oneShape + "  disruption: {expireAfter: 1s}\n"), "expireAfter must be at least 10s"},
		{"expireAfter of 9.9s", pool(oneShape + "  disruption: {expireAfter: 9.9s}\n"), "expireAfter must be at least 10s"},
		{"expireAfter Go cannot read", pool(oneShape + "  disruption: {expireAfter: 99999999999h}\n"), "spec.disruption.expireAfter"},
		{"consolidateAfter Go cannot read", pool(oneShape + "  disruption: {consolidateAfter: 3000000h}\n"), "spec.disruption.consolidateAfter"},
		{"registration timeout of 1s", pool(oneShape + "  registrationTimeout: 1s\n"), "registrationTimeout must be at least 5s"},
		{"budget duration of 30s", pool(budget("nodes: \"1\", schedule: \"@daily\", duration: 30s")), "budget duration must be at least 1m"},
		{"claim grace period Go cannot read", "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: {name: small, cpu: \"2\", memory: 4Gi}\n  terminationGracePeriod: 9999999999h\n", "spec.terminationGracePeriod"},
		{"boot delay Go cannot read", "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: invalid}\nspec:\n  type: simulated\n  simulated: {bootDelay: 9999999999h}\n", "spec.simulated.bootDelay"},

		// Cron schedules that do not parse or never fire.
		{"schedule of six fields", pool(budget("nodes: \"1\", schedule: \"0 0 9 * * mon\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule of words", pool(budget("nodes: \"1\", schedule: \"every day at nine\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with minute 60", pool(budget("nodes: \"1\", schedule: \"60 9 * * *\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with hour 24", pool(budget("nodes: \"1\", schedule: \"0 24 * * *\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with day 32", pool(budget("nodes: \"1\", schedule: \"0 9 32 * *\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with month 13", pool(budget("nodes: \"1\", schedule: \"0 9 1 13 *\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with weekday 7", pool(budget("nodes: \"1\", schedule: \"0 9 * * 7\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with a step of zero", pool(budget("nodes: \"1\", schedule: \"*/0 * * * *\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule with an unknown descriptor", pool(budget("nodes: \"1\", schedule: \"@fortnightly\", duration: 1h")), "schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields"},
		{"schedule on 30 February", pool(budget("nodes: \"1\", schedule: \"0 0 30 2 *\", duration: 1h")), "schedule never fires: February has no day 30 or 31"},
		{"schedule on 31 February by name", pool(budget("nodes: \"1\", schedule: \"0 0 31 feb ?\", duration: 1h")), "schedule never fires: February has no day 30 or 31"},
		{"schedule on 31 April and June", pool(budget("nodes: \"1\", schedule: \"0 0 31 4,6 *\", duration: 1h")), "schedule never fires: none of its months has a day 31"},
		{"budget count of ten digits", pool(budget("nodes: \"9999999999\"")), "budget nodes must be a count of at most 9 digits"},
	}
}

// TestBoundaryValuesAreAccepted keeps the rules above from refusing what
// works: each value here sits on or just inside a bound.
func TestBoundaryValuesAreAccepted(t *testing.T) {
	tests := []struct{ name, manifest string }{
		{"pool name of 57 characters", poolNamed(strings.Repeat("a", 57), oneShape)},
		{"labels a kubelet may set", poolNamed("labels", templateWith("    labels: {node.kubernetes.io/role: worker, topology.kubernetes.io/zone: z1, kubernetes.io/arch: amd64, example.com/team: a, team: \"\"}\n"))},
		{"one taint key with two effects", poolNamed("taints", templateWith("    taints: [{key: dedicated, value: a, effect: NoSchedule}, {key: dedicated, value: a, effect: NoExecute}]\n    startupTaints: [{key: node.cilium.io/agent-not-ready, value: \"true\", effect: NoSchedule}]\n"))},
		{"eviction thresholds at their bounds", poolNamed("eviction", templateWith("    kubelet:\n      evictionHard: {memory.available: \"99.9%\", nodefs.available: 1Pi, imagefs.available: \"0.5%\"}\n"))},
		{"resources at their bounds", poolNamed("bounds", "  shapes:\n    fixed: [{name: huge, cpu: \"10000\", memory: 64Ti}]\n  limits: {cpu: \"1e9\", memory: 1Ei}\n  template:\n    kubelet:\n      kubeReserved: {cpu: \"0\", memory: 64Ti, pid: \"4194304\"}\n")},
		{"a flexible grid of 1024 memory sizes", poolNamed("grid", flexible("minCPU: \"1\", maxCPU: \"64\", minMemory: 1Gi, maxMemory: 1Ti, memoryStep: 1Gi"))},
		{"a flexible range off its step grid", poolNamed("offgrid", flexible("minCPU: 1500m, maxCPU: 1800m, minMemory: 1536Mi, maxMemory: 1800Mi"))},
		{"durations at their floors", poolNamed("durations", oneShape+"  registrationTimeout: 5s\n  disruption:\n    consolidateAfter: 0s\n    expireAfter: 10s\n    budgets: [{nodes: \"0\", schedule: \"*/15 9-17 * * MON-FRI\", duration: 1m}]\n")},
		{"schedules that fire", poolNamed("schedules", oneShape+"  disruption:\n    budgets:\n    - {nodes: \"0\", schedule: \"0 0 29 2 *\", duration: 1h}\n    - {nodes: \"0\", schedule: \"0 0 31 2 mon\", duration: 1h}\n    - {nodes: \"0\", schedule: \"0 0 30 4,6 *\", duration: 1h}\n    - {nodes: \"0\", schedule: \"5,35 0-23/2 1-15 jan-jun,dec sun,sat\", duration: 1h}\n    - {nodes: \"0\", schedule: \"@weekly\", duration: 1h}\n")},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := mustDecode(t, tt.manifest)
			if err := env.Client.Create(ctx, object); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, object) })
		})
	}
}

// TestDocumentedManifestsAreAccepted applies every claimscale object shown
// in a YAML block of the README and the guides, so no rule refuses what
// the documentation tells people to apply.
func TestDocumentedManifestsAreAccepted(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	ctx := context.Background()
	applied := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range yamlBlocks(string(data)) {
			objects, err := testenv.DecodeManifests([]byte(block))
			if err != nil {
				continue // a fragment, not a manifest
			}
			for _, object := range objects {
				if object.GetAPIVersion() != "claimscale.io/v1alpha1" {
					continue
				}
				applied++
				t.Run(fmt.Sprintf("%s/%d/%s/%s", filepath.Base(file), i, object.GetKind(), object.GetName()), func(t *testing.T) {
					if err := env.Client.Create(ctx, object); err != nil {
						t.Fatalf("documented manifest rejected: %v", err)
					}
					t.Cleanup(func() { _ = env.Client.Delete(ctx, object) })
				})
			}
		}
	}
	if applied == 0 {
		t.Fatal("no claimscale manifest found in the documentation")
	}
}

// yamlBlocks returns the bodies of the ```yaml fenced blocks of a Markdown
// text.
func yamlBlocks(markdown string) []string {
	var blocks []string
	for _, part := range strings.Split(markdown, "```yaml\n")[1:] {
		if body, _, ok := strings.Cut(part, "```"); ok {
			blocks = append(blocks, body)
		}
	}
	return blocks
}
