// Package bootstrap makes a claim's machine able to join by itself: a
// bootstrap token of its own (a kube-system Secret that expires at the
// pool's registration timeout and is deleted once the Node registers) and
// the pool's user-data template rendered with it, the API endpoint, the CA
// hashes and exactly the labels, taints and kubelet settings the template
// node was simulated with. Providers only deliver the rendered bytes.
//
// The rendered user data and the token's secret half are credentials: they
// never go into logs, events, conditions, errors or metrics. The claim's
// status carries only the token's id and expiry.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Bootstrapper prepares claims' user data and revokes their tokens.
type Bootstrapper struct {
	Tokens  *Tokens
	Cluster *ClusterSource
	// Reader reads the pools' template and shared-token objects, uncached,
	// in Namespace (the controller's).
	Reader    client.Reader
	Namespace string
}

// Prepared is a claim's user data and the token it carries (nil when the
// pool's token is shared).
type Prepared struct {
	UserData []byte
	Token    *Token
}

// Prepare renders the claim's user data, making (or reusing) its token,
// which expires at expiresAt. It returns nil when the pool has no bootstrap
// section.
func (b *Bootstrapper) Prepare(ctx context.Context, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, expiresAt time.Time) (*Prepared, error) {
	spec := pool.Spec.Template.Bootstrap
	if spec == nil {
		return nil, nil
	}
	name := "built-in " + string(spec.Method)
	text, err := DefaultTemplate(spec.Method)
	if spec.UserDataTemplateRef != nil {
		ref := spec.UserDataTemplateRef
		name = fmt.Sprintf("%s %s/%s key %s", ref.Kind, b.Namespace, ref.Name, ref.Key)
		var raw []byte
		raw, err = b.readKey(ctx, *ref)
		text = string(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("user-data template of pool %s: %w", pool.Name, err)
	}
	cluster, err := b.Cluster.Lookup(ctx)
	if err != nil {
		return nil, err
	}
	cluster = cluster.WithEndpoint(spec.APIServerEndpoint)
	if cluster.Endpoint == "" {
		return nil, errors.New("no API server endpoint to join: set the pool's bootstrap.apiServerEndpoint or the controller's --bootstrap-api-server-endpoint, or publish kube-public/cluster-info")
	}
	in := Input{Pool: pool, Claim: claim, Cluster: cluster}
	prepared := &Prepared{}
	if spec.SharedTokenRef != nil {
		shared, err := b.readKey(ctx, *spec.SharedTokenRef)
		if err != nil {
			return nil, fmt.Errorf("shared token of pool %s: %w", pool.Name, err)
		}
		in.Shared = string(shared)
	} else {
		token, err := b.Tokens.Ensure(ctx, claim, expiresAt, groupsOf(spec.Method))
		if err != nil {
			return nil, err
		}
		in.Token, prepared.Token = token, &token
	}
	data, err := NewData(in)
	if err != nil {
		return nil, err
	}
	if prepared.UserData, err = Render(name, text, data); err != nil {
		return nil, err
	}
	return prepared, nil
}

// Revoke deletes the claim's token.
func (b *Bootstrapper) Revoke(ctx context.Context, claimName string) error {
	return b.Tokens.Revoke(ctx, claimName)
}

// groupsOf are the extra groups a method's tokens carry.
func groupsOf(method v1alpha1.JoinMethod) []string {
	if method == v1alpha1.JoinK3s {
		return []string{GroupNodeToken, GroupK3sNodeToken}
	}
	return []string{GroupNodeToken}
}

// readKey reads one key of a ConfigMap or Secret in the controller's
// namespace. Errors name the object, never its content.
func (b *Bootstrapper) readKey(ctx context.Context, ref v1alpha1.KeyReference) ([]byte, error) {
	key := client.ObjectKey{Namespace: b.Namespace, Name: ref.Name}
	switch ref.Kind {
	case "ConfigMap":
		var cm corev1.ConfigMap
		if err := b.Reader.Get(ctx, key, &cm); err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return []byte(v), nil
		}
		if v, ok := cm.BinaryData[ref.Key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("ConfigMap %s has no key %q", key, ref.Key)
	case "Secret":
		var secret corev1.Secret
		if err := b.Reader.Get(ctx, key, &secret); err != nil {
			return nil, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		if v, ok := secret.Data[ref.Key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("Secret %s has no key %q", key, ref.Key)
	}
	return nil, fmt.Errorf("cannot read a %q: only ConfigMap and Secret", ref.Kind)
}
