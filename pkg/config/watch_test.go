package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The watch tests load through Load, which reads the environment: none is
// parallel. They never sleep: they wait for a callback, with a deadline.

const waitLimit = 10 * time.Second

type loaded struct {
	c   *Config
	err error
}

// watching is one Watch call run by a test.
type watching struct {
	results chan loaded // onChange calls
	looks   chan bool   // evaluations: whether the file had changed
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

// startWatch runs Watch on path until the test ends, and returns once Watch
// is watching.
func startWatch(t *testing.T, path string, flags *pflag.FlagSet) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watching{results: make(chan loaded, 16), looks: make(chan bool, 1024), cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	onChange := func(c *Config, err error) {
		select {
		case w.results <- loaded{c, err}:
		case <-ctx.Done():
		}
	}
	looked := func(changed bool) {
		select {
		case w.looks <- changed:
		case <-ctx.Done():
		}
	}
	go func() {
		w.done <- Watch(ctx, path, flags, onChange, WithDebounce(10*time.Millisecond),
			WithReady(func() { close(ready) }), withEvaluated(looked))
	}()
	select {
	case <-ready:
	case err := <-w.done:
		t.Fatalf("Watch returned before it was ready: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("Watch not ready")
	}
	t.Cleanup(w.stop(t))
	return w
}

// stop returns a function that ends the watch and checks it returned nil.
func (w *watching) stop(t *testing.T) func() {
	return func() {
		w.once.Do(func() {
			w.cancel()
			select {
			case err := <-w.done:
				if err != nil {
					t.Errorf("Watch = %v, want nil", err)
				}
			case <-time.After(waitLimit):
				t.Error("Watch did not return after its context ended")
			}
		})
	}
}

// next returns the next onChange call.
func (w *watching) next(t *testing.T) loaded {
	t.Helper()
	select {
	case l := <-w.results:
		return l
	case <-time.After(waitLimit):
		t.Fatal("no onChange call")
		return loaded{}
	}
}

// nextLimit returns catalog's max_concurrent from the next onChange call,
// failing on an error.
func (w *watching) nextLimit(t *testing.T) int {
	t.Helper()
	l := w.next(t)
	if l.err != nil {
		t.Fatalf("onChange error: %v", l.err)
	}
	return l.c.Bulkheads["catalog"].Settings.MaxConcurrent
}

// unchangedLook waits for a look that found no change, and checks that no
// onChange call came first.
func (w *watching) unchangedLook(t *testing.T) {
	t.Helper()
	for {
		select {
		case changed := <-w.looks:
			if !changed {
				select {
				case l := <-w.results:
					t.Fatalf("unexpected onChange(%+v, %v)", l.c, l.err)
				default:
				}
				return
			}
		case l := <-w.results:
			t.Fatalf("unexpected onChange(%+v, %v)", l.c, l.err)
		case <-time.After(waitLimit):
			t.Fatal("the watch did not look at the file")
		}
	}
}

func catalogYAML(limit int) string {
	return fmt.Sprintf("bulkheads:\n  catalog: {max_concurrent: %d}\n", limit)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace writes content to a temporary file beside path and renames it
// over path, as editors and atomic writers do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatchInPlaceWrite(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)
	write(t, path, catalogYAML(2))
	// A plain write truncates first, so a look may catch the file empty:
	// wait for the final content.
	for deadline := time.Now().Add(waitLimit); ; {
		l := w.next(t)
		if l.err == nil && l.c.Bulkheads["catalog"].Settings.MaxConcurrent == 2 {
			if l.c.Source != path {
				t.Errorf("Source = %q, want %q", l.c.Source, path)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last onChange(%+v, %v)", l.c, l.err)
		}
	}
}

func TestWatchRenameOver(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)
	for _, n := range []int{2, 3} {
		replace(t, path, catalogYAML(n))
		if got := w.nextLimit(t); got != n {
			t.Fatalf("max_concurrent = %d, want %d", got, n)
		}
	}
}

// TestWatchConfigMap builds a ConfigMap volume as kubelet does and swaps its
// ..data symlink atomically.
func TestWatchConfigMap(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	version := func(ts, content string) {
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, ts, "bulkhead.yaml"), content)
	}
	swap := func(ts string) { // ..data_tmp -> ts, renamed over ..data
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(ts, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	const ts1, ts2, ts3 = "..2026_11_22_01_00_00.123", "..2026_11_22_01_05_00.456", "..2026_11_22_01_10_00.789"
	version(ts1, catalogYAML(1))
	if err := os.Symlink(ts1, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bulkhead.yaml")
	if err := os.Symlink(filepath.Join("..data", "bulkhead.yaml"), path); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, path, nil)

	version(ts2, catalogYAML(2))
	swap(ts2)
	if err := os.RemoveAll(filepath.Join(dir, ts1)); err != nil {
		t.Fatal(err)
	}
	if got := w.nextLimit(t); got != 2 {
		t.Fatalf("after the swap max_concurrent = %d, want 2", got)
	}

	// A new target with the same content is a reload too.
	version(ts3, catalogYAML(2))
	swap(ts3)
	if err := os.RemoveAll(filepath.Join(dir, ts2)); err != nil {
		t.Fatal(err)
	}
	if got := w.nextLimit(t); got != 2 {
		t.Fatalf("after the second swap max_concurrent = %d, want 2", got)
	}

	// The target's own directory is watched: a rename inside it is seen.
	replace(t, filepath.Join(dir, ts3, "bulkhead.yaml"), catalogYAML(3))
	if got := w.nextLimit(t); got != 3 {
		t.Fatalf("after a write in %s max_concurrent = %d, want 3", ts3, got)
	}
}

func TestWatchInvalidThenValid(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)

	replace(t, path, "bulkheads:\n  catalog: {max_concurrent: 0}\n")
	l := w.next(t)
	var ie *InvalidError
	if l.c != nil || !errors.As(l.err, &ie) || ie.Source != path ||
		!hasLineWithPrefix(l.err.Error(), path+": bulkheads.catalog.max_concurrent: must be at least 1") {
		t.Fatalf("invalid edit: onChange(%+v, %v)", l.c, l.err)
	}
	replace(t, path, "bulkheads: [\n")
	if l := w.next(t); !errors.Is(l.err, ErrSyntax) {
		t.Fatalf("syntax error: onChange(%+v, %v)", l.c, l.err)
	}
	replace(t, path, catalogYAML(4))
	if got := w.nextLimit(t); got != 4 {
		t.Fatalf("valid edit: max_concurrent = %d, want 4", got)
	}
}

func TestWatchDeleteAndRecreate(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if l := w.next(t); l.c != nil || !errors.Is(l.err, fs.ErrNotExist) {
		t.Fatalf("deleted: onChange(%+v, %v), want ErrNotExist", l.c, l.err)
	}
	// Other files coming and going while it is missing report nothing more.
	write(t, filepath.Join(filepath.Dir(path), "other"), "x")
	w.unchangedLook(t)

	replace(t, path, catalogYAML(1)) // the same content as before it went
	if got := w.nextLimit(t); got != 1 {
		t.Fatalf("re-created: max_concurrent = %d, want 1", got)
	}
}

func TestWatchUnchangedContent(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)

	now := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, now, now); err != nil { // touch
		t.Fatal(err)
	}
	w.unchangedLook(t)
	f, err := os.OpenFile(path, os.O_WRONLY, 0) // rewritten in place, same bytes
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(catalogYAML(1)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	w.unchangedLook(t)
	replace(t, path, catalogYAML(1)) // a new file, same bytes
	w.unchangedLook(t)
	replace(t, path, catalogYAML(5))
	if got := w.nextLimit(t); got != 5 {
		t.Fatalf("max_concurrent = %d, want 5", got)
	}
}

