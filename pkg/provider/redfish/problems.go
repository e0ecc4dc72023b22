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
