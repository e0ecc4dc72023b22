package redfish

import (
	"sort"

	"github.com/claimscale/claimscale/pkg/provider"
)

// Problems are the servers that cannot serve or that claimscale leaves
// alone, with why.
func (p *Provider) Problems() []provider.Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.problems))
	for key := range p.problems {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]provider.Problem, 0, len(keys))
	for _, key := range keys {
		out = append(out, p.problems[key])
	}
	return out
}

func (p *Provider) report(server, reason, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problems[server+"/"+reason] = provider.Problem{Reason: reason, Message: message}
}

func (p *Provider) clear(server, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.problems, server+"/"+reason)
}

// The reasons of the problems the provider reports on its NodeProvider's
// Degraded condition (docs/troubleshooting.md lists them).
const (
	// ProblemServerUnreachable: the server's BMC did not answer, or
	// refused the credentials; the server is not offered meanwhile.
	ProblemServerUnreachable = "ServerUnreachable"
	// ProblemInventoryMismatch: the server has fewer cpus or less memory
	// than its shape; it is never offered.
	ProblemInventoryMismatch = "InventoryMismatch"
	// ProblemPoweredOnWithoutClaim: the server is on and no lease of ours
	// says we powered it on; it is left alone.
	ProblemPoweredOnWithoutClaim = "PoweredOnWithoutClaim"
	// ProblemClaimedServerPoweredOff: a server on for a claim was powered
	// off outside claimscale; not fought.
	ProblemClaimedServerPoweredOff = "ClaimedServerPoweredOff"
	// ProblemSleepingServerPoweredOn: a server asleep for a claim was
	// powered on outside claimscale; not fought.
	ProblemSleepingServerPoweredOn = "SleepingServerPoweredOn"
)
