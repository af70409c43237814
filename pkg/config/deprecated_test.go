package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// The settings local_share left behind are read as what replaced them, each
// with a warning that names the setting and its source as a problem would,
// and says what to write instead; a configuration without them has none.
func TestDeprecatedLedgerSettings(t *testing.T) {
	const redis = "ledger: {backend: redis, redis: {address: 127.0.0.1:6379}}\n"
	const localShare = `ledger.on_unavailable: is deprecated and read as ledger.redis.capacity_leases: true with ` +
		`ledger.on_unavailable: fail_closed (a replica cut off from Redis admits within the capacity lease it holds, ` +
		`until the lease's end, and rejects beyond it); write on_unavailable: fail_closed (or fail_open) instead (got "local_share")`
	const shareFor = `ledger.local_share_for: has no effect since local_share became capacity leases (a replica cut off ` +
		`from Redis admits within the lease it holds, until the lease's end, which bounds it now); delete this setting (got "45s")`
	for _, tc := range []struct {
		name, yaml string
		leases     bool
		policy     admission.UnavailablePolicy
		warnings   []string
	}{
		{"fail_open", "ledger: {backend: redis, on_unavailable: fail_open, redis: {address: 127.0.0.1:6379}}\n",
			true, admission.FailOpen, nil},
		{"per request", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379, capacity_leases: false}}\n",
			false, admission.FailClosed, nil},
		{"local_share", "ledger: {backend: redis, on_unavailable: local_share, redis: {address: 127.0.0.1:6379}}\n",
			true, admission.FailClosed, []string{localShare}},
		{"local_share with capacity leases on", "ledger: {backend: redis, on_unavailable: local_share, redis: {address: 127.0.0.1:6379, capacity_leases: true}}\n",
			true, admission.FailClosed, []string{localShare}},
		{"local_share_for", "ledger: {backend: redis, local_share_for: 45s, redis: {address: 127.0.0.1:6379, capacity_leases: false}}\n",
			false, admission.FailClosed, []string{shareFor}},
		{"both", "ledger: {backend: redis, on_unavailable: local_share, local_share_for: 45s, redis: {address: 127.0.0.1:6379}}\n",
			true, admission.FailClosed, []string{shareFor, localShare}},
		{"local_share in memory", "ledger: {on_unavailable: local_share}\n", true, admission.FailClosed,
			[]string{`ledger.on_unavailable: is deprecated (and without effect unless ledger.backend is redis): ` +
				`write fail_closed, or fail_open (got "local_share")`}},
		{"none", redis, true, admission.FailClosed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(testSource, []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if c.Ledger.Redis.CapacityLeases != tc.leases || c.Ledger.OnUnavailable != tc.policy {
				t.Errorf("capacity_leases %v, on_unavailable %v; want %v, %v",
					c.Ledger.Redis.CapacityLeases, c.Ledger.OnUnavailable, tc.leases, tc.policy)
			}
			var want []string
			for _, w := range tc.warnings {
				want = append(want, testSource+": "+w)
			}
			if !slices.Equal(c.Warnings, want) {
				t.Errorf("warnings\n%q\nwant\n%q", c.Warnings, want)
			}
		})
	}
}

// A warning names the variable a value came from, as a problem does.
func TestDeprecatedFromEnvironment(t *testing.T) {
	t.Setenv("BULKHEAD_LEDGER_ON_UNAVAILABLE", "local_share")
	c, err := loadData("bulkhead.yaml", []byte("ledger: {backend: redis, redis: {address: 127.0.0.1:6379}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !c.Ledger.Redis.CapacityLeases ||
		!strings.HasPrefix(c.Warnings[0], `bulkhead.yaml: ledger.on_unavailable: is deprecated`) ||
		!strings.HasSuffix(c.Warnings[0], `(got "local_share" from BULKHEAD_LEDGER_ON_UNAVAILABLE)`) {
		t.Fatalf("warnings %q, capacity_leases %v", c.Warnings, c.Ledger.Redis.CapacityLeases)
	}
	// capacity_leases false from the environment contradicts it too.
	t.Setenv("BULKHEAD_LEDGER_REDIS_CAPACITY_LEASES", "false")
	if _, err := loadData("bulkhead.yaml", []byte("ledger: {backend: redis, redis: {address: 127.0.0.1:6379}}\n"), nil); err == nil ||
		!hasLineWithPrefix(err.Error(), "bulkhead.yaml: ledger.on_unavailable: must not be local_share with ledger.redis.capacity_leases false") {
		t.Fatalf("local_share with capacity_leases false from the environment: %v", err)
	}
}
