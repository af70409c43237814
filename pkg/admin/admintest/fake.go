package admintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// Fake is an in-memory admin.Controller with the contract's semantics:
// Update validates the merged settings and records an override, Reset
// returns to the file settings.
type Fake struct {
	mu    sync.Mutex
	items map[string]*admin.Status
	now   func() time.Time
	calls []string
	sized []admin.Sized
}

var _ admin.Controller = (*Fake)(nil)

// NewFake returns a controller holding bulkheads with the given file
// settings, nothing in use, and now as the time of overrides.
func NewFake(now func() time.Time, file map[string]bulkhead.Settings) *Fake {
	f := &Fake{items: make(map[string]*admin.Status, len(file)), now: now}
	for name, s := range file {
		f.items[name] = &admin.Status{
			Snapshot:     bulkhead.Snapshot{Name: name, Settings: s},
			FileSettings: s,
			LeaseTTL:     time.Minute,
		}
	}
	return f
}

// Mutate changes a bulkhead's status in place (counters, in use, ...).
func (f *Fake) Mutate(name string, fn func(*admin.Status)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.items[name])
}

// Calls returns the changes made so far, as "update NAME by ACTOR" and
// "reset NAME by ACTOR".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// List returns every bulkhead, sorted by name.
func (f *Fake) List() []admin.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]admin.Status, 0, len(f.items))
	for _, st := range f.items {
		out = append(out, copyStatus(st))
	}
	slices.SortFunc(out, func(a, b admin.Status) int { return strings.Compare(a.Snapshot.Name, b.Snapshot.Name) })
	return out
}

// Get returns one bulkhead.
func (f *Fake) Get(name string) (admin.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.items[name]
	if !ok {
		return admin.Status{}, fmt.Errorf("%w: %q", admin.ErrNotFound, name)
	}
	return copyStatus(st), nil
}

// Update merges p into the effective settings.
func (f *Fake) Update(name string, p admin.Patch, actor string) (admin.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.items[name]
	if !ok {
		return admin.Status{}, fmt.Errorf("%w: %q", admin.ErrNotFound, name)
	}
	s := p.Apply(st.Snapshot.Settings)
	if err := s.Validate(); err != nil {
		return admin.Status{}, fmt.Errorf("bulkhead %q: %w", name, err)
	}
	st.Snapshot.Settings = s
	st.Override = &admin.Override{Settings: s, Actor: actor, At: f.now()}
	f.calls = append(f.calls, "update "+name+" by "+actor)
	return copyStatus(st), nil
}

// Reset drops the override.
func (f *Fake) Reset(name, actor string) (admin.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.items[name]
	if !ok {
		return admin.Status{}, fmt.Errorf("%w: %q", admin.ErrNotFound, name)
	}
	st.Snapshot.Settings = st.FileSettings
	st.Override = nil
	f.calls = append(f.calls, "reset "+name+" by "+actor)
	return copyStatus(st), nil
}

// SetCircuit sets the mode of a bulkhead's breaker (set Status.Circuit
// with Mutate first): force_open shows it open, the others closed.
func (f *Fake) SetCircuit(name string, m breaker.Mode, actor string) (admin.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.items[name]
	if !ok {
		return admin.Status{}, fmt.Errorf("%w: %q", admin.ErrNotFound, name)
	}
	if st.Circuit == nil {
		return admin.Status{}, fmt.Errorf("%w: %q", admin.ErrNoBreaker, name)
	}
	st.Circuit.Mode, st.Circuit.State = m, breaker.Closed
	if m == breaker.ForceOpen {
		st.Circuit.State = breaker.Open
	}
	f.calls = append(f.calls, "circuit "+name+" "+m.String()+" by "+actor)
	return copyStatus(st), nil
}

// Suggestions makes Suggest answer sized (for the names it holds).
func (f *Fake) Suggestions(sized ...admin.Sized) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sized = sized
}

// Suggest returns what Suggestions set, for name or every bulkhead.
func (f *Fake) Suggest(name string, p sizing.Params) ([]admin.Sized, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := p.Defaults().Validate(); err != nil {
		return nil, err
	}
	if _, ok := f.items[name]; name != "" && !ok {
		return nil, fmt.Errorf("%w: %q", admin.ErrNotFound, name)
	}
	var out []admin.Sized
	for _, s := range f.sized {
		if name == "" || s.Name == name {
			out = append(out, s)
		}
	}
	return out, nil
}

func copyStatus(st *admin.Status) admin.Status {
	c := *st
	if st.Override != nil {
		o := *st.Override
		c.Override = &o
	}
	if st.Outcomes != nil {
		o := *st.Outcomes
		c.Outcomes = &o
	}
	if st.Circuit != nil {
		o := *st.Circuit
		c.Circuit = &o
	}
	return c
}

// Start serves srv on a loopback port until the test ends and returns its
// address. The cleanup stops the server and waits for it.
func Start(t testing.TB, srv *admin.Server) string {
	t.Helper()
	return StartTLS(t, srv, nil)
}

// StartTLS is Start serving TLS from tlsFiles (nil: plain text).
func StartTLS(t testing.TB, srv *admin.Server, tlsFiles *creds.TLS) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, tlsFiles) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("admin server: %v", err)
		}
	})
	return ln.Addr().String()
}

// Logger returns a logger that discards everything.
func Logger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
