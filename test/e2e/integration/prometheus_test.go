package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// Queries that may return nothing in this scenario, and why. Every other
// panel query must return data, and every selector of every alert
// expression must find series.
var mayBeEmpty = map[string]string{
	"overview/Provider errors":   "no provider call fails in a healthy scale-up and scale-down",
	"disruption/Unhealthy nodes": "the pool does not set repair; the repair gauges exist only for pools that do",
	"disruption/Repair paused":   "the pool does not set repair",
	"externalgrpc/Calls by method": "the controller runs in native mode: cluster-autoscaler makes no " +
		"externalgrpc calls, so neither do the three panels below",
	"externalgrpc/Call duration":            "native mode",
	"externalgrpc/Scale requests":           "native mode",
	"externalgrpc/Refusals":                 "native mode",
	"alert/ClaimscaleProviderFailing":       "it selects failed provider calls, and none fails here",
	"overview/Suspends and wakes":           "the pool does not let machines sleep, so none is suspended or woken",
	"overview/Wake to registered":           "no machine is woken",
	"overview/ProvisioningRequest outcomes": "the scenario makes no ProvisioningRequest",
	"overview/Time to Provisioned":          "no request is provisioned",
}

// servedWithoutSeries are claimscale's collectors that are served but may
// have no series in this scenario (a vector without label values is not
// exposed at all): a query may name their metrics although the scrape
// does not show them.
var servedWithoutSeries = []prometheus.Collector{
	metrics.GRPCServer, metrics.ExternalGRPCScaleRequests,
	metrics.RepairUnhealthyNodes, metrics.RepairPaused, metrics.NodesRepaired,
	metrics.NodeClaimSuspends, metrics.NodeClaimWakes, metrics.WakeToRegisteredSeconds,
	metrics.ProvisioningRequestOutcomes, metrics.ProvisioningRequestSeconds,
}

