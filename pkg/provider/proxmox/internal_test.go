package proxmox

import (
	"encoding/json"
	"testing"
	"time"
)

func TestMarkersSurviveTagsAndDescription(t *testing.T) {
	m := markers{cluster: "prod", pool: "workers", claim: "workers-x7k2p"}
	tests := []struct {
		name string
		got  markers
	}{
		{name: "tags as they are written", got: markersFromTags(mergeTags("", m))},
		{name: "tags Proxmox separated with commas and spaces", got: markersFromTags("claimscale-claim.workers-x7k2p, claimscale-cluster.prod claimscale-pool.workers")},
		{name: "tags merged with a template's", got: markersFromTags(mergeTags("ubuntu;claimscale-claim.old;claimscale-cluster.old", m))},
		{name: "the description", got: markersFromDescription(m.description(time.Unix(1700000000, 0)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != m {
				t.Errorf("markers = %+v, want %+v", tt.got, m)
			}
		})
	}
	if got := mergeTags("ubuntu;claimscale-claim.old;claimscale-cluster.old", m); got != "claimscale-claim.workers-x7k2p;claimscale-cluster.prod;claimscale-pool.workers;ubuntu" {
		t.Errorf("merged tags = %q: a template's claimscale tags must be replaced, its other tags kept", got)
	}
	if (markers{cluster: "PROD"}).ownedBy("prod") != true || (markers{}).ownedBy("") {
		t.Error("ownership must ignore case and never match an empty cluster")
	}
}

func TestMemoryDecodesEveryProxmoxForm(t *testing.T) {
	for in, want := range map[string]memoryMB{`4096`: 4096, `"4096"`: 4096, `"current=2048"`: 2048, `"current=1024,foo=1"`: 1024, `null`: 0} {
		var got memoryMB
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != want {
			t.Errorf("memory %s decoded to %d (%v), want %d", in, got, err, want)
		}
	}
}

func TestDiskSizesRoundUpToGiB(t *testing.T) {
	for in, want := range map[string]int64{"32G": 32, "32": 32, "512M": 1, "1536M": 2, "1T": 1024, "10K": 1} {
		got, err := diskGiB(in)
		if err != nil || got != want {
			t.Errorf("diskGiB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "32Gi", "abc", ""} {
		if _, err := diskGiB(in); err == nil {
			t.Errorf("diskGiB(%q) succeeded, want an error", in)
		}
	}
}

func TestEndpointGainsTheAPIPath(t *testing.T) {
	for in, want := range map[string]string{
		"https://pve.example:8006":            "https://pve.example:8006/api2/json",
		"https://pve.example:8006/":           "https://pve.example:8006/api2/json",
		"https://pve.example:8006/api2/json":  "https://pve.example:8006/api2/json",
		"https://pve.example:8006/api2/json/": "https://pve.example:8006/api2/json",
	} {
		if got, err := apiBase(in); err != nil || got != want {
			t.Errorf("apiBase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := apiBase("pve.example:8006"); err == nil {
		t.Error("an endpoint without a scheme was accepted")
	}
}
