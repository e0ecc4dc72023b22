package proxmox_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// TestStressFiftyClaimsUnderRandomFaults makes 50 claims' VMs through two
// providers (two clusters sharing one Proxmox cluster and one VM ID range)
// while names lag, tasks end with warnings, answers are lost, providers
// restart between calls and the two providers race for the same IDs. It
// ends with exactly one VM per claim and no other VM in the range. The
// randomness is seeded and time is a fake clock, so a run is repeatable.
func TestStressFiftyClaimsUnderRandomFaults(t *testing.T) {
	var (
		seed     = uint64(20261124)
		claims   = 50
		maxSteps = 3000
	)
	if v := os.Getenv("PROXMOX_STRESS_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx, _ := loggingContext(t)
	api := proxmoxtest.NewServer(
		proxmoxtest.Node{Name: "pve1", CPUs: 64, MemoryMiB: 256 << 10, UsedMemoryMiB: 4 << 10},
		proxmoxtest.Node{Name: "pve2", CPUs: 64, MemoryMiB: 256 << 10, UsedMemoryMiB: 4 << 10},
	)
	t.Cleanup(api.Close)
	api.SetAPIToken(tokenID, tokenSecret)
	api.AddVM(template())
	api.SetTaskPolls(0)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	api.SetStatsLag(clk, 10*time.Second)

	np := cloneProvider(api.Endpoint())
	np.Spec.Proxmox.VMIDRange = v1alpha1.VMIDRange{Lower: 1000, Upper: 1099}
	clusters := []string{"alpha", "beta"}
	build := func(cluster string) provider.Provider {
		p, err := proxmox.NewFactory(proxmox.Tuning{TaskPollInterval: time.Millisecond, TaskTimeout: time.Minute, StaleLockAfter: 10 * time.Minute, Clock: clk})(
			ctx, np, provider.Options{ClusterName: cluster, Credentials: tokenCredentials(api)})
		if err != nil {
			t.Fatalf("building the provider of %s: %v", cluster, err)
		}
		return p
	}
	providers := map[string]provider.Provider{}
	for _, c := range clusters {
		providers[c] = build(c)
	}

	type pending struct {
		cluster string
		claim   *v1alpha1.NodeClaim
		id      string // providerID once made
	}
	var all []*pending
	for i := range claims {
		all = append(all, &pending{cluster: clusters[i%2], claim: claim(fmt.Sprintf("workers-%02d", i), "1", "1Gi")})
	}
	open := func(cluster string) []*pending {
		var out []*pending
		for _, c := range all {
			if c.id == "" && (cluster == "" || c.cluster == cluster) {
				out = append(out, c)
			}
		}
		return out
	}

	var (
		steps, failures, restarts, warnings, lost, clashes int
		lostHit, restartsMidWork                           int
		clashPending                                       bool
		// current is the cluster whose Create runs at the top level.
		current string
	)
	create := func(c *pending) {
		inst, err := providers[c.cluster].Create(ctx, c.claim, provider.CreateOptions{})
		if err != nil {
			if provider.IsTerminal(err) {
				t.Fatalf("Create %s/%s: terminal error %v", c.cluster, c.claim.Name, err)
			}
			failures++
			return
		}
		if c.id != "" && c.id != inst.ProviderID {
			t.Fatalf("Create %s/%s again returned %s, first %s", c.cluster, c.claim.Name, inst.ProviderID, c.id)
		}
		c.id = inst.ProviderID
	}
	taskTypes := []string{"qmclone", "qmconfig", "qmstart", "qmstop", "qmdestroy"}
	lossPaths := []struct{ method, path string }{
		{http.MethodPost, `/clone$`}, {http.MethodPost, `/qemu/\d+/config$`},
		{http.MethodPut, `/qemu/\d+/config$`}, {http.MethodPost, `/status/start$`},
	}
	start := time.Now()
	for ; steps < maxSteps && len(open("")) > 0; steps++ {
		clk.Step(time.Duration(rng.IntN(15)) * time.Second)
		if rng.Float64() < 0.5 {
			api.FinishTasks() // tasks whose caller stopped waiting run on
		}
		if rng.Float64() < 0.1 {
			c := clusters[rng.IntN(2)]
			providers[c] = build(c)
			restarts++
			if n := len(open(c)); n > 0 && n < claims/2 {
				restartsMidWork++
			}
		}
		if rng.Float64() < 0.3 {
			api.FailTask(proxmoxtest.TaskFault{Type: taskTypes[rng.IntN(len(taskTypes))], ExitStatus: fmt.Sprintf("WARNINGS: %d", 1+rng.IntN(3))})
			warnings++
		}
		if rng.Float64() < 0.3 {
			l := lossPaths[rng.IntN(len(lossPaths))]
			api.InjectFault(proxmoxtest.Fault{Method: l.method, Path: l.path, LoseResponse: true, Before: func() { lostHit++ }})
			lost++
		}
		next := all[rng.IntN(len(all))]
		if rng.Float64() < 0.9 {
			pick := open("")
			next = pick[rng.IntN(len(pick))]
		}
		if !clashPending && rng.Float64() < 0.15 {
			// The other cluster's provider makes a VM between a provider's
			// listing and its clone call: the same free ID, taken on the
			// same node or on another.
			clashPending = true
			pick := rng.Uint64()
			api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/clone$`, Before: func() {
				clashPending = false
				other := clusters[0]
				if current == other {
					other = clusters[1]
				}
				if rivals := open(other); len(rivals) > 0 {
					clashes++
					create(rivals[pick%uint64(len(rivals))])
				}
			}})
		}
		current = next.cluster
		create(next)
	}
	api.FinishTasks()
	if left := open(""); len(left) > 0 {
		t.Fatalf("%d claims still without a VM after %d steps", len(left), steps)
	}

	// Exactly one VM per claim, and none besides.
	byClaim := map[string][]int{}
	for _, vm := range api.VMs() {
		if vm.VMID == templateID {
			continue
		}
		var cluster, claimName string
		for _, tag := range vm.Tags() {
			if v, ok := strings.CutPrefix(tag, "claimscale-cluster."); ok {
				cluster = v
			}
			if v, ok := strings.CutPrefix(tag, "claimscale-claim."); ok {
				claimName = v
			}
		}
		if cluster == "" || claimName == "" || vm.Lock != "" {
			t.Errorf("VM %d on %s is left over (tags %q, lock %q)", vm.VMID, vm.Node, vm.Config["tags"], vm.Lock)
			continue
		}
		byClaim[cluster+"/"+claimName] = append(byClaim[cluster+"/"+claimName], vm.VMID)
	}
	for _, c := range all {
		ids := byClaim[c.cluster+"/"+c.claim.Name]
		if len(ids) != 1 || c.id != proxmox.ProviderID(c.cluster, ids[0]) {
			t.Errorf("claim %s/%s: VMs %v, Create returned %s; want exactly one", c.cluster, c.claim.Name, ids, c.id)
		}
	}
	if len(byClaim) != claims {
		t.Errorf("%d claims have VMs, want %d", len(byClaim), claims)
	}
	for _, c := range clusters {
		list, err := providers[c].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != claims/2 {
			t.Errorf("List of %s = %d VMs, want %d", c, len(list), claims/2)
		}
	}
	nodes := map[string]int{}
	for _, vm := range api.VMs() {
		if vm.VMID != templateID {
			nodes[vm.Node]++
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range nodes {
			if !yield(k) {
				return
			}
		}
	})
	clones := len(api.RequestsTo(http.MethodPost, `/clone$`))
	// The faults were not only injected: they happened.
	_, taskFaults, idConflicts := api.FaultsHit()
	if lostHit == 0 || lostHit > lost {
		t.Errorf("%d of %d injected lost answers happened, want some", lostHit, lost)
	}
	if clashes == 0 || idConflicts == 0 {
		t.Errorf("%d rival VMs made mid-call and %d VM IDs refused as taken, want both", clashes, idConflicts)
	}
	if restartsMidWork == 0 {
		t.Errorf("%d restarts, none while the restarted provider's claims were under way", restarts)
	}
	if taskFaults == 0 {
		t.Errorf("none of %d injected task faults (WARNINGS) happened", warnings)
	}
	t.Logf("seed %d: %d claims in %d steps (%s): %d failed calls retried, %d restarts (%d mid-work), %d WARNINGS faults (%d hit), %d lost answers (%d hit), %d ID races (%d IDs refused), %d clone calls; VMs per node %v %v",
		seed, claims, steps, time.Since(start).Round(time.Millisecond), failures, restarts, restartsMidWork, warnings, taskFaults, lost, lostHit, clashes, idConflicts, clones, keys, nodes)
}
