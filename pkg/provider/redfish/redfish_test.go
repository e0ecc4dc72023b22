package redfish_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
)

func leases(g Gomega, r *rack) []corev1.ConfigMap {
	var list corev1.ConfigMapList
	g.Expect(env.Client.List(context.Background(), &list, client.InNamespace(r.namespace), client.HasLabels{redfish.LabelLease})).To(Succeed())
	return list.Items
}

// Create leases an off server of the claim's shape, sets its one-time
// boot and powers it on; Delete shuts it down and releases it. A server
// that was on without a claim is neither chosen nor touched, and is
// reported.
func TestCreatePowersOnAnOffServerAndDeletePowersItOff(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small", "l1", "large")
	r.bmcs["s1"].SetPower("1", redfishtest.On) // someone's machine
	p := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) {
		s.Boot = &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootPxe}
	}), redfish.Config{})

	shapes, err := p.Shapes(t.Context(), pool())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(available(shapes)).To(Equal(map[string]int{"small": 1, "large": 1}), "s1 is on without a claim: one small server is free")

	instance, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	s2 := r.bmcs["s2"].System("1")
	g.Expect(instance.Name).To(Equal("s2"), "s1 is on without a claim: never chosen")
	g.Expect(instance.ProviderID).To(Equal(redfish.ProviderIDPrefix + s2.UUID))
	g.Expect(instance.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "rack-1"))
	g.Expect(instance.Tags).To(Equal(map[string]string{v1alpha1.TagCluster: testCluster, v1alpha1.TagNodePool: "metal", v1alpha1.TagNodeClaim: "web-1"}))
	g.Expect(s2.Resets).To(Equal([]string{"On"}))
	g.Expect(s2.BootedFrom).To(Equal("Pxe"), "the one-time override was set before the power-on")
	g.Expect(r.bmcs["s1"].System("1").Resets).To(BeEmpty())
	g.Eventually(func() string { return r.powerOf("s2") }).Should(Equal(redfishtest.On))
	g.Expect(leases(g, r)).To(HaveLen(1))
	g.Expect(problemReasons(p)).To(ContainElement("PoweredOnWithoutClaim"))

	again, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Name).To(Equal("s2"), "Create is idempotent by claim")
	g.Expect(r.bmcs["s2"].System("1").Resets).To(HaveLen(1), "a server on is not powered on again")

	_, err = p.Create(t.Context(), claim("web-2", "small"), provider.CreateOptions{})
	g.Expect(provider.IsInsufficientCapacity(err)).To(BeTrue(), "the only other small server is someone's: %v", err)
	shapes, err = p.Shapes(t.Context(), pool())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shapes).To(ContainElement(And(HaveField("Name", "small"), HaveField("Available", 0),
		HaveField("Taken", "s1 on without a claim, s2 on for claim web-1"))), "what holds the shape's servers, for the pods that find none")

	g.Expect(p.Delete(t.Context(), instance.ProviderID)).To(Succeed())
	g.Expect(r.bmcs["s2"].System("1").Resets).To(Equal([]string{"On", "GracefulShutdown"}))
	g.Expect(r.powerOf("s2")).To(Equal(redfishtest.Off))
	g.Expect(leases(g, r)).To(BeEmpty())
	g.Expect(r.powerOf("s1")).To(Equal(redfishtest.On), "nothing powered off the server that was not ours")

	err = p.Delete(t.Context(), redfish.ProviderIDPrefix+r.bmcs["s1"].System("1").UUID)
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "Delete of a server on without our lease is refused: %v", err)
	g.Expect(r.bmcs["s1"].System("1").Resets).To(BeEmpty())
}