// A real Prometheus scrapes the controller's secure metrics endpoint, as
// the chart's ServiceMonitor does (HTTPS, the token of a ServiceAccount
// bound to the chart's metrics-reader role), while a pool scales up and
// back down, with the chart's alert rules loaded. Then every panel query
// of every generated dashboard and every alert expression is evaluated
// through Prometheus' HTTP API: each parses, names only metrics the
// controller serves, and returns data unless listed in mayBeEmpty. The
// rules evaluate without error and none would fire on the idle pool.
func TestDashboardsAndAlertsQueryWhatTheControllerServes(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddress := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: metricsAddress})
	s := harness.NewScenario(t, "prometheus-scrape")
	defer s.Cleanup()
	token := metricsReaderToken(s.Ctx, t, "prometheus-e2e")
	prom := startPrometheus(t, root, metricsAddress, token)
	s.G.Eventually(func(g Gomega) {
		g.Expect(prom.instant(g, `up{job="claimscale"} == 1`)).To(HaveLen(1), "the controller's endpoint scraped")
	}).Should(Succeed())

	started := time.Now()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	// Two pods of 1.5 cpu to each 4-cpu node: three nodes.
	web := s.CreateDeployment("web", 6, "1500m", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(6))
	s.Scale(web, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "empty nodes consolidated")
	// Prometheus has scraped the end: the pool has no claim left in any
	// phase, and the six pods' binding was timed.
	pool := fmt.Sprintf("nodepool=%q", s.Name)
	s.G.Eventually(func(g Gomega) {
		g.Expect(prom.instant(g, `sum(claimscale_nodeclaims{`+pool+`}) == 0`)).To(HaveLen(1))
		g.Expect(prom.instant(g, `claimscale_provisioning_pod_bound_duration_seconds_count{`+pool+`} == 6`)).To(HaveLen(1),
			"each pod provisioned for timed once")
	}).Should(Succeed())
	mean := prom.instant(s.G, `claimscale_provisioning_pod_bound_duration_seconds_sum{`+pool+`} / claimscale_provisioning_pod_bound_duration_seconds_count{`+pool+`}`)
	s.G.Expect(mean).To(HaveLen(1))
	s.G.Expect(mean[0].value).To(BeNumerically(">=", 1), "pods waited at least the simulated machine's boot delay of 1s")
	t.Logf("pods of pool %s waited %.1fs on average from creation to binding; scenario took %s", s.Name, mean[0].value, time.Since(started).Round(time.Second))
	end := time.Now()
	for _, q := range []string{
		`claimscale_provisioning_pod_bound_duration_seconds_bucket{` + pool + `, le=~"(1|2|5|10)[.]0|[+]Inf"}`,
		`claimscale_disruption_blocked_nodes{` + pool + `}`,
	} {
		samples := prom.instant(s.G, q)
		sort.Slice(samples, func(i, j int) bool { return samples[i].value < samples[j].value })
		var lines []string
		for _, sample := range samples {
			label := "reason=" + strconv.Quote(sample.labels["reason"])
			if le, ok := sample.labels["le"]; ok {
				label = "le=" + strconv.Quote(le)
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %v", sample.labels["__name__"], label, sample.value))
		}
		t.Logf("%s:\n%s", q, strings.Join(lines, "\n"))
	}

	served := prom.metricNames(s.G)
	for _, collector := range servedWithoutSeries {
		for name := range describedNames(collector) {
			served[name] = true
		}
	}

	checked := map[string]bool{}
	panels, emptyAllowed := 0, 0
	for _, q := range dashboardQueries(t, root) {
		key := q.dashboard + "/" + q.panel
		checked[key] = true
		names := prom.selectorNames(s.G, q.expr)
		for _, name := range names {
			s.G.Expect(isServed(served, name)).To(BeTrue(), "%s: %s names %s, which the controller does not serve", key, q.expr, name)
		}
		var values []float64
		if q.instant {
			for _, sample := range prom.instant(s.G, q.expr) {
				values = append(values, sample.value)
			}
		} else {
			values = prom.rangeValues(s.G, q.expr, started, end)
		}
		if _, ok := mayBeEmpty[key]; ok {
			emptyAllowed++
			continue
		}
		panels++
		s.G.Expect(slices.ContainsFunc(values, func(v float64) bool { return !math.IsNaN(v) })).To(BeTrue(),
			"%s: %s returned no data during a scale-up and scale-down", key, q.expr)
	}

	alerts := alertRules(t, root)
	for _, rule := range alerts {
		key := "alert/" + rule.Alert
		checked[key] = true
		for _, selector := range prom.selectors(s.G, rule.Expr) {
			s.G.Expect(isServed(served, selector.name)).To(BeTrue(), "%s names %s, which the controller does not serve", key, selector.name)
			if _, ok := mayBeEmpty[key]; ok {
				continue
			}
			s.G.Expect(prom.rangeValues(s.G, "count("+selector.promql()+")", started, end)).NotTo(BeEmpty(),
				"%s: selector %s found no series", key, selector.promql())
		}
		firing := prom.instant(s.G, rule.Expr)
		if rule.Alert == "ClaimscalePodsPendingWithoutClaim" {
			// The gauge is cluster-wide: pods other tests of the package
			// left pending count too, and only those may hold it up.
			if elsewhere := pendingPodsOutside(s); elsewhere > 0 {
				for _, sample := range firing {
					s.G.Expect(sample.value).To(BeNumerically("<=", elsewhere), "%s counts more pending pods than other tests left (%d)", key, elsewhere)
				}
				continue
			}
		}
		s.G.Expect(firing).To(BeEmpty(), "%s would fire on an idle pool", key)
	}
	// The one alert condition a scale-up makes true for a while; its
	// `for` keeps it from firing.
	s.G.Expect(prom.rangeValues(s.G, alertExpr(alerts, "ClaimscaleClaimsStuckLaunching"), started, end)).NotTo(BeEmpty(),
		"claims launching during the scale-up")
	for key := range mayBeEmpty {
		s.G.Expect(checked).To(HaveKey(key), "mayBeEmpty names a query that no longer exists")
	}

	t.Logf("%d panel queries returned data, %d may be empty here; %d alert expressions checked", panels, emptyAllowed, len(alerts))

	// Prometheus itself evaluated the chart's rules all along.
	s.G.Eventually(func(g Gomega) {
		health := prom.ruleHealth(g)
		g.Expect(health).To(HaveLen(len(alerts)), "every rule of alerts.yaml loaded")
		for name, h := range health {
			g.Expect(h).To(Equal("ok"), "rule %s", name)
		}
	}).Should(Succeed())
}

