package redfish_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cidata"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
)

// bootImage is what the test image server answers for any image.
const bootImage = "a bootable image"

// imageServer is where BMCs fetch a shared boot image from.
func imageServer(t *testing.T) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, bootImage)
	}))
	t.Cleanup(server.Close)
	return server
}

// mediaServer serves the rack's seeds as the controller does.
func (r *rack) mediaServer() *httptest.Server {
	server := httptest.NewServer(redfish.MediaHandler(env.Client, r.namespace))
	r.t.Cleanup(server.Close)
	return server
}

func seedSecrets(g Gomega, r *rack) []corev1.Secret {
	var list corev1.SecretList
	g.Expect(env.Client.List(r.t.Context(), &list, client.InNamespace(r.namespace), client.HasLabels{redfish.LabelMedia})).To(Succeed())
	return list.Items
}

// logged collects what the provider logs.
type logged struct {
	mu   sync.Mutex
	text strings.Builder
}

func (l *logged) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

func (l *logged) sink(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.WriteString(prefix + " " + args + "\n")
}

const joinUserData = "#cloud-config\nruncmd: [kubeadm join --token abcdef.0123456789abcdef]\n"

// A server that boots with userData VirtualMedia gets the claim's own
// seed beside the boot image: the BMC fetches it from the media server
// before the power-on, finds the user data under the label cloud-init
// looks for, keeps it through a sleep, and loses it with the claim.
func TestEachClaimBootsWithItsOwnSeed(t *testing.T) {
	g := NewWithT(t)
	r := newRack(t, "s1", "small", "s2", "small")
	images, media := imageServer(t), r.mediaServer()
	log := &logged{}
	ctx := logf.IntoContext(t.Context(), funcr.New(log.sink, funcr.Options{Verbosity: 10}))
	p := r.provider(testCluster, r.settings(func(s *v1alpha1.RedfishSettings) {
		s.MediaURL = media.URL
		s.Boot = &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootCd, Image: images.URL + "/live.iso", UserData: v1alpha1.RedfishUserDataVirtualMedia}
	}), redfish.Config{MediaServing: true})

	instance, err := p.Create(ctx, claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
	g.Expect(err).NotTo(HaveOccurred())
	system := r.bmcs[instance.Name].System("1")
	g.Expect(system.Media["Cd"]).To(Equal(redfishtest.Media{Image: images.URL + "/live.iso", Content: []byte(bootImage)}))
	seedURL := system.Media["Floppy"].Image
	g.Expect(seedURL).To(HavePrefix(media.URL+redfish.MediaPath), "the seed goes on the second device")
	label, files, err := cidata.Read(system.Media["Floppy"].Content)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(label).To(Equal("cidata"))
	g.Expect(string(files["user-data"])).To(Equal(joinUserData))
	g.Expect(string(files["meta-data"])).To(Equal("instance-id: web-1\nlocal-hostname: " + instance.Name + "\n"))
	g.Expect(system.BootedFrom).To(Equal("Cd"))
	g.Expect(seedSecrets(g, r)).To(HaveLen(1))

	// Only the URL the BMC was told serves the seed; BMCs read in ranges.
	g.Expect(status(seedURL, "")).To(Equal(http.StatusOK))
	g.Expect(status(seedURL, "bytes=0-2047")).To(Equal(http.StatusPartialContent))
	cut := strings.LastIndex(seedURL, "/")
	tokenStart := strings.LastIndex(seedURL[:cut], "/")
	wrongToken := seedURL[:tokenStart+1] + strings.Repeat("A", cut-tokenStart-1) + seedURL[cut:]
	g.Expect(status(wrongToken, "")).To(Equal(http.StatusNotFound))
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: "not-a-seed"},
		Data:       map[string][]byte{"token": []byte("guessable"), "user-data": []byte("someone else's")},
	})).To(Succeed())
	g.Expect(status(media.URL+redfish.MediaPath+"not-a-seed/guessable/cidata.iso", "")).To(Equal(http.StatusNotFound), "a Secret without the seed label is never served")

	// Called again (a retried create), the same URL: nothing re-inserted.
	_, err = p.Create(ctx, claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.bmcs[instance.Name].System("1").Media["Floppy"].Image).To(Equal(seedURL))

	// Asleep and woken, with the seed ejected by hand meanwhile: the
	// claim's seed goes back in, without user data at hand.
	g.Expect(p.Suspend(ctx, instance.ProviderID)).To(Succeed())
	ejectByHand(g, r.bmcs[instance.Name], "Floppy")
	g.Expect(p.Resume(ctx, instance.ProviderID)).To(Succeed())
	g.Expect(r.bmcs[instance.Name].System("1").Media["Floppy"].Image).To(Equal(seedURL))

	g.Expect(p.Delete(ctx, instance.ProviderID)).To(Succeed())
	g.Expect(r.bmcs[instance.Name].System("1").Media).To(BeEmpty(), "both images ejected")
	g.Expect(seedSecrets(g, r)).To(BeEmpty())
	g.Expect(status(seedURL, "")).To(Equal(http.StatusNotFound), "the seed is gone with its claim")

	// The next claim on the server gets a URL of its own.
	next, err := p.Create(ctx, claim("web-2", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.bmcs[next.Name].System("1").Media["Floppy"].Image).NotTo(Or(BeEmpty(), Equal(seedURL)))
	g.Expect(log.String()).NotTo(Or(ContainSubstring("abcdef"), ContainSubstring(redfish.MediaPath)), "neither the user data nor a seed's URL is logged")
}

