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
// API calls are bounded: the zone's flavors are listed once an hour, the
// cluster's servers once per List refresh (callers share a short-lived
// snapshot), and at most ten creates and ten deletes run at once.
package cloudscale