// pendingPodsOutside counts the unbound pods of other tests, which the
// controller's cluster-wide gauges count too.
func pendingPodsOutside(s *harness.Scenario) int {
	var pods corev1.PodList
	s.G.Expect(env.Client.List(s.Ctx, &pods)).To(Succeed())
	pending := 0
	for _, pod := range pods.Items {
		if pod.Namespace != s.Namespace && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			pending++
		}
	}
	return pending
}

// metricsReaderToken binds a new ServiceAccount to the chart's
// metrics-reader ClusterRole (rendered from the chart, under a name of
// this test's) and returns a token for it.
func metricsReaderToken(ctx context.Context, t *testing.T, account string) string {
	t.Helper()
	var role *rbacv1.ClusterRole
	for _, object := range harness.HelmTemplate(t, "--set", "clusterName="+harness.ClusterName) {
		if object.GetKind() != "ClusterRole" || !strings.HasSuffix(object.GetName(), "-metrics-reader") {
			continue
		}
		role = &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object.Object, role); err != nil {
			t.Fatal(err)
		}
	}
	if role == nil {
		t.Fatal("the chart renders no metrics-reader ClusterRole")
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: account + "-metrics-reader"}
	harness.GrantClusterRole(ctx, t, role, account)
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return harness.ServiceAccountToken(ctx, t, clientset, account)
}

// prometheusServer is a Prometheus process of the test's, and its HTTP
// API.
type prometheusServer struct {
	base   string
	client *http.Client
}

// startPrometheus runs bin/prometheus on a loopback port chosen now, with
// a data directory of the test's, scraping the controller every second
// with the token and evaluating the chart's alert rules as often. It is
// stopped when the test ends.
func startPrometheus(t *testing.T, root, target, token string) *prometheusServer {
	t.Helper()
	binary, err := testenv.Tool("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	config := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(root, "charts", "claimscale", "files", "alerts.yaml")},
		"scrape_configs": []any{map[string]any{
			"job_name": "claimscale",
			"scheme":   "https",
			// The controller serves a self-signed certificate, as the
			// chart's ServiceMonitor assumes.
			"tls_config":     map[string]any{"insecure_skip_verify": true},
			"authorization":  map[string]any{"credentials_file": tokenFile},
			"static_configs": []any{map[string]any{"targets": []string{target}}},
		}},
	}
	configYAML, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(configFile, configYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	address := harness.FreeLocalAddress(t)
	var output harness.LockedBuffer
	cmd := exec.Command(binary,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+address,
		// Counters and histograms start from zero at the time the
		// controller made them, so a rate over a series born during the
		// scenario counts its first increments.
		"--enable-feature=created-timestamp-zero-ingestion",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", output.String())
		}
	})
	prom := &prometheusServer{base: "http://" + address, client: &http.Client{Timeout: 30 * time.Second}}
	g := NewWithT(t)
	g.Eventually(func() (int, error) {
		select {
		case err := <-exited:
			exited <- err
			return 0, StopTrying(fmt.Sprintf("prometheus exited: %v\n%s", err, output.String()))
		default:
		}
		response, err := prom.client.Get(prom.base + "/-/ready")
		if err != nil {
			return 0, err
		}
		defer response.Body.Close()
		return response.StatusCode, nil
	}, 2*time.Minute, 250*time.Millisecond).Should(Equal(http.StatusOK), "prometheus ready")
	return prom
}

