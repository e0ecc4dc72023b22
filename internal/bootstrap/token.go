package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// TokenNamespace is where the API server's bootstrap token authenticator
// looks for token Secrets.
const TokenNamespace = metav1.NamespaceSystem

// LabelBootstrapToken is v1alpha1.LabelBootstrapToken, where every
// user-visible name is listed.
const LabelBootstrapToken = v1alpha1.LabelBootstrapToken

// GroupNodeToken is the extra group of every per-claim token. The bootstrap
// token authenticator always adds system:bootstrappers besides
// (k8s.io/cluster-bootstrap/util/secrets.GetGroups), so a token cannot leave
// that group; what matters is that nothing binds kube-controller-manager's
// auto-approval (ClusterRole
// system:certificates.k8s.io:certificatesigningrequests:nodeclient) to this
// group or to system:bootstrappers: claimscale approves these tokens'
// kubelet client certificate requests itself, each for its one node only
// (internal/controllers/csrapproval). The install binds
// system:node-bootstrapper to it, so a token may submit a request at all,
// and, on kubeadm clusters, the Roles kubeadm join reads with.
const GroupNodeToken = "system:bootstrappers:claimscale:default-node-token"

// Groups of the joins' own tokens. kubeadm binds auto-approval to its
// group (kubeadm init phase bootstrap-token), so claimscale's kubeadm tokens
// never carry it. k3s signs its agents' kubelet certificates in its own
// supervisor, not through a certificate request, and `k3s token create`
// puts its tokens in its group (docs.k3s.io/cli/token): k3s tokens carry it
// besides GroupNodeToken.
const (
	GroupKubeadmNodeToken = "system:bootstrappers:kubeadm:default-node-token"
	GroupK3sNodeToken     = "system:bootstrappers:k3s:default-node-token"
)

// Token is a bootstrap token. Its String is the credential: never log it.
type Token struct {
	ID        string
	Secret    string
	ExpiresAt time.Time
}

// String returns the token as a machine presents it: <id>.<secret>.
func (t Token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// Tokens makes, finds and deletes claimscale's per-claim bootstrap token
// Secrets.
type Tokens struct {
	// Kube writes Secrets; Reader reads them uncached, so the controller
	// keeps no informer (and no copy) of kube-system's Secrets.
	Kube   client.Client
	Reader client.Reader
	Clock  clock.PassiveClock
}

// Ensure returns the claim's token, making its Secret when the claim has
// none yet, so a retried or restarted launch reuses the token it already
// handed out. The Secret expires at expiresAt, carries the groups, and is
// owned by the claim, so Kubernetes' garbage collector removes it with the
// claim even if claimscale does not.
func (t *Tokens) Ensure(ctx context.Context, claim *v1alpha1.NodeClaim, expiresAt time.Time, groups []string) (Token, error) {
	existing, err := t.ofClaim(ctx, claim.Name)
	if err != nil {
		return Token{}, err
	}
	for i := range existing {
		secret := &existing[i]
		if secret.Labels[v1alpha1.LabelNodeClaim] != claim.Name || string(secret.OwnerReferences[0].UID) != string(claim.UID) {
			continue
		}
		token, ok := tokenOf(secret)
		if ok && t.Clock.Now().Before(token.ExpiresAt) {
			return token, nil
		}
	}
	raw, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, fmt.Errorf("generating a bootstrap token for claim %s: %w", claim.Name, err)
	}
	parts := bootstraputil.BootstrapTokenRegexp.FindStringSubmatch(raw)
	token := Token{ID: parts[1], Secret: parts[2], ExpiresAt: expiresAt.UTC().Truncate(time.Second)}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      bootstraputil.BootstrapTokenSecretName(token.ID),
			Namespace: TokenNamespace,
			Labels:    map[string]string{LabelBootstrapToken: "true", v1alpha1.LabelNodeClaim: claim.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeClaim", Name: claim.Name, UID: claim.UID,
			}},
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               token.ID,
			bootstrapapi.BootstrapTokenSecretKey:           token.Secret,
			bootstrapapi.BootstrapTokenExpirationKey:       token.ExpiresAt.Format(time.RFC3339),
			bootstrapapi.BootstrapTokenDescriptionKey:      "claimscale: joins the node of NodeClaim " + claim.Name,
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      strings.Join(groups, ","),
		},
	}
	if err := t.Kube.Create(ctx, secret); err != nil {
		// The id is public; the error never names the secret half.
		return Token{}, fmt.Errorf("creating bootstrap token %s for claim %s: %w", token.ID, claim.Name, err)
	}
	return token, nil
}

