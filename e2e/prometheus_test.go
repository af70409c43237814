//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/deploy/monitoring"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// findPrometheus returns the prometheus binary (PATH, then
// /usr/bin/prometheus). When there is none the test is skipped, or fails
// with BULKHEAD_REQUIRE_PROMETHEUS=1 (as in `make test`).
func findPrometheus(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	if os.Getenv("BULKHEAD_REQUIRE_PROMETHEUS") == "1" {
		t.Fatal("prometheus not found (PATH, /usr/bin/prometheus) and BULKHEAD_REQUIRE_PROMETHEUS=1: apt-get install prometheus")
	}
	t.Skip("prometheus not found; apt-get install prometheus (BULKHEAD_REQUIRE_PROMETHEUS=1 makes this a failure)")
	return ""
}

// prometheus is a Prometheus server run by a test.
type prometheus struct {
	t    *testing.T
	base string // http://127.0.0.1:PORT
}

// startPrometheus runs Prometheus on 127.0.0.1, scraping every second the
// daemon's metrics at target (job="bulkhead") and Envoy's own stats at its
// admin address envoyAdmin (job="envoy", /stats/prometheus, as
// docker-compose does), with rulesPath loaded; it marks catalog critical
// with the relabelling the chart and docker-compose use. It is stopped on
// cleanup.
func startPrometheus(t *testing.T, ctx context.Context, bin, target, envoyAdmin, rulesPath string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 900ms}
rule_files: [%q]
scrape_configs:
- job_name: bulkhead
  static_configs: [{targets: [%q]}]
  metric_relabel_configs:
  - {source_labels: [dependency], regex: catalog, target_label: criticality, replacement: critical}
- job_name: envoy
  metrics_path: /stats/prometheus
  static_configs: [{targets: [%q]}]
`, rulesPath, target, envoyAdmin)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Prometheus cannot report a port it picked, so pick one; retry if
	// another process takes it first.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr := freePort(t)
		p := &prometheus{t: t, base: "http://" + addr}
		var out testkit.SyncBuffer
		cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprint("data", attempt)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = p.waitReady(ctx, exited); lastErr != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			lastErr = fmt.Errorf("%w\n%s", lastErr, tail(out.String(), 3000))
			continue
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
				t.Error("prometheus did not stop within 10s of SIGTERM")
			}
			if t.Failed() {
				t.Logf("prometheus log:\n%s", tail(out.String(), 4000))
			}
		})
		return p
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return nil
}

func (p *prometheus) waitReady(ctx context.Context, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if resp, err := http.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("prometheus exited: %v", err)
		case <-ctx.Done():
			return errors.New("prometheus not ready within 30s")
		case <-time.After(50 * time.Millisecond): // polling with a deadline
		}
	}
}

// apiResponse is the envelope of Prometheus' HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

func (p *prometheus) api(ctx context.Context, path string, params url.Values, data any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := p.base + path
	if params != nil {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r apiResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, tail(string(b), 300))
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// resultSize runs an instant query and returns the number of series (or 1
// for a scalar or string result).
func (p *prometheus) resultSize(ctx context.Context, expr string) (int, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	switch data.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(data.Result, &series); err != nil {
			return 0, err
		}
		return len(series), nil
	default:
		return 1, nil
	}
}

// waitFor polls until expr returns data.
func (p *prometheus) waitFor(ctx context.Context, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for {
		n, err := p.resultSize(ctx, expr)
		if err == nil && n > 0 {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			p.t.Fatalf("Prometheus: no data for %s within 60s (last error: %v)", expr, lastErr)
		case <-time.After(250 * time.Millisecond): // polling with a deadline
		}
	}
}

// metricNames returns every metric name Prometheus holds.
func (p *prometheus) metricNames(ctx context.Context) map[string]bool {
	p.t.Helper()
	var names []string
	if err := p.api(ctx, "/api/v1/label/__name__/values", nil, &names); err != nil {
		p.t.Fatal(err)
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// checkRulesHealthy: Prometheus loaded want rules and evaluated each one
// without error.
func (p *prometheus) checkRulesHealthy(ctx context.Context, want int) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.api(ctx, "/api/v1/rules", nil, &data); err != nil {
			p.t.Fatal(err)
		}
		var bad []string
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: health %q %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		if n == want && len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Errorf("Prometheus rules: %d loaded (want %d); unhealthy: %s", n, want, strings.Join(bad, "; "))
			return
		}
		select {
		case <-ctx.Done():
			p.t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond): // polling with a deadline
		}
	}
}

// freePort returns a 127.0.0.1 address whose port was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// monitoringQueries returns the dashboard's queries and the alert rules of
// the repository at root.
func monitoringQueries(t *testing.T, root string) ([]monitoring.Query, []monitoring.Rule) {
	t.Helper()
	qs, err := monitoring.DashboardQueries(readFile(t, root, dashboardFile), monitoring.DefaultVars())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := monitoring.Rules(readFile(t, root, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	return qs, rules
}
