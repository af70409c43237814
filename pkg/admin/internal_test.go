package admin

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestAuthenticate(t *testing.T) {
	withToken, _ := NewAuthenticator(WithToken("tok"))
	none, _ := NewAuthenticator()
	verified := &tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "ops"}}},
		VerifiedChains:   [][]*x509.Certificate{{}},
	}
	unverified := &tls.ConnectionState{PeerCertificates: verified.PeerCertificates}
	tests := []struct {
		name   string
		a      *Authenticator
		authz  string
		state  *tls.ConnectionState
		remote string
		actor  string
		err    error
	}{
		{"token", withToken, "Bearer tok", nil, "10.0.0.1:5", "token:" + tokenID("tok") + " from 10.0.0.1:5", nil},
		{"wrong token", withToken, "Bearer tik", nil, "127.0.0.1:5", "", ErrUnauthenticated},
		{"no token from loopback", withToken, "", nil, "127.0.0.1:5", "", ErrUnauthenticated},
		{"empty bearer", withToken, "Bearer ", nil, "127.0.0.1:5", "", ErrUnauthenticated},
		{"certificate", withToken, "", verified, "10.0.0.1:5", "cert:ops from 10.0.0.1:5", nil},
		{"wrong token beats a certificate", withToken, "Bearer x", verified, "10.0.0.1:5", "", ErrUnauthenticated},
		{"unverified certificate", withToken, "", unverified, "10.0.0.1:5", "", ErrUnauthenticated},
		{"local", none, "", nil, "127.0.0.1:5", "local from 127.0.0.1:5", nil},
		{"local v6", none, "", nil, "[::1]:5", "local from [::1]:5", nil},
		{"local, token ignored", none, "Bearer whatever", nil, "127.0.0.1:5", "local from 127.0.0.1:5", nil},
		{"remote without credentials", none, "", nil, "10.0.0.1:5", "", ErrPermissionDenied},
		{"v4-mapped remote", none, "", nil, "[::ffff:10.0.0.1]:5", "", ErrPermissionDenied},
		{"no remote", none, "", nil, "", "", ErrPermissionDenied},
		{"certificate without token config", none, "", verified, "10.0.0.1:5", "cert:ops from 10.0.0.1:5", nil},
	}
	for _, tc := range tests {
		c, err := tc.a.authenticate(tc.authz, tc.state, tc.remote)
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && c.String() != tc.actor {
			t.Errorf("%s: actor %q, want %q", tc.name, c.String(), tc.actor)
		}
	}
}

func TestInvalidSettingsFields(t *testing.T) {
	s := bulkhead.Settings{MaxConcurrent: 0, MaxQueue: -1, MaxWait: -1, ReserveCritical: 2, ReserveNormal: -0.5}
	err := fmt.Errorf("bulkhead %q: %w", "catalog", s.Validate())
	inv := invalidSettings(err)
	var fields []string
	for _, v := range inv.violations {
		fields = append(fields, v.field)
	}
	want := []string{"max_concurrent", "max_queue", "max_wait", "reserve_critical", "reserve_normal"}
	if fmt.Sprint(fields) != fmt.Sprint(want) {
		t.Errorf("fields %v, want %v (%v)", fields, want, inv)
	}
	both := bulkhead.Settings{MaxConcurrent: 2, ReserveCritical: 0.5, ReserveNormal: 0.4}.Validate()
	if inv := invalidSettings(both); len(inv.violations) != 1 || inv.violations[0].field != "reserve" {
		t.Errorf("reserves together: %+v", inv.violations)
	}
	other := invalidSettings(errors.New("something else"))
	if len(other.violations) != 1 || other.violations[0].field != "" {
		t.Errorf("unknown message: %+v", other.violations)
	}
}
