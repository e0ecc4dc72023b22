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
	// zones servers are made in, in the order given; the first is where a
	// claim that allows any zone goes.
	zones         []zoneSettings
	image         string
	volumeSizeGB  int
	publicNetwork bool
	sshKeys       []string
	userData      *v1alpha1.SecretKeyReference
	tags          map[string]string
	errorPatterns []errorPattern
	// maxServersPerGroup of the managed server groups; 0 when claimscale
	// manages none.
	maxServersPerGroup int
}

// zoneSettings are the zonal settings of one zone: private networks and
// server groups exist in one zone only.
type zoneSettings struct {
	name         string
	interfaces   []v1alpha1.CloudscaleInterface
	serverGroups []string
}

func (s settings) zoneNames() []string {
	names := make([]string, 0, len(s.zones))
	for _, z := range s.zones {
		names = append(names, z.name)
	}
	return names
}

func (s settings) zone(name string) (zoneSettings, bool) {
	for _, z := range s.zones {
		if z.name == name {
			return z, true
		}
	}
	return zoneSettings{}, false
}

func parseSettings(np *v1alpha1.NodeProvider) (settings, error) {
	cs := np.Spec.Cloudscale
	if cs == nil {
		return settings{}, fmt.Errorf("spec.cloudscale is not set")
	}
	s := settings{
		image:         cs.Image,
		volumeSizeGB:  int(cs.VolumeSizeGB),
		publicNetwork: cs.PublicNetwork == nil || *cs.PublicNetwork,
		sshKeys:       slices.Clone(cs.SSHKeys),
		userData:      cs.UserDataSecretRef,
		tags:          map[string]string{},
	}
	switch {
	case cs.Zone != "" && len(cs.Zones) > 0:
		return settings{}, fmt.Errorf("spec.cloudscale sets both zone and zones: zone is the older form of a single-entry zones, set one of them")
	case len(cs.Zones) > 0:
		for i, z := range cs.Zones {
			if z.Name == "" {
				return settings{}, fmt.Errorf("spec.cloudscale.zones[%d].name is empty", i)
			}
			if _, dup := s.zone(z.Name); dup {
				return settings{}, fmt.Errorf("spec.cloudscale.zones[%d]: zone %s is listed twice", i, z.Name)
			}
			zs := zoneSettings{name: z.Name, interfaces: slices.Clone(cs.Interfaces), serverGroups: slices.Clone(cs.ServerGroups)}
			if z.Interfaces != nil {
				zs.interfaces = slices.Clone(z.Interfaces)
			}
			if z.ServerGroups != nil {
				zs.serverGroups = slices.Clone(z.ServerGroups)
			}
			s.zones = append(s.zones, zs)
		}
	case cs.Zone != "":
		s.zones = []zoneSettings{{name: cs.Zone, interfaces: slices.Clone(cs.Interfaces), serverGroups: slices.Clone(cs.ServerGroups)}}
	default:
		return settings{}, fmt.Errorf("spec.cloudscale.zones is empty: list the zones servers are made in (lpg1, rma1)")
	}
	if s.image == "" {
		return settings{}, fmt.Errorf("spec.cloudscale.image is empty")
	}
	if s.volumeSizeGB == 0 {
		s.volumeSizeGB = defaultVolumeSizeGB
	}
	for _, z := range s.zones {
		for i, iface := range z.interfaces {
			if iface.Network == "" && iface.Subnet == "" {
				return settings{}, fmt.Errorf("spec.cloudscale interfaces[%d] of zone %s needs a network or a subnet", i, z.name)
			}
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
	if m := cs.ManagedServerGroups; m != nil {
		s.maxServersPerGroup = int(m.MaxServersPerGroup)
		if s.maxServersPerGroup == 0 {
			s.maxServersPerGroup = defaultMaxServersPerGroup
		}
	}
	patterns, err := parseErrorPatterns(cs.ErrorPatterns)
	if err != nil {
		return settings{}, err
	}
	s.errorPatterns = patterns
	return s, nil
}

// serverRequest is the create request for one server in one zone:
// everything in one call, tags included, so no server ever exists without
// them.
func (s settings) serverRequest(zone zoneSettings, name, flavor, userData string, tags map[string]string) *cloudscale.ServerRequest {
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
		Zone:                  zone.name,
		VolumeSizeGB:          s.volumeSizeGB,
		SSHKeys:               slices.Clone(s.sshKeys),
		ServerGroups:          slices.Clone(zone.serverGroups),
		UserData:              userData,
	}
	if req.SSHKeys == nil {
		// The API wants a list here, never null.
		req.SSHKeys = []string{}
	}
	if len(zone.interfaces) == 0 {
		req.UsePublicNetwork = &s.publicNetwork
		return req
	}
	// The API takes either use_public_network or an explicit interface
	// list; with private interfaces the public one must be listed too.
	var ifaces []cloudscale.InterfaceRequest
	if s.publicNetwork {
		ifaces = append(ifaces, cloudscale.InterfaceRequest{Network: publicNetwork})
	}
	for _, iface := range zone.interfaces {
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
