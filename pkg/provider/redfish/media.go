package redfish

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cidata"
)

// LabelMedia marks a Secret as the seed of a server's claim; its value is
// the NodeProvider's name. The media server serves no other Secret.
const LabelMedia = "claimscale.io/redfish-media"

// MediaPath starts the path of every seed image the media server serves:
// MediaPath + <Secret name>/<token>/cidata.iso.
const MediaPath = "/redfish-media/"

// seedFile is the image's file name, the last element of its URL (some
// BMCs want a URL that ends in .iso).
const seedFile = "cidata.iso"

// seeds keeps each leased server's seed, the claim's rendered user data,
// as a Secret of its own beside the lease, so that the media server
// (any replica, after a restart) can serve it as long as the claim holds
// the server: a server asleep boots from it again when it wakes. The
// image's URL carries a random token kept in the Secret, so that only
// the BMC told the URL can fetch the user data (it holds the claim's
// join token). A seed is written before its server is powered on and
// deleted before its lease is released, so none outlives its claim.
type seeds struct {
	kube         client.Client
	namespace    string
	cluster      string
	nodeProvider string
	// baseURL is spec.redfish.mediaURL; serving says the controller runs
	// the media server at all.
	baseURL string
	serving bool
}

func (m *seeds) name(server string) string {
	return "redfish-media-" + m.nodeProvider + "-" + server
}

// seed is a server's seed: the URL its BMC fetches it from, and the
// token in that URL, which is redacted from whatever the BMC answers.
type seed struct {
	url, token string
}

// put writes the seed of the claim's server and returns its URL. Called
// again for the same claim it keeps the token, so a retried power-on
// inserts the same URL; a new claim gets a new token.
func (m *seeds) put(ctx context.Context, l *lease, hostname string, userData []byte) (seed, error) {
	if !m.serving {
		return seed{}, provider.NewTerminal(fmt.Errorf("server %s boots with userData VirtualMedia, but the controller serves no seed images: start it with --redfish-media-bind-address (the chart's redfishProvider.media.enabled)", l.Server))
	}
	data := map[string][]byte{
		"user-data": userData,
		"meta-data": []byte(cidata.MetaData(l.Claim, hostname)),
		"claim":     []byte(l.Claim),
	}
	var existing corev1.Secret
	err := m.kube.Get(ctx, client.ObjectKey{Namespace: m.namespace, Name: m.name(l.Server)}, &existing)
	switch {
	case apierrors.IsNotFound(err):
		token, err := newToken()
		if err != nil {
			return seed{}, err
		}
		data["token"] = []byte(token)
		created := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: m.namespace, Name: m.name(l.Server),
				Labels:      map[string]string{LabelMedia: m.nodeProvider},
				Annotations: map[string]string{v1alpha1.TagCluster: m.cluster},
			},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if err := m.kube.Create(ctx, created); err != nil {
			return seed{}, fmt.Errorf("writing the seed of server %s for claim %s: %w", l.Server, l.Claim, err)
		}
		return m.seedOf(created.Name, token), nil
	case err != nil:
		return seed{}, fmt.Errorf("reading the seed of server %s: %w", l.Server, err)
	}
	token := string(existing.Data["token"])
	if string(existing.Data["claim"]) != l.Claim || token == "" {
		// Left by a claim whose lease was removed by hand: the new claim
		// must not share its URL.
		if token, err = newToken(); err != nil {
			return seed{}, err
		}
	}
	data["token"] = []byte(token)
	if !maps.EqualFunc(existing.Data, data, bytes.Equal) {
		updated := existing.DeepCopy()
		updated.Data = data
		if err := m.kube.Update(ctx, updated); err != nil {
			return seed{}, fmt.Errorf("writing the seed of server %s for claim %s: %w", l.Server, l.Claim, err)
		}
	}
	return m.seedOf(existing.Name, token), nil
}