func TestWatchAppliesEnvAndFlags(t *testing.T) {
	clearEnv(t)
	t.Setenv("BULKHEAD_LIMITS_MAX_TENANTS", "7")
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, newFlags(t, "--listen-admin=127.0.0.1:0"))
	replace(t, path, catalogYAML(2)+"limits: {max_tenants: 3}\nlisten: {admin: 127.0.0.1:9999}\n")
	l := w.next(t)
	if l.err != nil || l.c.Limits.MaxTenants != 7 || l.c.Listen.Admin != "127.0.0.1:0" {
		t.Fatalf("onChange(%+v, %v), want env and flag to win", l.c, l.err)
	}
}

func TestWatchStops(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, catalogYAML(1))
	w := startWatch(t, path, nil)
	replace(t, path, catalogYAML(2)) // leaves a look pending or done: either way Watch must stop
	w.stop(t)()
	goleak.VerifyNone(t)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Watch(ctx, path, nil, func(*Config, error) {}); err != nil {
		t.Errorf("Watch with an ended context = %v, want nil", err)
	}
	goleak.VerifyNone(t)
}

func TestWatchCannotStart(t *testing.T) {
	t.Parallel()
	noop := func(*Config, error) {}
	missingDir := filepath.Join(t.TempDir(), "absent", "bulkhead.yaml")
	for name, run := range map[string]func() error{
		"no path":        func() error { return Watch(context.Background(), "", nil, noop) },
		"no onChange":    func() error { return Watch(context.Background(), missingDir, nil, nil) },
		"no such folder": func() error { return Watch(context.Background(), missingDir, nil, noop) },
	} {
		if err := run(); !errors.Is(err, ErrWatch) {
			t.Errorf("%s: Watch = %v, want ErrWatch", name, err)
		}
	}
}