// A server whose OS ignores the ACPI shutdown is forced off once
// shutdownTimeout passes on the provider's clock, and not before.
func TestAServerThatIgnoresTheShutdownIsForcedOffAfterTheTimeout(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small")
	fake := clocktesting.NewFakeClock(time.Now())
	bmc := r.bmcs["s1"]
	bmc.SetClock(fake.Now)
	bmc.Transition = 0
	p := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) {
		s.ShutdownTimeout.Duration = 3 * time.Minute
	}), redfish.Config{Clock: fake, PollInterval: time.Second})
	instance, err := p.Create(t.Context(), claim("batch-1", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	bmcIgnoresShutdown(bmc)

	done := make(chan error, 1)
	go func() { done <- p.Delete(t.Context(), instance.ProviderID) }()
	g.Eventually(func() []string { return bmc.System("1").Resets }).Should(Equal([]string{"On", "GracefulShutdown"}))

	polled := len(bmc.Requests())
	fake.Step(2*time.Minute + 50*time.Second)
	g.Eventually(func() int { return len(bmc.Requests()) }).Should(BeNumerically(">", polled), "the provider read the server after the step")
	g.Expect(bmc.System("1").Resets).NotTo(ContainElement("ForceOff"), "not forced before shutdownTimeout")

	g.Eventually(func() []string {
		fake.Step(5 * time.Second)
		return bmc.System("1").Resets
	}).Should(Equal([]string{"On", "GracefulShutdown", "ForceOff"}))
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(bmc.System("1").PowerState).To(Equal(redfishtest.Off))
}

func bmcIgnoresShutdown(bmc *redfishtest.BMC) { bmc.IgnoreGracefulShutdown("1") }

// maxPoweredOn caps the servers on: a shape is not offered once the cap
// is reached, and Create answers insufficient capacity; powerOnsPerMinute
// staggers power-ons with a Retry-After until the minute has passed.
func TestTheCapAndTheStaggerHold(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small", "s3", "small")
	fake := clocktesting.NewFakeClock(time.Now())
	capped := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) {
		s.MaxPoweredOn, s.PowerOnsPerMinute = ptr.To(int32(2)), ptr.To(int32(1))
	}), redfish.Config{Clock: fake})

	_, err := capped.Create(t.Context(), claim("c1", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = capped.Create(t.Context(), claim("c2", "small"), provider.CreateOptions{})
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "one power-on a minute: %v", err)
	g.Expect(provider.RetryAfter(err)).To(BeNumerically("~", time.Minute, time.Second))

	fake.Step(61 * time.Second)
	_, err = capped.Create(t.Context(), claim("c2", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	fake.Step(61 * time.Second)
	_, err = capped.Create(t.Context(), claim("c3", "small"), provider.CreateOptions{})
	g.Expect(provider.IsInsufficientCapacity(err)).To(BeTrue(), "two servers on, the cap: %v", err)
	shapes, err := capped.Shapes(t.Context(), pool())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(available(shapes)).To(Equal(map[string]int{"small": 0, "large": 0}), "no server is free at the cap")
	g.Expect(shapes).To(ContainElement(And(HaveField("Name", "small"), HaveField("Taken", ContainSubstring("its maxPoweredOn")))))
	g.Expect(r.powerOf("s3")).To(Equal(redfishtest.Off))
}

// BMC answers become the provider's error kinds, with the BMC's message
// and never the password; a failing BMC is backed off, so a second call
// within the backoff sends no request.
func TestBMCAnswersBecomeErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failure redfishtest.Failure
		check   func(g Gomega, err error)
	}{
		{"401", redfishtest.Failure{Status: 401}, func(g Gomega, err error) { g.Expect(provider.IsTerminal(err)).To(BeTrue()) }},
		{"403", redfishtest.Failure{Status: 403}, func(g Gomega, err error) {
			g.Expect(provider.IsTerminal(err)).To(BeTrue())
			g.Expect(err.Error()).To(ContainSubstring("privilege"))
		}},
		{"404", redfishtest.Failure{Status: 404}, func(g Gomega, err error) {
			g.Expect(provider.IsTerminal(err)).To(BeTrue(), "a leased server is not gone because its BMC lost track of it")
		}},
		{"503 with Retry-After", redfishtest.Failure{Status: 503, RetryAfter: 7}, func(g Gomega, err error) {
			g.Expect(provider.IsRetryable(err)).To(BeTrue())
			g.Expect(provider.RetryAfter(err)).To(Equal(7 * time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := newRack(t, "s1", "small")
			p := r.provider(testCluster, r.settings(), redfish.Config{})
			instance, err := p.Create(t.Context(), claim("e1", "small"), provider.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			r.bmcs["s1"].Fail(tc.failure)
			err = p.Delete(t.Context(), instance.ProviderID)
			g.Expect(err).To(HaveOccurred())
			tc.check(g, err)
			g.Expect(err.Error()).To(ContainSubstring(r.bmcs["s1"].URL()))
			g.Expect(err.Error()).NotTo(ContainSubstring(testPassword))
			sent := len(r.bmcs["s1"].Requests())
			g.Expect(p.Delete(t.Context(), instance.ProviderID)).NotTo(Succeed())
			g.Expect(r.bmcs["s1"].Requests()).To(HaveLen(sent), "the BMC is in backoff: no request")
			g.Expect(r.bmcs["s1"].System("1").Resets).To(Equal([]string{"On"}), "no power-off was sent")
		})
	}
}

// A BMC that accepts connections and never answers costs one call
// timeout, and the server is reported, while the others keep serving.
func TestAHungBMCTimesOutAndTheOthersServe(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small")
	r.bmcs["s1"].Hang()
	p := r.provider(testCluster, r.settings(), redfish.Config{CallTimeout: 300 * time.Millisecond})
	instance, err := p.Create(t.Context(), claim("h1", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(instance.Name).To(Equal("s2"))
	g.Expect(problemReasons(p)).To(ContainElement("ServerUnreachable"))
	g.Expect(problemMessages(p)).To(ContainElement(ContainSubstring("did not answer within 300ms")))
}

// A server whose own inventory is smaller than its listed shape is not
// offered, and is reported.
func TestAServerSmallerThanItsShapeIsNotOffered(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "l1", "large")
	r.servers[0].Shape = "large"
	p := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) { s.Servers[0].Shape = "large" }), redfish.Config{})
	lying := pool()
	lying.Spec.Shapes.Fixed[1].CPU = ptr.To(resource.MustParse("32"))
	shapes, err := p.Shapes(t.Context(), lying)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(available(shapes)).To(HaveKeyWithValue("large", 0))
	g.Expect(problemReasons(p)).To(ContainElement("InventoryMismatch"))
}

// A server's shape carries its devices: the pool's shape names the GPUs
// of its servers, and the offered shape has them beside cpu and memory, so
// the packer powers on a GPU server for a pod that asks for one.
func TestAServersShapeCarriesItsDevices(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "l1", "large")
	p := r.provider(testCluster, r.settings(), redfish.Config{})
	withGPUs := pool()
	withGPUs.Spec.Shapes.Fixed[1].ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	shapes, err := p.Shapes(t.Context(), withGPUs)
	g.Expect(err).NotTo(HaveOccurred())
	gpus := map[string]int64{}
	for _, s := range shapes {
		gpus[s.Name] = s.Capacity.Name("nvidia.com/gpu", resource.DecimalSI).Value()
	}
	g.Expect(gpus).To(Equal(map[string]int64{"small": 0, "large": 2}))
}

