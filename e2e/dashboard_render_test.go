//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDashboardRender renders the chart's Grafana dashboard with Perses in
// headless Chromium (e2e/dashboard-render) against a real Prometheus that
// scrapes the stack and load of TestObservabilityQueriesReturnData, and
// fails if a panel shows an error or no data. It writes a PNG to look at,
// and one per panel beside it (bulkhead-panels/).
// Not part of make test: `make dashboard-render` runs it, with
// BULKHEAD_DASHBOARD_RENDER=1 (skipped without), after `npm ci` in
// e2e/dashboard-render. BULKHEAD_DASHBOARD_PNG names the PNG (default
// tmp/dashboard-render/bulkhead.png); BULKHEAD_DASHBOARD_LOAD is how long the
// load runs before the render (default 60s; it goes on while the page loads);
// CHROMIUM_BIN the browser (default: chromium on PATH).
func TestDashboardRender(t *testing.T) {
	if os.Getenv("BULKHEAD_DASHBOARD_RENDER") != "1" {
		t.Skip("make dashboard-render runs this (BULKHEAD_DASHBOARD_RENDER=1)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: apt-get install nodejs npm")
	}
	chromium := os.Getenv("CHROMIUM_BIN")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("chromium not found: apt-get install chromium (or set CHROMIUM_BIN)")
		}
	}
	loadFor := 60 * time.Second
	if v := os.Getenv("BULKHEAD_DASHBOARD_LOAD"); v != "" {
		if loadFor, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BULKHEAD_DASHBOARD_LOAD: %v", err)
		}
	}
	promBin := findPrometheus(t)
	root := repoRoot(t)
	tool := filepath.Join(root, "e2e", "dashboard-render")
	if _, err := os.Stat(filepath.Join(tool, "node_modules")); err != nil {
		t.Fatalf("%s/node_modules missing: run npm ci there (make dashboard-render does)", tool)
	}
	out := os.Getenv("BULKHEAD_DASHBOARD_PNG")
	if out == "" {
		out = filepath.Join(root, "tmp", "dashboard-render", "bulkhead.png")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), loadFor+5*time.Minute)
	defer cancel()
	start := time.Now()
	prom := startObservedLoad(t, ctx, promBin, root)
	if rest := loadFor - time.Since(start); rest > 0 {
		t.Logf("every kind of series scraped after %s; load for %s more", time.Since(start).Round(time.Second), rest.Round(time.Second))
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(rest): // the load's length: what the charts show
		}
	}

	// The time range: from Prometheus' first scrape of the daemon to now, so
	// that the charts hold the whole run and nothing before it.
	end := time.Now()
	first := prom.firstScrape(ctx, t, `up{job="bulkhead"}`, end.Sub(start)+time.Minute)
	args := []string{filepath.Join(tool, "render.mjs"),
		"--prometheus", prom.base, "--out", out, "--chromium", chromium,
		"--dashboard", filepath.Join(root, dashboardFile),
		"--start", strconv.FormatInt(first.UnixMilli(), 10), "--end", strconv.FormatInt(end.UnixMilli(), 10),
		"--scrape-interval", "1s", "--timeout", "180", "--panels", strings.TrimSuffix(out, ".png") + "-panels"}
	for title, why := range emptyOnObservedStack() {
		args = append(args, "--allow-empty", title+": "+why)
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = tool
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // its per-panel report, as it goes
	if err := cmd.Run(); err != nil {
		t.Fatalf("render: %v (a panel without data or with an error, or the render failed: its output above)", err)
	}
	t.Logf("dashboard rendered: %s (%s of load)", out, end.Sub(start).Round(time.Second))
}

// firstScrape is the time of the first sample of series within the last
// window (a subquery at the 1 s scrape interval).
func (p *prometheus) firstScrape(ctx context.Context, t *testing.T, series string, window time.Duration) time.Time {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	expr := fmt.Sprintf("min(min_over_time(timestamp(%s)[%ds:1s]))", series, int(window.Seconds()))
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Result) != 1 {
		t.Fatalf("%s: %d series, want 1", expr, len(data.Result))
	}
	v, ok := data.Result[0].Value[1].(string)
	if !ok {
		t.Fatalf("%s: value %v", expr, data.Result[0].Value[1])
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return time.UnixMilli(int64(sec * 1000))
}
