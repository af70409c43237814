package metrics_test

import (
	"testing"
	"time"
)

// A listener's TLS series exist only once registered, with both results at
// zero; the expiry is the served certificate's; listeners are apart.
func TestTLS(t *testing.T) {
	f := newFixture(t)
	fams := gather(t, f.reg)
	for _, name := range []string{"bulkhead_grpc_tls_reloads_total", "bulkhead_grpc_tls_not_after_timestamp_seconds"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s present before RegisterTLS", name)
		}
	}
	if err := f.m.RegisterTLS(f.reg, "grpc", "listen.grpc_tls"); err != nil {
		t.Fatal(err)
	}
	if err := f.m.RegisterTLS(f.reg, "admin", "admin.tls"); err != nil {
		t.Fatal(err)
	}
	notAfter := time.Unix(2_000_000_000, 0)
	f.m.Reloaded("grpc", true, notAfter)
	f.m.Reloaded("grpc", false, time.Time{})
	f.m.Reloaded("grpc", false, time.Time{})
	f.m.Reloaded("admin", true, notAfter.Add(time.Hour))
	f.m.Reloaded("nosuch", true, notAfter) // not registered: ignored
	fams = gather(t, f.reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_grpc_tls_reloads_total", []string{"result", "success"}, 1},
		{"bulkhead_grpc_tls_reloads_total", []string{"result", "failure"}, 2},
		{"bulkhead_grpc_tls_not_after_timestamp_seconds", nil, float64(notAfter.Unix())},
		{"bulkhead_admin_tls_reloads_total", []string{"result", "success"}, 1},
		{"bulkhead_admin_tls_reloads_total", []string{"result", "failure"}, 0},
		{"bulkhead_admin_tls_not_after_timestamp_seconds", nil, float64(notAfter.Add(time.Hour).Unix())},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	if err := f.m.RegisterTLS(f.reg, "grpc", "listen.grpc_tls"); err == nil {
		t.Error("a second RegisterTLS on the same registry succeeded")
	}
}