// current is the seed written for the lease's claim, for a power-on that
// has no user data at hand (a wake); none when there is none.
func (m *seeds) current(ctx context.Context, l *lease) (seed, bool, error) {
	var existing corev1.Secret
	err := m.kube.Get(ctx, client.ObjectKey{Namespace: m.namespace, Name: m.name(l.Server)}, &existing)
	if apierrors.IsNotFound(err) {
		return seed{}, false, nil
	}
	if err != nil {
		return seed{}, false, fmt.Errorf("reading the seed of server %s: %w", l.Server, err)
	}
	if string(existing.Data["claim"]) != l.Claim {
		return seed{}, false, nil
	}
	return m.seedOf(existing.Name, string(existing.Data["token"])), true, nil
}

// remove deletes the server's seed.
func (m *seeds) remove(ctx context.Context, server string) error {
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace, Name: m.name(server)}}
	if err := m.kube.Delete(ctx, stale); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the seed of server %s: %w", server, err)
	}
	return nil
}

// ours reports whether an inserted image is one of this NodeProvider's
// seeds.
func (m *seeds) ours(image string) bool {
	return m.baseURL != "" && strings.HasPrefix(image, strings.TrimSuffix(m.baseURL, "/")+MediaPath+m.name(""))
}

func (m *seeds) seedOf(name, token string) seed {
	return seed{url: strings.TrimSuffix(m.baseURL, "/") + MediaPath + name + "/" + token + "/" + seedFile, token: token}
}

func newToken() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("drawing a seed token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// MediaHandler serves the seed images of the namespace's redfish servers
// to their BMCs: GET and HEAD of MediaPath/<Secret>/<token>/cidata.iso,
// with Range requests (BMCs read images in ranges as the server boots). A
// request whose Secret is not a seed, or whose token is not the seed's,
// is answered 404, as a seed that is gone. Nothing of the path is logged:
// it holds the token. secrets is read on every request (uncached: a BMC
// fetches right after the seed is written); the images built are kept
// per Secret version.
func MediaHandler(secrets client.Reader, namespace string) http.Handler {
	return &mediaHandler{secrets: secrets, namespace: namespace}
}

type mediaHandler struct {
	secrets   client.Reader
	namespace string
	images    sync.Map // Secret name -> builtImage
}

type builtImage struct {
	resourceVersion string
	image           []byte
}

func (h *mediaHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, MediaPath), "/")
	if !strings.HasPrefix(r.URL.Path, MediaPath) || len(parts) != 3 || parts[2] != seedFile {
		http.NotFound(w, r)
		return
	}
	name, token := parts[0], parts[1]
	var secret corev1.Secret
	if err := h.secrets.Get(r.Context(), client.ObjectKey{Namespace: h.namespace, Name: name}, &secret); err != nil {
		if !apierrors.IsNotFound(err) {
			logf.FromContext(r.Context()).Error(err, "reading a seed for a BMC")
			http.Error(w, "the seed could not be read", http.StatusServiceUnavailable)
			return
		}
		h.images.Delete(name)
		http.NotFound(w, r)
		return
	}
	want := secret.Data["token"]
	if secret.Labels[LabelMedia] == "" || len(want) == 0 || subtle.ConstantTimeCompare(want, []byte(token)) != 1 {
		http.NotFound(w, r)
		return
	}
	image, err := h.image(&secret)
	if err != nil {
		logf.FromContext(r.Context()).Error(err, "building a seed image", "secret", name)
		http.Error(w, "the seed image could not be built", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	// No modification time: a claim's seed may be rewritten under one URL.
	http.ServeContent(w, r, seedFile, time.Time{}, bytes.NewReader(image))
}

func (h *mediaHandler) image(secret *corev1.Secret) ([]byte, error) {
	if built, ok := h.images.Load(secret.Name); ok && built.(builtImage).resourceVersion == secret.ResourceVersion {
		return built.(builtImage).image, nil
	}
	image, err := cidata.NoCloud(secret.Data["user-data"], string(secret.Data["meta-data"]))
	if err != nil {
		return nil, err
	}
	h.images.Store(secret.Name, builtImage{resourceVersion: secret.ResourceVersion, image: image})
	return image, nil
}