// api calls an endpoint of Prometheus' HTTP API and decodes its data.
func (p *prometheusServer) api(g Gomega, path string, params url.Values, data any) {
	response, err := p.client.Get(p.base + "/api/v1/" + path + "?" + params.Encode())
	g.Expect(err).NotTo(HaveOccurred())
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	g.Expect(err).NotTo(HaveOccurred())
	var envelope struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	g.Expect(json.Unmarshal(body, &envelope)).To(Succeed(), "%s: %s", path, body)
	g.Expect(envelope.Status).To(Equal("success"), "%s %v: %s", path, params, envelope.Error)
	g.Expect(json.Unmarshal(envelope.Data, data)).To(Succeed(), "%s: %s", path, envelope.Data)
}

type sample struct {
	labels map[string]string
	value  float64
}

// instant evaluates expr now.
func (p *prometheusServer) instant(g Gomega, expr string) []sample {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	p.api(g, "query", url.Values{"query": {expr}}, &data)
	g.Expect(data.ResultType).To(Equal("vector"), expr)
	var out []sample
	for _, r := range data.Result {
		out = append(out, sample{labels: r.Metric, value: parseSampleValue(g, r.Value[1])})
	}
	return out
}

// rangeValues evaluates expr over [start, end] every second, as a graph
// panel does, and returns every value of every series.
func (p *prometheusServer) rangeValues(g Gomega, expr string, start, end time.Time) []float64 {
	var data struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	p.api(g, "query_range", url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix()+1, 10)}, "step": {"1"},
	}, &data)
	var out []float64
	for _, series := range data.Result {
		for _, v := range series.Values {
			out = append(out, parseSampleValue(g, v[1]))
		}
	}
	return out
}

func parseSampleValue(g Gomega, v any) float64 {
	text, ok := v.(string)
	g.Expect(ok).To(BeTrue(), "sample value %v", v)
	f, err := strconv.ParseFloat(text, 64)
	g.Expect(err).NotTo(HaveOccurred())
	return f
}

// metricNames are the names of every series Prometheus has.
func (p *prometheusServer) metricNames(g Gomega) map[string]bool {
	var names []string
	p.api(g, "label/__name__/values", url.Values{}, &names)
	out := map[string]bool{}
	for _, name := range names {
		out[name] = true
	}
	return out
}

// selector is one vector or matrix selector of a parsed query.
type selector struct {
	name     string
	matchers []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
		Type  string `json:"type"`
	}
}