// Revoke deletes every claimscale token Secret of the claim.
func (t *Tokens) Revoke(ctx context.Context, claimName string) error {
	secrets, err := t.ofClaim(ctx, claimName)
	if err != nil {
		return err
	}
	for i := range secrets {
		if err := t.delete(ctx, &secrets[i]); err != nil {
			return err
		}
	}
	return nil
}

// Collect deletes claimscale's token Secrets that have expired or whose
// claim is not in live (by name), and returns how many it deleted. Secrets
// without claimscale's label are never touched.
func (t *Tokens) Collect(ctx context.Context, live func(claimName string) bool) (int, error) {
	var list corev1.SecretList
	if err := t.Reader.List(ctx, &list, client.InNamespace(TokenNamespace), client.MatchingLabels{LabelBootstrapToken: "true"}); err != nil {
		return 0, fmt.Errorf("listing claimscale bootstrap tokens in %s: %w", TokenNamespace, err)
	}
	deleted := 0
	for i := range list.Items {
		secret := &list.Items[i]
		token, ok := tokenOf(secret)
		expired := !ok || !t.Clock.Now().Before(token.ExpiresAt)
		if !expired && live(secret.Labels[v1alpha1.LabelNodeClaim]) {
			continue
		}
		if err := t.delete(ctx, secret); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

func (t *Tokens) ofClaim(ctx context.Context, claimName string) ([]corev1.Secret, error) {
	var list corev1.SecretList
	err := t.Reader.List(ctx, &list, client.InNamespace(TokenNamespace),
		client.MatchingLabels{LabelBootstrapToken: "true", v1alpha1.LabelNodeClaim: claimName})
	if err != nil {
		return nil, fmt.Errorf("listing bootstrap tokens of claim %s: %w", claimName, err)
	}
	owned := list.Items[:0]
	for _, secret := range list.Items {
		if secret.Type == bootstrapapi.SecretTypeBootstrapToken && len(secret.OwnerReferences) > 0 {
			owned = append(owned, secret)
		}
	}
	return owned, nil
}

func (t *Tokens) delete(ctx context.Context, secret *corev1.Secret) error {
	err := t.Kube.Delete(ctx, secret, client.Preconditions{UID: &secret.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting bootstrap token %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// tokenOf reads a token Secret; ok is false when it is malformed.
func tokenOf(secret *corev1.Secret) (Token, bool) {
	id := string(secret.Data[bootstrapapi.BootstrapTokenIDKey])
	value := string(secret.Data[bootstrapapi.BootstrapTokenSecretKey])
	expiresAt, err := time.Parse(time.RFC3339, string(secret.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	if err != nil || !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(id, value)) {
		return Token{}, false
	}
	return Token{ID: id, Secret: value, ExpiresAt: expiresAt}, true
}

// Issued is what a claimscale token Secret says about the token's owner,
// without the secret half.
type Issued struct {
	ID        string
	ClaimName string
	ClaimUID  types.UID
	ExpiresAt time.Time
	// Deleting: the Secret is being deleted (the API server no longer
	// authenticates it).
	Deleting bool
}

// Lookup returns claimscale's token of the id, or nil when kube-system has
// no such token Secret or it is not claimscale's (no label, no claim owner,
// malformed): a token claimscale did not issue is not its business.
func (t *Tokens) Lookup(ctx context.Context, id string) (*Issued, error) {
	if !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(id, "0000000000000000")) {
		return nil, nil
	}
	var secret corev1.Secret
	err := t.Reader.Get(ctx, client.ObjectKey{Namespace: TokenNamespace, Name: bootstraputil.BootstrapTokenSecretName(id)}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading bootstrap token %s: %w", id, err)
	}
	claimName := secret.Labels[v1alpha1.LabelNodeClaim]
	if secret.Type != bootstrapapi.SecretTypeBootstrapToken || secret.Labels[LabelBootstrapToken] != "true" || claimName == "" {
		return nil, nil
	}
	var owner *metav1.OwnerReference
	for i, ref := range secret.OwnerReferences {
		if ref.Kind == "NodeClaim" && ref.APIVersion == v1alpha1.GroupVersion.String() && ref.Name == claimName {
			owner = &secret.OwnerReferences[i]
		}
	}
	token, ok := tokenOf(&secret)
	if owner == nil || !ok || token.ID != id {
		return nil, nil
	}
	return &Issued{
		ID: id, ClaimName: claimName, ClaimUID: owner.UID, ExpiresAt: token.ExpiresAt,
		Deleting: secret.DeletionTimestamp != nil,
	}, nil
}
