package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// readyPollInterval is how often traffic mode asks whether Envoy and the
// daemon answer.
const readyPollInterval = 250 * time.Millisecond

// runTraffic is traffic mode: it waits until the daemon admits and every
// demo route answers 200 through Envoy, then drives the demo's traffic and
// table like the local demo (see drive), slowing catalog through its control
// API.
func (d *demo) runTraffic(ctx, abort context.Context) error {
	client := &http.Client{Timeout: controlTimeout}
	defer client.CloseIdleConnections()
	for name, base := range d.opts.control {
		d.upstreams[name] = newRemoteUpstream(base, client)
	}
	if _, ok := d.upstreams["catalog"]; !ok {
		d.say("No --control for catalog: it will not be slowed down.")
	}
	d.envoyURL, d.metricsURL = d.opts.envoyURL, d.opts.metricsURL
	if err := d.waitMesh(ctx); err != nil {
		return err
	}
	d.flows = demoFlows()
	if err := newLoads(d.flows, d.envoyURL, d.opts.duration); err != nil {
		return err
	}
	return d.drive(ctx, abort)
}

// waitMesh polls until the daemon's /metrics says it admits (its recovery
// window is over) and each demo route answers 200 through Envoy, for up to
// --wait.
func (d *demo) waitMesh(ctx context.Context) error {
	d.say("Waiting for the bulkhead daemon (%s) and Envoy (%s)...", d.metricsURL, d.envoyURL)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d.opts.waitReady)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	tick := time.NewTicker(readyPollInterval)
	defer tick.Stop()
	for {
		missing := d.notReady(ctx, client)
		if missing == "" {
			d.say("Ready after %s.", fmtSeconds(time.Since(begin)))
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not ready after %v: %s", d.opts.waitReady, missing)
			}
			return errors.New("interrupted while waiting for Envoy and the daemon")
		case <-tick.C:
		}
	}
}

// notReady names what does not answer yet, or returns "".
func (d *demo) notReady(ctx context.Context, client *http.Client) string {
	if !admitting(ctx, client, d.metricsURL) {
		return "the bulkhead daemon's " + d.metricsURL + " (bulkhead_admissions_paused 0)"
	}
	for _, r := range demoRoutes {
		if !ready(ctx, client, d.envoyURL+r.path) {
			return "GET " + d.envoyURL + r.path + " (200)"
		}
	}
	return ""
}
