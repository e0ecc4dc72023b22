package cloudscale

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Keys of the credentials Secret.
const (
	// CredentialToken holds the API token (read/write).
	CredentialToken = "token"
	// CredentialTokenEnv is accepted instead of CredentialToken, so a Secret
	// made for the cloudscale CLI or CCM (which read CLOUDSCALE_API_TOKEN)
	// can be reused.
	CredentialTokenEnv = "CLOUDSCALE_API_TOKEN"
	// CredentialAPIURL optionally overrides the API's base URL
	// (https://api.cloudscale.ch/), e.g. to point at a fake API.
	CredentialAPIURL = "apiURL"
	// CredentialAPIURLEnv is accepted instead of CredentialAPIURL; it is the
	// name the cloudscale SDK reads from the environment.
	CredentialAPIURLEnv = "CLOUDSCALE_API_URL"
)

// Defaults of the CRD, repeated for NodeProviders made without defaulting
// (tests, a client that bypasses the API server's defaults).
const (
	defaultVolumeSizeGB = 50
	publicNetwork       = "public"
)

// settings is the cloudscale block of a NodeProvider, checked and with its
// defaults applied.
type settings struct {
	zone          string
	image         string
	volumeSizeGB  int
	publicNetwork bool
	interfaces    []v1alpha1.CloudscaleInterface
	serverGroups  []string
	sshKeys       []string
	userData      *v1alpha1.SecretKeyReference
	tags          map[string]string
}

func parseSettings(np *v1alpha1.NodeProvider) (settings, error) {
	cs := np.Spec.Cloudscale
	if cs == nil {
		return settings{}, fmt.Errorf("spec.cloudscale is not set")
	}
	s := settings{
		zone:          cs.Zone,
		image:         cs.Image,
		volumeSizeGB:  int(cs.VolumeSizeGB),
		publicNetwork: cs.PublicNetwork == nil || *cs.PublicNetwork,
		interfaces:    slices.Clone(cs.Interfaces),
		serverGroups:  slices.Clone(cs.ServerGroups),
		sshKeys:       slices.Clone(cs.SSHKeys),
		userData:      cs.UserDataSecretRef,
		tags:          map[string]string{},
	}
	if s.zone == "" {
		return settings{}, fmt.Errorf("spec.cloudscale.zone is empty")
	}
	if s.image == "" {
		return settings{}, fmt.Errorf("spec.cloudscale.image is empty")
	}
	if s.volumeSizeGB == 0 {
		s.volumeSizeGB = defaultVolumeSizeGB
	}
	for i, iface := range s.interfaces {
		if iface.Network == "" && iface.Subnet == "" {
			return settings{}, fmt.Errorf("spec.cloudscale.interfaces[%d] needs a network or a subnet", i)
		}
	}
	for k, v := range cs.Tags {
		// Our own tags decide what we may delete; letting settings set them
		// would let one cluster claim another's servers.
		if strings.HasPrefix(k, "claimscale.io/") {
			return settings{}, fmt.Errorf("spec.cloudscale.tags: %q is reserved for claimscale's own tags", k)
		}
		s.tags[k] = v
	}
	return s, nil
}

// serverRequest is the create request for one server: everything in one
// call, tags included, so no server ever exists without them.
func (s settings) serverRequest(name, flavor, userData string, tags map[string]string) *cloudscale.ServerRequest {
	all := cloudscale.TagMap{}
	for k, v := range s.tags {
		all[k] = v
	}
	for k, v := range tags {
		all[k] = v
	}
	req := &cloudscale.ServerRequest{
		TaggedResourceRequest: cloudscale.TaggedResourceRequest{Tags: &all},
		Name:                  name,
		Flavor:                flavor,
		Image:                 s.image,
		Zone:                  s.zone,
		VolumeSizeGB:          s.volumeSizeGB,
		SSHKeys:               slices.Clone(s.sshKeys),
		ServerGroups:          slices.Clone(s.serverGroups),
		UserData:              userData,
	}
	if req.SSHKeys == nil {
		// The API wants a list here, never null.
		req.SSHKeys = []string{}
	}
	if len(s.interfaces) == 0 {
		req.UsePublicNetwork = &s.publicNetwork
		return req
	}
	// The API takes either use_public_network or an explicit interface
	// list; with private interfaces the public one must be listed too.
	var ifaces []cloudscale.InterfaceRequest
	if s.publicNetwork {
		ifaces = append(ifaces, cloudscale.InterfaceRequest{Network: publicNetwork})
	}
	for _, iface := range s.interfaces {
		ir := cloudscale.InterfaceRequest{Network: iface.Network}
		if iface.Subnet != "" {
			ir.Addresses = &[]cloudscale.AddressRequest{{Subnet: iface.Subnet}}
		}
		ifaces = append(ifaces, ir)
	}
	req.Interfaces = &ifaces
	return req
}

// credentials are what the provider takes from the credentials Secret.
type credentials struct {
	token   *secret
	baseURL string
}

func parseCredentials(data map[string][]byte, secretName string) (credentials, error) {
	var c credentials
	for _, key := range []string{CredentialToken, CredentialTokenEnv} {
		if v := strings.TrimSpace(string(data[key])); v != "" {
			c.token = &secret{value: v}
			break
		}
	}
	if c.token == nil {
		return credentials{}, fmt.Errorf("%s has no API token: set the key %q (or %q) to a cloudscale read/write API token",
			secretName, CredentialToken, CredentialTokenEnv)
	}
	for _, key := range []string{CredentialAPIURL, CredentialAPIURLEnv} {
		if v := strings.TrimSpace(string(data[key])); v != "" {
			c.baseURL = v
			break
		}
	}
	return c, nil
}

// parseBaseURL checks a base URL and gives it the trailing slash the SDK's
// relative paths (v1/servers) need to resolve beneath it.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("cloudscale API URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cloudscale API URL %q: want http(s)://host[/path]", raw)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// secret holds the API token. It is kept behind a pointer because fmt
// prints a nested pointer as an address and cannot call String on an
// unexported field: a %+v of the provider must not print the token.
type secret struct{ value string }

func (*secret) String() string   { return "[redacted]" }
func (*secret) GoString() string { return "[redacted]" }

// redact removes the token from text that came from outside (an API error
// body might echo the request).
func (s *secret) redact(text string) string {
	if s == nil || s.value == "" {
		return text
	}
	return strings.ReplaceAll(text, s.value, "[redacted]")
}
