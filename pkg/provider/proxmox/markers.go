package proxmox

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Proxmox tags are limited to [a-z0-9_][a-z0-9_+.-]*, so the ownership tags
// (claimscale.io/cluster=NAME, …) are written as PREFIX.NAME. The names are
// Kubernetes object names (and the cluster name is checked), which fit.
const (
	tagPrefixCluster = "claimscale-cluster."
	tagPrefixPool    = "claimscale-pool."
	tagPrefixClaim   = "claimscale-claim."
)

var tagValuePattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_+.-]*$`)

// markers are the ownership markers of a VM: the cluster, pool and claim it
// was made for.
type markers struct {
	cluster string
	pool    string
	claim   string
}

// tags returns the Proxmox tags carrying the markers.
func (m markers) tags() []string {
	return []string{tagPrefixClaim + m.claim, tagPrefixCluster + m.cluster, tagPrefixPool + m.pool}
}

// descriptionCreated is the description line with the VM's creation time.
const descriptionCreated = "claimscale.io/created"

// description is the VM description carrying the markers, for the clone
// call, which takes no tags (the tags follow right after), and for VMs
// whose tags the datacenter's tag policy refuses. It carries the creation
// time as well: a clone copies its template's meta ctime.
func (m markers) description(created time.Time) string {
	return fmt.Sprintf("Made by claimscale for NodeClaim %s; it is deleted with the claim.\n%s=%s\n%s=%s\n%s=%s\n%s=%s\n",
		m.claim,
		v1alpha1.TagCluster, m.cluster,
		v1alpha1.TagNodePool, m.pool,
		v1alpha1.TagNodeClaim, m.claim,
		descriptionCreated, created.UTC().Format(time.RFC3339))
}

// createdFromDescription reads the creation time from a description.
func createdFromDescription(description string) (time.Time, bool) {
	for _, line := range strings.Split(description, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), descriptionCreated+"="); ok {
			t, err := time.Parse(time.RFC3339, v)
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// asTags returns the markers as the provider's ownership tags.
func (m markers) asTags() map[string]string {
	return map[string]string{
		v1alpha1.TagCluster:   m.cluster,
		v1alpha1.TagNodePool:  m.pool,
		v1alpha1.TagNodeClaim: m.claim,
	}
}

// ownedBy says whether the markers name the cluster. Proxmox may change the
// case of tags, so the comparison ignores it.
func (m markers) ownedBy(cluster string) bool {
	return m.cluster != "" && strings.EqualFold(m.cluster, cluster)
}

// markersFromTags reads the markers from a VM's tags, as /cluster/resources
// and the VM's config give them (separated by ';', ',' or spaces).
func markersFromTags(tags string) markers {
	var m markers
	for _, tag := range splitTags(tags) {
		switch {
		case strings.HasPrefix(tag, tagPrefixCluster):
			m.cluster = strings.TrimPrefix(tag, tagPrefixCluster)
		case strings.HasPrefix(tag, tagPrefixPool):
			m.pool = strings.TrimPrefix(tag, tagPrefixPool)
		case strings.HasPrefix(tag, tagPrefixClaim):
			m.claim = strings.TrimPrefix(tag, tagPrefixClaim)
		}
	}
	return m
}

// markersFromDescription reads the markers from the key=value lines of a
// VM's description.
func markersFromDescription(description string) markers {
	var m markers
	for _, line := range strings.Split(description, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch key {
		case v1alpha1.TagCluster:
			m.cluster = value
		case v1alpha1.TagNodePool:
			m.pool = value
		case v1alpha1.TagNodeClaim:
			m.claim = value
		}
	}
	return m
}

// mergeTags returns the VM's tags with our markers in place of any
// claimscale tags it has (a clone inherits its template's tags), keeping the
// rest.
func mergeTags(existing string, m markers) string {
	out := m.tags()
	for _, tag := range splitTags(existing) {
		if strings.HasPrefix(tag, tagPrefixCluster) || strings.HasPrefix(tag, tagPrefixPool) || strings.HasPrefix(tag, tagPrefixClaim) {
			continue
		}
		out = append(out, tag)
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ";")
}

func splitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// hasAllTags says whether the tags carry all three markers as given.
func hasAllTags(tags string, m markers) bool {
	have := splitTags(tags)
	for _, want := range m.tags() {
		if !slices.ContainsFunc(have, func(t string) bool { return strings.EqualFold(t, want) }) {
			return false
		}
	}
	return true
}
