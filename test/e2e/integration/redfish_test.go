package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/cidata"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// metalServer is one server of the rack: its BMC and what it boots into.
type metalServer struct {
	name, shape string
	cpu, memory string
	bmc         *redfishtest.BMC
}

func (m metalServer) system() redfishtest.System { return m.bmc.System("1") }

// bootServers plays the servers' operating systems: a server its BMC
// reports On boots and its kubelet registers a Node as a bare-metal
// kubelet does, named by its hostname, without a providerID (no cloud
// controller sets one), reporting the SMBIOS UUID; a server that is Off
// (or has no hostname) has no kubelet, and the Node it registered, if
// still there without a providerID, is removed.
// hostname is what a booted server calls itself ("" while it cannot
// join); nil is the server's name, as an installed OS has it.
func bootServers(ctx context.Context, t *testing.T, servers []metalServer, hostname func(metalServer, redfishtest.System) string) {
	if hostname == nil {
		hostname = func(server metalServer, _ redfishtest.System) string { return server.name }
	}
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		// registered is the Node each server's kubelet registered, to
		// remove once the server is off and its seed perhaps gone.
		registered := map[string]string{}
		for {
			for _, server := range servers {
				system := server.system()
				name := hostname(server, system)
				if system.PowerState != redfishtest.On || name == "" {
					if last, ok := registered[server.name]; ok {
						node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: last}}
						if err := env.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err == nil && node.Spec.ProviderID == "" {
							_ = env.Client.Delete(ctx, node)
						}
					}
					continue
				}
				allocatable := corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(server.cpu), corev1.ResourceMemory: resource.MustParse(server.memory),
					corev1.ResourcePods: resource.MustParse("110"),
				}
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        name,
						Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
						Labels:      map[string]string{corev1.LabelHostname: name, "type": "kwok"},
					},
					Status: corev1.NodeStatus{
						Capacity: allocatable, Allocatable: allocatable,
						NodeInfo: corev1.NodeSystemInfo{SystemUUID: strings.ToUpper(system.UUID)},
					},
				}
				registered[server.name] = name
				if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
					t.Logf("registering node %s: %v", name, err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// createRedfishProvider makes the scenario's redfish NodeProvider of the
// servers, in the zone, with the BMCs' credentials in a Secret and the
// rest of its settings as given.
func createRedfishProvider(s *harness.Scenario, user, password string, servers []metalServer, zone string, settings v1alpha1.RedfishSettings) {
	s.CreateSecret("redfish-bmc", map[string][]byte{"username": []byte(user), "password": []byte(password)})
	for _, server := range servers {
		settings.Servers = append(settings.Servers, v1alpha1.RedfishServer{Name: server.name, Endpoint: server.bmc.URL(), Shape: server.shape, Zone: zone})
	}
	// The fake BMCs' certificates are httptest's own.
	settings.InsecureSkipTLSVerify = true
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeRedfish,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "redfish-bmc", Namespace: harness.ControllerNamespace},
			Redfish:              &settings,
		},
	})).To(Succeed())
}