func status(url, byteRange string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	if byteRange != "" {
		req.Header.Set("Range", byteRange)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// ejectByHand ejects a device as a person at the BMC's web page would.
func ejectByHand(g Gomega, bmc *redfishtest.BMC, device string) {
	req, err := http.NewRequest(http.MethodPost, bmc.URL()+"/redfish/v1/Systems/1/VirtualMedia/"+device+"/Actions/VirtualMedia.EjectMedia", bytes.NewReader([]byte("{}")))
	g.Expect(err).NotTo(HaveOccurred())
	req.SetBasicAuth(testUser, testPassword)
	resp, err := bmc.Server.Client().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))
}

// What can go wrong with a seed is the claim's error, never the seed's
// token: a BMC that cannot fetch the image names its URL, a BMC without a
// second device cannot take it beside the boot image, and a controller
// that serves no media cannot give one. A lease the failed power-on took
// goes back, and its seed with it.
func TestSeedFailuresNameNoToken(t *testing.T) {
	images := imageServer(t)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "disk full", http.StatusServiceUnavailable)
	}))
	t.Cleanup(broken.Close)
	withSeeds := func(mediaURL string, source v1alpha1.RedfishBootSource) func(*v1alpha1.RedfishSettings) {
		return func(s *v1alpha1.RedfishSettings) {
			s.MediaURL = mediaURL
			s.Boot = &v1alpha1.RedfishBoot{Source: source, UserData: v1alpha1.RedfishUserDataVirtualMedia}
			if source == v1alpha1.RedfishBootCd {
				s.Boot.Image = images.URL + "/live.iso"
			}
		}
	}

	t.Run("the BMC cannot fetch the seed", func(t *testing.T) {
		g := NewWithT(t)
		r := newRack(t, "s1", "small")
		p := r.provider(testCluster, r.settings(withSeeds(broken.URL, v1alpha1.RedfishBootPxe)), redfish.Config{MediaServing: true})
		_, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
		g.Expect(err).To(MatchError(ContainSubstring("Cannot download virtual media: got error 503")))
		seeds := seedSecrets(g, r)
		g.Expect(seeds).To(HaveLen(1), "kept with the lease: the power-on is retried")
		g.Expect(err.Error()).To(ContainSubstring("[redacted]"))
		g.Expect(err.Error()).NotTo(ContainSubstring(string(seeds[0].Data["token"])))
		g.Expect(provider.IsRetryable(err)).To(BeTrue(), "a 502 of the BMC: the image server may come back")
		g.Expect(r.bmcs["s1"].System("1").Resets).To(BeEmpty(), "not powered on without its seed")
	})

	t.Run("one virtual media device for the boot image and the seed", func(t *testing.T) {
		g := NewWithT(t)
		r := newRack(t, "s1", "small")
		r.bmcs["s1"].SetOneMediaDevice("1")
		media := r.mediaServer()
		p := r.provider(testCluster, r.settings(withSeeds(media.URL, v1alpha1.RedfishBootCd)), redfish.Config{MediaServing: true})
		_, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
		g.Expect(err).To(MatchError(ContainSubstring("has no second virtual media device")))
		g.Expect(provider.IsTerminal(err)).To(BeTrue())
		g.Expect(leases(g, r)).To(BeEmpty(), "the lease went back: the server was never powered on")
		g.Expect(seedSecrets(g, r)).To(BeEmpty())

		// Booting from the network, the one device takes the seed.
		p = r.provider(testCluster, r.settings(withSeeds(media.URL, v1alpha1.RedfishBootPxe)), redfish.Config{MediaServing: true})
		_, err = p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.bmcs["s1"].System("1").Media["Cd"].Image).To(HavePrefix(media.URL + redfish.MediaPath))
	})

	t.Run("the controller serves no media", func(t *testing.T) {
		g := NewWithT(t)
		r := newRack(t, "s1", "small")
		p := r.provider(testCluster, r.settings(withSeeds("http://10.0.0.5:8089", v1alpha1.RedfishBootPxe)), redfish.Config{})
		_, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{UserData: []byte(joinUserData)})
		g.Expect(err).To(MatchError(ContainSubstring("--redfish-media-bind-address")))
		g.Expect(provider.IsTerminal(err)).To(BeTrue())
		g.Expect(leases(g, r)).To(BeEmpty())
		g.Expect(r.bmcs["s1"].System("1").Resets).To(BeEmpty())
	})

	t.Run("a pool that renders no user data inserts no seed", func(t *testing.T) {
		g := NewWithT(t)
		r := newRack(t, "s1", "small")
		media := r.mediaServer()
		p := r.provider(testCluster, r.settings(withSeeds(media.URL, v1alpha1.RedfishBootPxe)), redfish.Config{MediaServing: true})
		_, err := p.Create(t.Context(), claim("web-1", "small"), provider.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.bmcs["s1"].System("1").Media).To(BeEmpty())
		g.Expect(seedSecrets(g, r)).To(BeEmpty())
	})
}