// Suspend powers the server off and keeps it leased; Resume powers the
// same server on again; a claimed server powered off by hand is reported
// and not powered on again.
func TestSuspendKeepsTheServerAndResumeWakesIt(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small")
	p := r.provider(testCluster, r.settings(), redfish.Config{})
	instance, err := p.Create(t.Context(), claim("sleepy", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Suspend(t.Context(), instance.ProviderID)).To(Succeed())
	g.Expect(r.powerOf(instance.Name)).To(Equal(redfishtest.Off))
	asleep, err := p.Get(t.Context(), instance.ProviderID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(asleep.State).To(Equal(provider.InstanceSuspended))
	g.Expect(leases(g, r)).To(HaveLen(1), "a sleeping server stays ours")

	other, err := p.Create(t.Context(), claim("other", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.Name).NotTo(Equal(instance.Name), "a sleeping server is not free")

	g.Expect(p.Resume(t.Context(), instance.ProviderID)).To(Succeed())
	g.Eventually(func() string { return r.powerOf(instance.Name) }).Should(Equal(redfishtest.On))

	r.bmcs[other.Name].SetPower("1", redfishtest.Off)
	got, err := p.Get(t.Context(), other.ProviderID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.State).To(Equal(provider.InstanceRunning), "not fought: the lifecycle is not told to do anything")
	g.Expect(problemReasons(p)).To(ContainElement("ClaimedServerPoweredOff"))
	g.Expect(r.bmcs[other.Name].System("1").Resets).To(Equal([]string{"On"}))
}

// A system that does not allow On is powered on with ForceOn; boot from
// virtual media inserts the image first and ejects it after power-off.
func TestForceOnAndVirtualMedia(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small")
	r.bmcs["s1"].SetResetTypes("1", "ForceOn", "ForceOff")
	images := imageServer(t)
	p := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) {
		s.Boot = &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootCd, Image: images.URL + "/join.iso"}
	}), redfish.Config{})
	instance, err := p.Create(t.Context(), claim("iso", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	system := r.bmcs["s1"].System("1")
	g.Expect(system.Resets).To(Equal([]string{"ForceOn"}))
	g.Expect(system.MediaImage).To(Equal(images.URL + "/join.iso"))
	g.Expect(system.Media["Cd"].Content).To(Equal([]byte(bootImage)), "the BMC fetched the image")
	g.Expect(system.BootedFrom).To(Equal("Cd"))
	g.Expect(p.Delete(t.Context(), instance.ProviderID)).To(Succeed())
	system = r.bmcs["s1"].System("1")
	g.Expect(system.Resets).To(Equal([]string{"ForceOn", "ForceOff"}), "no GracefulShutdown where the BMC does not list it")
	g.Expect(system.MediaImage).To(BeEmpty())
}

// Creates of many claims at once send one request at a time to each BMC.
func TestCallsToOneBMCAreSerialized(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small", "s3", "small")
	p := r.provider(testCluster, r.settings(), redfish.Config{})
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Create(t.Context(), claim("burst-"+name, "small"), provider.CreateOptions{})
		}()
	}
	wg.Wait()
	g.Expect(leases(g, r)).To(HaveLen(3), "three servers, three leases")
	for name, bmc := range r.bmcs {
		g.Expect(bmc.MaxConcurrent()).To(Equal(1), "BMC of %s", name)
		g.Expect(bmc.System("1").Resets).To(HaveLen(1), "server %s powered on once", name)
	}
}