// A rack of four servers in two shapes behind a redfish NodeProvider, one
// of them already on for someone else: pending pods power on exactly the
// servers the packer chose, their Nodes register by system UUID, the pods
// run; a burst beyond the cap never has more servers on than the cap; at
// zero every server claimscale powered on is off again, and the one that
// was on without a claim is on still, never touched, and reported.
func TestRedfishPowersTheChosenServersOnAndOff(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.DefaultRegistry(env.Client)})
	s := harness.NewScenario(t, "redfish")
	defer s.Cleanup()

	const user, password = "claimscale", "bmc-e2e-password"
	var servers []metalServer
	for i, spec := range []struct{ shape, cpu, memory string }{{"small", "4", "8Gi"}, {"small", "4", "8Gi"}, {"large", "8", "16Gi"}, {"large", "8", "16Gi"}} {
		cpus := map[string]int{"small": 4, "large": 8}[spec.shape]
		bmc := redfishtest.New(user, password, redfishtest.System{
			ID: "1", UUID: fmt.Sprintf("4c4c4544-0042-3510-8052-b7c04f4d%04d", i), CPUs: cpus, MemoryGiB: float64(2 * cpus),
		})
		// After the scenario's cleanup, which powers its servers off
		// through their BMCs (a deferred Close would run before it).
		t.Cleanup(bmc.Close)
		servers = append(servers, metalServer{name: fmt.Sprintf("redfish-%s-%d", spec.shape, i), shape: spec.shape, cpu: spec.cpu, memory: spec.memory, bmc: bmc})
	}
	someones := servers[0]
	someones.bmc.SetPower("1", redfishtest.On)

	createRedfishProvider(s, user, password, servers, "rack-1", v1alpha1.RedfishSettings{
		MaxPoweredOn: harness.Ptr(int32(2)), Boot: &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootPxe},
	})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "small", CPU: harness.Qty("4"), Memory: harness.Qty("8Gi"), Price: "0.10"},
			{Name: "large", CPU: harness.Qty("8"), Memory: harness.Qty("16Gi"), Price: "0.15"},
		}
	})
	ctx, stopServers := context.WithCancel(context.Background())
	defer stopServers()
	bootServers(ctx, t, servers, nil)

	poweredOnByUs := func() []string {
		var on []string
		for _, server := range servers[1:] {
			if len(server.system().Resets) > 0 && server.system().PowerState != redfishtest.Off {
				on = append(on, server.name)
			}
		}
		return on
	}
	// 3 pods of 3 cpu: a large server holds two, a small one one.
	deployment := s.CreateDeployment("on-metal", 3, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("on-metal") }).Should(Equal(3))
	// Registration lets pods onto a node before it writes the claim's
	// status: wait for both claims (a large and a small server) to say
	// which Node is theirs.
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	claims := s.Claims()
	var chosen []string
	for _, claim := range claims {
		s.G.Expect(claim.Status.ProviderID).To(HavePrefix(v1alpha1.ProviderIDPrefixRedfish))
		s.G.Expect(claim.Status.NodeName).NotTo(BeEmpty())
		node := &corev1.Node{}
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: claim.Status.NodeName}, node)).To(Succeed())
		s.G.Expect(node.Spec.ProviderID).To(Equal(claim.Status.ProviderID), "registration wrote the providerID of the server whose UUID the Node reports")
		chosen = append(chosen, claim.Status.NodeName)
	}
	s.G.Expect(poweredOnByUs()).To(ConsistOf(chosen), "exactly the servers of the claims were powered on")
	for _, name := range poweredOnByUs() {
		for _, server := range servers {
			if server.name == name {
				s.G.Expect(server.system().BootedFrom).To(Equal("Pxe"), "server %s booted once from the network", name)
			}
		}
	}
	s.G.Expect(someones.system().Resets).To(BeEmpty(), "the server on without a claim is never touched")

	// A burst: 6 more pods need more servers than the cap allows.
	s.Scale(deployment, 9)
	s.G.Consistently(func() int { return len(poweredOnByUs()) }, 5*time.Second, 100*time.Millisecond).Should(BeNumerically("<=", 2),
		"never more servers on for claims than maxPoweredOn")

	// The pods left pending are told why, naming what holds the servers.
	s.G.Eventually(func() []string {
		var notes []string
		for _, pod := range s.Pods("on-metal") {
			if pod.Spec.NodeName == "" {
				notes = append(notes, harness.EventsOf(s.G, "Pod", pod.Name)...)
			}
		}
		return notes
	}).Should(ContainElement(And(ContainSubstring("no machine of shapes"), ContainSubstring("its maxPoweredOn"))))

	// The NodeProvider reports the server it leaves alone.
	s.G.Eventually(func() string {
		np := &v1alpha1.NodeProvider{}
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, np); err != nil {
			return err.Error()
		}
		// Its status is rechecked every minute; a touch asks now.
		patch := client.MergeFrom(np.DeepCopy())
		np.Annotations = map[string]string{"e2e/touched": time.Now().Format(time.RFC3339Nano)}
		_ = env.Client.Patch(s.Ctx, np, patch)
		if c := meta.FindStatusCondition(np.Status.Conditions, v1alpha1.ConditionDegraded); c != nil {
			return c.Message
		}
		return ""
	}, 30*time.Second, time.Second).Should(And(ContainSubstring("is on without a claim"), ContainSubstring(someones.name)))

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero())
	s.G.Eventually(poweredOnByUs).Should(BeEmpty(), "every server claimscale powered on is off again")
	var leases corev1.ConfigMapList
	s.G.Expect(env.Client.List(s.Ctx, &leases, client.InNamespace(harness.ControllerNamespace), client.MatchingLabels{redfish.LabelLease: s.Name})).To(Succeed())
	s.G.Expect(leases.Items).To(BeEmpty())
	s.G.Expect(someones.system().PowerState).To(Equal(redfishtest.On))
	s.G.Expect(someones.system().Resets).To(BeEmpty())
}

