package decisions

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Path the handler is served under on the controller's metrics server.
// Callers need `get` on the non-resource URLs /decisions and /decisions/*.
const Path = "/decisions/"

// Handler serves the records read-only, as JSON:
//
//	GET /decisions/pods/NAMESPACE/NAME  the pod's latest record
//	GET /decisions/nodes/NAME           the node's (or claim's) latest record
//	GET /decisions/pods, /decisions/nodes  every record of the kind
//	GET /decisions/pools                what each pool could make, for simulations
//
// Authentication and authorization are the server's (the metrics server's
// filter: the caller's token, a SubjectAccessReview on the path).
func Handler(store *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		parts := strings.Split(strings.Trim(strings.TrimPrefix(req.URL.Path, Path), "/"), "/")
		switch {
		case len(parts) == 1 && parts[0] == "pods":
			writeJSON(w, store.Pods())
		case len(parts) == 1 && parts[0] == "nodes":
			writeJSON(w, store.Nodes())
		case len(parts) == 1 && parts[0] == "pools":
			writeJSON(w, store.PoolOffers())
		case len(parts) == 3 && parts[0] == "pods":
			if record, ok := store.Pod(parts[1], parts[2]); ok {
				writeJSON(w, record)
				return
			}
			http.Error(w, "no decision recorded for pod "+parts[1]+"/"+parts[2], http.StatusNotFound)
		case len(parts) == 2 && parts[0] == "nodes":
			if record, ok := store.Node(parts[1]); ok {
				writeJSON(w, record)
				return
			}
			http.Error(w, "no decision recorded for node "+parts[1], http.StatusNotFound)
		default:
			http.Error(w, "unknown path; use /decisions/pods/NAMESPACE/NAME or /decisions/nodes/NAME", http.StatusNotFound)
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
