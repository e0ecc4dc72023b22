package cloudscale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

var _ provider.PowerManager = (*Provider)(nil)

// powerSettleAfter is how long to wait before asking again about a server
// the API is still changing: a stop or start is accepted at once (204) and
// done in the background.
const powerSettleAfter = 5 * time.Second

// Suspend stops a server of this cluster through the API's stop action; it
// keeps its volumes, addresses, tags and UUID. The API carries the stop
// out after it answers, so success means the stop was accepted: the server
// shows "changing" (Get and List: Creating) until it is stopped
// (Suspended). A stopped server is success, and so is one changing after a
// stop this provider posted; one changing otherwise (a start under way, or
// an action from before a restart) answers InProgress, to be asked again
// once it settles.
func (p *Provider) Suspend(ctx context.Context, providerID string) error {
	return p.power(ctx, providerID, "stop", cloudscale.ServerStopped)
}

// Resume starts a stopped server of this cluster where it is, with the
// same asynchronous answer as Suspend. A running server is success; one
// still changing answers InProgress.
func (p *Provider) Resume(ctx context.Context, providerID string) error {
	return p.power(ctx, providerID, "start", cloudscale.ServerRunning)
}

// power brings a server to the status want through the action.
func (p *Provider) power(ctx context.Context, providerID, action, want string) error {
	id, err := parseProviderID(providerID)
	if err != nil {
		return err
	}
	server, err := p.get(ctx, id)
	if err != nil {
		return err
	}
	if got := server.Tags[v1alpha1.TagCluster]; got != p.clusterName {
		return provider.NewTerminal(fmt.Errorf("refusing to %s cloudscale server %s (%s): %w: want %s=%s, it has %q",
			action, id, server.Name, ErrForeignServer, v1alpha1.TagCluster, p.clusterName, got))
	}
	switch server.Status {
	case want:
		p.powering.settled(id)
		return nil
	case cloudscale.ServerRunning, cloudscale.ServerStopped:
		p.powering.settled(id)
	case "errored":
		return provider.NewRetryable(fmt.Errorf("cannot %s cloudscale server %s (%s): the API reports it errored", action, id, server.Name), powerSettleAfter)
	case "changing":
		if p.powering.toward(id) == want {
			return nil // the action this provider posted is under way
		}
		return provider.NewInProgress(fmt.Errorf("cloudscale server %s (%s) is %s; waiting for it to settle before it is %s", id, server.Name, server.Status, want), powerSettleAfter)
	}
	err = p.retry(ctx, func(ctx context.Context) error {
		return p.do(ctx, func(ctx context.Context) error {
			if action == "stop" {
				return p.api.Servers.Stop(ctx, id)
			}
			return p.api.Servers.Start(ctx, id)
		})
	})
	p.invalidateServers()
	if err != nil {
		return fmt.Errorf("asking cloudscale to %s server %s (%s): %w", action, id, server.Name, err)
	}
	p.powering.posted(id, want)
	logf.FromContext(ctx).Info("cloudscale accepted the server's "+action, "server", id, "name", server.Name)
	return nil
}

// powerActions remembers, by server UUID, the status each start or stop
// this provider posted leads to, while the server changes: a second call
// for the same status is then success (idempotent), while one for the
// other status, or any call after a restart, waits for the server to
// settle.
type powerActions struct {
	mu     sync.Mutex
	target map[string]string
}

func (a *powerActions) posted(id, want string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.target == nil {
		a.target = map[string]string{}
	}
	a.target[id] = want
}

func (a *powerActions) toward(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.target[id]
}

func (a *powerActions) settled(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.target, id)
}