// Two servers that boot a live image from virtual media and join with
// the seed beside it: each claim's user data (a kubeadm join with the
// claim's own bootstrap token) reaches its server as a NoCloud seed the
// BMC fetched from the controller's media server, a server joins under
// the hostname its seed gives it (and not at all without one), and at
// zero both images are ejected and the seeds deleted. The seeds' tokens
// and the user data show in no log.
func TestRedfishServersJoinWithTheirSeeds(t *testing.T) {
	logs := harness.TapControllerLogs(t)
	mediaAddress := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.DefaultRegistry(env.Client), RedfishMediaBindAddress: mediaAddress})
	s := harness.NewScenario(t, "redfish-seed")
	defer s.Cleanup()

	const user, password, liveImage = "claimscale", "bmc-e2e-password", "a live image that runs cloud-init"
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "live.iso", time.Time{}, strings.NewReader(liveImage))
	}))
	t.Cleanup(images.Close)
	var servers []metalServer
	for i := range 2 {
		bmc := redfishtest.New(user, password, redfishtest.System{
			ID: "1", UUID: fmt.Sprintf("4c4c4544-0042-3510-8052-c8c04f4d%04d", i), CPUs: 4, MemoryGiB: 8,
		})
		// After the scenario's cleanup, which powers its servers off
		// through their BMCs (a deferred Close would run before it).
		t.Cleanup(bmc.Close)
		servers = append(servers, metalServer{name: fmt.Sprintf("redfish-seed-%d", i), shape: "small", cpu: "4", memory: "8Gi", bmc: bmc})
	}
	mediaURL := "http://" + mediaAddress
	createRedfishProvider(s, user, password, servers, "", v1alpha1.RedfishSettings{
		MediaURL: mediaURL,
		Boot:     &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootCd, Image: images.URL + "/live.iso", UserData: v1alpha1.RedfishUserDataVirtualMedia},
	})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "small", CPU: harness.Qty("4"), Memory: harness.Qty("8Gi"), Price: "0.10"}}
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
	})

	// seedOf is the seed the BMC fetched for a server, as the server's
	// cloud-init reads it from the device labelled cidata.
	seedOf := func(system redfishtest.System) (url string, files map[string][]byte) {
		for _, media := range system.Media {
			if !strings.HasPrefix(media.Image, mediaURL+redfish.MediaPath) {
				continue
			}
			// An unreadable seed is no seed: the server never joins.
			if label, files, err := cidata.Read(media.Content); err == nil && label == "cidata" {
				return media.Image, files
			}
			return "", nil
		}
		return "", nil
	}
	ctx, stopServers := context.WithCancel(context.Background())
	defer stopServers()
	bootServers(ctx, t, servers, func(_ metalServer, system redfishtest.System) string {
		_, files := seedOf(system)
		return seedHostname(files)
	})

	deployment := s.CreateDeployment("seeded", 2, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("seeded") }).Should(Equal(2))
	// Registration lets pods onto a node before it writes the claim's
	// status: wait for both claims to say which Node is theirs.
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	seedURLs := map[string]bool{}
	var tokens []string
	for _, claim := range s.Claims() {
		s.G.Expect(claim.Status.BootstrapToken).NotTo(BeNil())
		uuid, _ := v1alpha1.SystemUUIDOf(claim.Status.ProviderID)
		var server *metalServer
		for i := range servers {
			if strings.EqualFold(servers[i].system().UUID, uuid) {
				server = &servers[i]
			}
		}
		s.G.Expect(server).NotTo(BeNil(), "claim %s's server (%s)", claim.Name, claim.Status.ProviderID)
		system := server.system()
		s.G.Expect(system.Media["Cd"].Content).To(Equal([]byte(liveImage)), "the live image on the CD")
		s.G.Expect(system.BootedFrom).To(Equal("Cd"))
		url, files := seedOf(system)
		s.G.Expect(url).NotTo(BeEmpty(), "server %s has its seed", server.name)
		seedURLs[url] = true
		// The URL is <mediaURL>/redfish-media/<secret>/<token>/cidata.iso.
		parts := strings.Split(strings.TrimPrefix(url, mediaURL+redfish.MediaPath), "/")
		s.G.Expect(parts).To(HaveLen(3))
		tokens = append(tokens, parts[1])
		s.G.Expect(string(files["meta-data"])).To(HavePrefix("instance-id: "+claim.Name+"\n"), "the seed is the claim's")
		s.G.Expect(string(files["user-data"])).To(And(ContainSubstring("kind: JoinConfiguration"), ContainSubstring(`token: "`+claim.Status.BootstrapToken.ID+".")),
			"the user data joins with the claim's own token")
		s.G.Expect(claim.Status.NodeName).To(Equal(seedHostname(files)), "the Node is the one the seeded server registered")
	}
	s.G.Expect(seedURLs).To(HaveLen(2), "each claim's seed has a URL of its own")

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero())
	for _, server := range servers {
		s.G.Eventually(func() string { return server.system().PowerState }).Should(Equal(redfishtest.Off))
		s.G.Expect(server.system().Media).To(BeEmpty(), "server %s's images are ejected", server.name)
	}
	var seeds corev1.SecretList
	s.G.Expect(env.Client.List(s.Ctx, &seeds, client.InNamespace(harness.ControllerNamespace), client.MatchingLabels{redfish.LabelMedia: s.Name})).To(Succeed())
	s.G.Expect(seeds.Items).To(BeEmpty(), "the seeds are deleted with their claims")
	for url := range seedURLs {
		resp, err := http.Get(url)
		s.G.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		s.G.Expect(resp.StatusCode).To(Equal(http.StatusNotFound), "a seed is served no longer than its claim lives")
	}
	needles := map[string]string{"the user data": "kubeadm.k8s.io/v1beta4"}
	for i, token := range tokens {
		needles[fmt.Sprintf("seed token %d", i)] = token
	}
	assertNowhere(t, logs.String(), needles)
}

// seedHostname is the hostname a seed's meta-data gives its server.
func seedHostname(files map[string][]byte) string {
	for _, line := range strings.Split(string(files["meta-data"]), "\n") {
		if name, ok := strings.CutPrefix(line, "local-hostname: "); ok {
			return name
		}
	}
	return ""
}