// promql writes the selector back as PromQL.
func (s selector) promql() string {
	var parts []string
	for _, m := range s.matchers {
		parts = append(parts, m.Name+m.Type+strconv.Quote(m.Value))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}

// selectors parses expr with Prometheus' own parser (the parse_query
// endpoint) and returns its selectors: a query that does not parse fails.
func (p *prometheusServer) selectors(g Gomega, expr string) []selector {
	var ast any
	p.api(g, "parse_query", url.Values{"query": {expr}}, &ast)
	var found []selector
	var walk func(node any)
	walk = func(node any) {
		switch n := node.(type) {
		case map[string]any:
			if kind, _ := n["type"].(string); kind == "vectorSelector" || kind == "matrixSelector" {
				var sel selector
				sel.name, _ = n["name"].(string)
				raw, err := json.Marshal(n["matchers"])
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(json.Unmarshal(raw, &sel.matchers)).To(Succeed())
				found = append(found, sel)
				return
			}
			for _, child := range n {
				walk(child)
			}
		case []any:
			for _, child := range n {
				walk(child)
			}
		}
	}
	walk(ast)
	g.Expect(found).NotTo(BeEmpty(), "%s selects no metric", expr)
	for _, sel := range found {
		g.Expect(sel.name).NotTo(BeEmpty(), "%s: a selector without a metric name", expr)
	}
	return found
}

func (p *prometheusServer) selectorNames(g Gomega, expr string) []string {
	var names []string
	for _, sel := range p.selectors(g, expr) {
		names = append(names, sel.name)
	}
	return names
}

// ruleHealth is each loaded alerting rule's health.
func (p *prometheusServer) ruleHealth(g Gomega) map[string]string {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name   string `json:"name"`
				Health string `json:"health"`
				Error  string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	response, err := p.client.Get(p.base + "/api/v1/rules?type=alert")
	g.Expect(err).NotTo(HaveOccurred())
	defer response.Body.Close()
	var envelope struct {
		Data json.RawMessage `json:"data"`
	}
	g.Expect(json.NewDecoder(response.Body).Decode(&envelope)).To(Succeed())
	g.Expect(json.Unmarshal(envelope.Data, &data)).To(Succeed())
	health := map[string]string{}
	for _, group := range data.Groups {
		for _, rule := range group.Rules {
			health[rule.Name] = rule.Health + rule.Error
		}
	}
	return health
}

// isServed says whether a metric name is served: a series of it was
// scraped, or one of the collectors served without series describes it
// (a histogram's _bucket, _sum and _count by the histogram's name).
func isServed(served map[string]bool, name string) bool {
	if served[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && served[base] {
			return true
		}
	}
	return false
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// describedNames are the metric names a collector describes.
func describedNames(collector prometheus.Collector) map[string]bool {
	descs := make(chan *prometheus.Desc)
	go func() { collector.Describe(descs); close(descs) }()
	names := map[string]bool{}
	for desc := range descs {
		if m := descName.FindStringSubmatch(desc.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// dashboardQuery is one target of a generated dashboard's panel.
type dashboardQuery struct {
	dashboard, panel, expr string
	// instant: a stat panel's query, evaluated now, not over time.
	instant bool
}

// dashboardVariables are the Grafana variables a query may use, with the
// value Grafana would give them on a 1-second scrape.
var dashboardVariables = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1s", "$__range", "1h")

// dashboardQueries reads every panel target of the chart's generated
// dashboards.
func dashboardQueries(t *testing.T, root string) []dashboardQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "charts", "claimscale", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards (%v)", err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr    string `json:"expr"`
			Instant bool   `json:"instant"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var queries []dashboardQuery
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var board struct {
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(raw, &board); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		pending := board.Panels
		for len(pending) > 0 {
			var p panel
			if err := json.Unmarshal(pending[0], &p); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			pending = append(pending[1:], p.Panels...) // collapsed rows hold theirs
			for _, target := range p.Targets {
				expr := dashboardVariables.Replace(target.Expr)
				if strings.Contains(expr, "$") {
					t.Fatalf("%s/%s: a variable this test does not know in %s", name, p.Title, target.Expr)
				}
				queries = append(queries, dashboardQuery{dashboard: name, panel: p.Title, expr: expr, instant: target.Instant})
			}
		}
	}
	return queries
}

type alertRule struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

// alertRules reads the chart's alert rules, the file the PrometheusRule
// holds.
func alertRules(t *testing.T, root string) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "charts", "claimscale", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var rules []alertRule
	for _, group := range file.Groups {
		rules = append(rules, group.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml holds no rules")
	}
	return rules
}

func alertExpr(rules []alertRule, name string) string {
	for _, rule := range rules {
		if rule.Alert == name {
			return rule.Expr
		}
	}
	panic("no alert " + name)
}

// TestAlertRules runs Prometheus' own rule unit tests
// (testdata/alerts_test.yaml) on the chart's alert rules with the pinned
// promtool. It lives beside the Prometheus scenario because both wait
// for the same build (hack/tools.sh builds prometheus and promtool
// together, beside the tests in `make test`).
func TestAlertRules(t *testing.T) {
	promtool, err := testenv.Tool("promtool")
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "rules", "../../../charts/claimscale/files/alerts.yaml")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	test := exec.Command(promtool, "test", "rules", "testdata/alerts_test.yaml")
	if out, err := test.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