// available is each shape's count of free servers; every shape is an
// inventory's.
func available(shapes []provider.Shape) map[string]int {
	counts := map[string]int{}
	for _, shape := range shapes {
		if shape.Inventory {
			counts[shape.Name] = shape.Available
		}
	}
	return counts
}

func problemReasons(p provider.ProblemReporter) []string {
	var reasons []string
	for _, problem := range p.Problems() {
		reasons = append(reasons, problem.Reason)
	}
	return reasons
}

func problemMessages(p provider.ProblemReporter) []string {
	var messages []string
	for _, problem := range p.Problems() {
		messages = append(messages, problem.Message)
	}
	return messages
}

// A reset the BMC refuses with 409 (a transition running) is waited out
// and asked again, not failed: the server is off in the end.
func TestAResetRefusedDuringATransitionIsAskedAgain(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small")
	p := r.provider(testCluster, r.settings(), redfish.Config{})
	instance, err := p.Create(t.Context(), claim("busy", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() string { return r.powerOf("s1") }).Should(Equal(redfishtest.On))
	r.bmcs["s1"].Fail(redfishtest.Failure{Method: "POST", PathSuffix: "ComputerSystem.Reset", Status: 409, Times: 2})
	g.Expect(p.Delete(t.Context(), instance.ProviderID)).To(Succeed())
	g.Expect(r.powerOf("s1")).To(Equal(redfishtest.Off))
	resets := 0
	for _, request := range r.bmcs["s1"].Requests() {
		if strings.HasSuffix(request, "ComputerSystem.Reset") {
			resets++
		}
	}
	g.Expect(resets).To(Equal(4), "the power-on, two refused shutdowns, the one that went through")
}

// A server powered on for a claim stays leased when a later call for the
// claim is refused (the BMC's password changed): it is on, and must stay
// ours to power off. Only a power-on refused right after its lease was
// taken gives the lease back.
func TestARefusedCallNeverGivesUpTheLeaseOfAServerThatIsOn(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small")
	p := r.provider(testCluster, r.settings(), redfish.Config{})
	_, err := p.Create(t.Context(), claim("kept", "small"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	r.bmcs["s1"].Fail(redfishtest.Failure{Status: 401})
	_, err = r.provider(testCluster, r.settings(), redfish.Config{}).Create(t.Context(), claim("kept", "small"), provider.CreateOptions{})
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "%v", err)
	g.Expect(leases(g, r)).To(HaveLen(1), "the server that is on stays leased")

	r.bmcs["s2"].Fail(redfishtest.Failure{Method: "POST", PathSuffix: "ComputerSystem.Reset", Status: 400})
	_, err = p.Create(t.Context(), claim("refused", "small"), provider.CreateOptions{})
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "%v", err)
	g.Expect(leases(g, r)).To(HaveLen(1), "the lease of the refused power-on went back")
}
