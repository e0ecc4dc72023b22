// Package cloudscale makes claimscale's machines as servers on cloudscale.ch:
// one server per NodeClaim, named after the claim, tagged with the cluster,
// pool and claim in the request that creates it, and sized by a flavor the
// pool names. It implements provider.Provider over the cloudscale API v1
// (github.com/cloudscale-ch/cloudscale-go-sdk/v6).
//
// Credentials come from the NodeProvider's Secret: the API token under the
// key "token" (or "CLOUDSCALE_API_TOKEN"), and optionally the API's base URL
// under "apiURL" (or "CLOUDSCALE_API_URL"), which tests and end-to-end runs
// point at cloudscaletest.Server. Config.BaseURL overrides both.
//
// One provider serves every zone of spec.cloudscale.zones: a claim's server
// is made in the zone its requirements name. Error answers are classified
// by status code and body shape, and only an explicit table (built-in rows
// plus spec.cloudscale.errorPatterns) makes one an insufficient-capacity
// error; see apierrors.go and docs/cloudscale.md. With managedServerGroups
// the provider keeps anti-affinity server groups per pool and zone.
//
// API calls are bounded: the flavors are listed once an hour, the
// cluster's servers once per List refresh (callers share a short-lived
// snapshot), and at most ten creates and ten deletes run at once.
package cloudscale
