package server

import (
	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// The daemon's metrics record what both Envoy-facing servers see. The
// servers declare what they record; metrics imports neither.
var (
	_ authz.Recorder     = (*metrics.Metrics)(nil)
	_ accesslog.Recorder = (*metrics.Metrics)(nil)
)

// The breakers are fed by the access log and asked by Check.
var (
	_ accesslog.Calls = (*breaker.Set)(nil)
	_ authz.Breakers  = (*breaker.Set)(nil)
	_ accesslog.Calls = (*sizing.Observer)(nil)
)
