package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RedfishSettings describe a fixed inventory of servers whose BMCs speak
// Redfish (DMTF DSP0266): a claim powers one of them on, and deleting the
// claim powers it off again. Nothing is created or destroyed; each server
// is an offering of one.
//
// +kubebuilder:validation:XValidation:rule="self.servers.all(a, self.servers.exists_one(b, b.endpoint == a.endpoint && has(b.system) == has(a.system) && (!has(a.system) || b.system == a.system)))",message="a BMC endpoint and system may be listed only once: two servers of the inventory would be one machine"
// +kubebuilder:validation:XValidation:rule="has(self.mediaURL) || !((has(self.boot) && has(self.boot.userData) && self.boot.userData == 'VirtualMedia') || self.servers.exists(s, has(s.boot) && has(s.boot.userData) && s.boot.userData == 'VirtualMedia'))",message="redfish.mediaURL is needed where a boot has userData VirtualMedia: it is where the BMCs fetch each claim's seed image"
type RedfishSettings struct {
	// Servers is the inventory. A server is powered on only for a claim,
	// and powered off only when it was powered on for one of ours.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	Servers []RedfishServer `json:"servers"`

	// MaxPoweredOn caps how many servers of this provider are on at once
	// for claims (the room's power or cooling budget): a shape whose next
	// server would exceed it is not offered. Unset, no cap.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxPoweredOn *int32 `json:"maxPoweredOn,omitempty"`

	// PowerOnsPerMinute staggers power-ons (inrush current, a PXE server
	// that serves a few at a time): at most this many in any minute.
	// Unset, no stagger.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	PowerOnsPerMinute *int32 `json:"powerOnsPerMinute,omitempty"`

	// ShutdownTimeout is how long a server powered off is given to shut
	// down cleanly (GracefulShutdown) before it is forced off. Defaults to
	// 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="redfish.shutdownTimeout must be between 1s and 1h"
	ShutdownTimeout *metav1.Duration `json:"shutdownTimeout,omitempty"`

	// Boot is how every server boots when it is powered on, unless the
	// server says otherwise. Unset, a server boots as its BIOS says.
	// +optional
	Boot *RedfishBoot `json:"boot,omitempty"`

	// MediaURL is where the BMCs reach the controller's media server
	// (its --redfish-media-bind-address; the chart's
	// redfishProvider.media), e.g. http://10.0.0.5:8089: the base of the
	// per-claim seed images that boots with userData VirtualMedia
	// insert. Each image's URL carries a token of its own.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/[^\s]*)?$`
	MediaURL string `json:"mediaURL,omitempty"`

	// InsecureSkipTLSVerify disables verification of the BMCs'
	// certificates (most BMCs ship a self-signed one). Prefer a CA bundle
	// in the credentials Secret (key ca.crt).
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`
}

// RedfishServer is one server of the inventory.
type RedfishServer struct {
	// Name of the server in claimscale: the machine's name on its claim.
	// Its Node is matched by the system UUID the kubelet reports, so the
	// server's hostname may differ.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="redfish.servers.name must be a DNS label"
	Name string `json:"name"`

	// Endpoint is the BMC's Redfish service root, e.g. https://10.0.0.21
	// (the service answers under /redfish/v1).
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/[^\s]*)?$`
	Endpoint string `json:"endpoint"`

	// System is the ComputerSystem's Id in the BMC's Systems collection
	// (System.Embedded.1 on iDRAC, 1 on iLO). Unset, the BMC must have
	// exactly one.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	System string `json:"system,omitempty"`

	// CredentialsSecretRef names the Secret with this BMC's username and
	// password; unset, the NodeProvider's credentialsSecretRef.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// Shape is the name of a fixed shape of the pools using this
	// provider. The pool's shape says the size and price; the server's
	// own inventory (ProcessorSummary, MemorySummary) must have at least
	// that much, or the server is reported and not offered.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Shape string `json:"shape"`

	// Zone of the server (a rack, a room): its Node's
	// topology.kubernetes.io/zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`

	// Labels the server's Node carries besides the pool's.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Labels map[string]string `json:"labels,omitempty"`

	// Boot overrides the provider's boot for this server.
	// +optional
	Boot *RedfishBoot `json:"boot,omitempty"`
}

// RedfishBootSource is a one-time boot source override.
// +kubebuilder:validation:Enum=Pxe;Hdd;UefiHttp;Cd;None
type RedfishBootSource string

const (
	RedfishBootPxe      RedfishBootSource = "Pxe"
	RedfishBootHdd      RedfishBootSource = "Hdd"
	RedfishBootUefiHTTP RedfishBootSource = "UefiHttp"
	// RedfishBootCd boots the virtual media image.
	RedfishBootCd RedfishBootSource = "Cd"
	// RedfishBootNone sets no override: the server boots as its BIOS says.
	RedfishBootNone RedfishBootSource = "None"
)

// RedfishUserData is how a claim's rendered user data reaches its
// server.
// +kubebuilder:validation:Enum=None;VirtualMedia
type RedfishUserData string

const (
	// RedfishUserDataNone: the server joins with what it has (a netboot
	// image that joins by itself, an installed OS that keeps its kubelet
	// credentials).
	RedfishUserDataNone RedfishUserData = "None"
	// RedfishUserDataVirtualMedia: each claim's user data is a NoCloud
	// seed image (volume label cidata) the BMC inserts as virtual media,
	// fetched from the controller's media server under spec.redfish.mediaURL.
	RedfishUserDataVirtualMedia RedfishUserData = "VirtualMedia"
)

// RedfishBoot is how a server boots once when it is powered on: a
// one-time BootSourceOverrideTarget, and for Cd the virtual media image
// inserted first; and how the claim's user data reaches it.
//
// +kubebuilder:validation:XValidation:rule="self.source == 'Cd' ? has(self.image) : !has(self.image)",message="redfish boot.image is needed for source Cd, and only then"
type RedfishBoot struct {
	// Source of the one-time boot.
	Source RedfishBootSource `json:"source"`
	// Image is the URL of the ISO the BMC inserts as virtual media
	// (VirtualMedia.InsertMedia) for source Cd.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	Image string `json:"image,omitempty"`
	// UserData is how the claim's rendered user data (the NodePool's
	// bootstrap) reaches the server: None (the default), or VirtualMedia,
	// a seed image of its own per claim inserted before the power-on, on
	// a second virtual media device when the first carries the boot
	// image. A pool that renders no user data inserts none.
	// +optional
	UserData RedfishUserData `json:"userData,omitempty"`
}
