package server

import (
	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/replication"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// Both servers take either backend; the runner picks one (New).
var (
	_ admission.Ledger  = (*admission.Memory)(nil)
	_ admission.Ledger  = (*redisledger.Fallback)(nil)
	_ admission.Ledger  = (*redisledger.Capacity)(nil)
	_ authz.SilentNodes = (*permit.SilentNodes)(nil)
)

// The Redis ledger's recorders: its metrics, through the gate that moves
// the data plane off a replica cut off from Redis.
var (
	_ redisledger.Recorder         = (*metrics.LedgerMetrics)(nil)
	_ redisledger.Recorder         = (*replication.Gate)(nil)
	_ redisledger.FallbackRecorder = (*metrics.LedgerMetrics)(nil)
	_ metrics.CapacitySource       = (*redisledger.Capacity)(nil)
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
