package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/pflag"
)

// ErrWatch is wrapped by the errors Watch returns when it cannot start.
var ErrWatch = errors.New("cannot watch the configuration file")

// DefaultDebounce is how long Watch gathers file-system events before it
// looks at the file again.
const DefaultDebounce = 100 * time.Millisecond

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	debounce time.Duration
	ready    func()
	// evaluated, for tests, is called after each look at the file with
	// whether it had changed (after onChange, if it was called).
	evaluated func(changed bool)
}

// WithDebounce sets how long Watch gathers events before it looks at the
// file again (DefaultDebounce; at least 1ms). The window starts at the
// first event, so a steady stream of events cannot postpone a reload.
func WithDebounce(d time.Duration) WatchOption {
	return func(o *watchOptions) { o.debounce = max(d, time.Millisecond) }
}

// WithReady has Watch call f, once, when it is watching: every change made
// after f is called is reported. A caller that must not miss a change made
// while it starts waits for f and then loads the file for its initial config.
func WithReady(f func()) WatchOption {
	return func(o *watchOptions) { o.ready = f }
}

// withEvaluated sets the evaluated hook (tests).
func withEvaluated(f func(changed bool)) WatchOption {
	return func(o *watchOptions) { o.evaluated = f }
}

// Watch watches the configuration file at path until ctx ends, and after
// each change calls onChange with the file loaded as Load(path, flags) would
// (so env and flags still apply), or with the error: a load error
// (ErrInvalid, ErrSyntax), an error wrapping fs.ErrNotExist when the file
// has gone (Watch keeps watching for it to come back), or a file-system
// watch error. onChange runs on Watch's goroutine, one call at a time, and
// Watch waits for it to return.
//
// Watch watches the directory holding path (which must exist) and the
// directory of the file path resolves to, so it sees in-place writes,
// editors that write a new file and rename it over path, and the Kubernetes
// ConfigMap pattern, where path is a symlink to ..data/FILE and ..data is a
// symlink swapped atomically to a new directory. After DefaultDebounce (see
// WithDebounce) it resolves path and hashes the content: onChange is called
// only when the resolved target or the content differ from the last look,
// so events that change nothing (a touch, writes to other files) cause no
// reload, while a new symlink target does even with the same content.
// Changes made before Watch is watching are not reported (see WithReady).
// The admin token and TLS files are read by each load, not watched.
//
// Watch returns nil when ctx ends, having stopped everything it started, or
// an error wrapping ErrWatch if it cannot start.
func Watch(ctx context.Context, path string, flags *pflag.FlagSet, onChange func(*Config, error), opts ...WatchOption) error {
	o := watchOptions{debounce: DefaultDebounce}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" || onChange == nil {
		return fmt.Errorf("%w: a path and an onChange function are required", ErrWatch)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrWatch, path, err)
	}
	defer w.Close() // waits for fsnotify's goroutine
	path = filepath.Clean(path)
	fw := &fileWatch{path: path, dir: filepath.Dir(path), w: w, flags: flags, onChange: onChange, o: o}
	if err := w.Add(fw.dir); err != nil {
		return fmt.Errorf("%w %s: %w", ErrWatch, path, err)
	}
	fw.last = fw.look() // after Add: no change from here on is missed
	fw.follow(fw.last.target)
	if o.ready != nil {
		o.ready()
	}
	return fw.run(ctx)
}

// fileWatch is the state of one Watch call, owned by its goroutine.
type fileWatch struct {
	path, dir string
	w         *fsnotify.Watcher
	flags     *pflag.FlagSet
	onChange  func(*Config, error)
	o         watchOptions

	last      fileState
	targetDir string // the resolved file's directory, when watched apart from dir
}

// fileState is what one look at the file found.
type fileState struct {
	target  string   // path with every symlink resolved; "" when err != nil
	sum     [32]byte // SHA-256 of the content
	errText string   // the error's text when the file could not be read
	data    []byte   // the content, kept only until it is loaded
	err     error
}

func (s fileState) same(o fileState) bool {
	return s.target == o.target && s.sum == o.sum && s.errText == o.errText
}

// look resolves and reads the file.
func (fw *fileWatch) look() fileState {
	target, err := filepath.EvalSymlinks(fw.path)
	var data []byte
	if err == nil {
		data, err = readFile(target)
	}
	if err != nil {
		return fileState{errText: err.Error(), err: fmt.Errorf("config file %s: %w", fw.path, err)}
	}
	return fileState{target: target, sum: sha256.Sum256(data), data: data}
}

func (fw *fileWatch) run(ctx context.Context) error {
	var (
		timer *time.Timer
		fire  <-chan time.Time // nil while no look is pending
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func() {
		if fire == nil {
			timer = time.NewTimer(fw.o.debounce)
			fire = timer.C
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.w.Events:
			if !ok {
				return fmt.Errorf("%w %s: event channel closed", ErrWatch, fw.path)
			}
			arm()
		case err, ok := <-fw.w.Errors:
			if !ok {
				return fmt.Errorf("%w %s: error channel closed", ErrWatch, fw.path)
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) { // lost events: just look again
				fw.onChange(nil, fmt.Errorf("watch %s: %w", fw.dir, err))
			}
			arm()
		case <-fire:
			timer, fire = nil, nil
			fw.evaluate()
		}
	}
}

// evaluate looks at the file and reports it if it changed.
func (fw *fileWatch) evaluate() {
	now := fw.look()
	changed := !now.same(fw.last)
	fw.follow(now.target)
	if changed {
		data := now.data
		now.data = nil
		fw.last = now
		if now.err != nil {
			fw.onChange(nil, now.err)
		} else {
			fw.onChange(loadData(fw.path, data, fw.flags))
		}
	}
	if fw.o.evaluated != nil {
		fw.o.evaluated(changed)
	}
}

// follow watches the directory of target too, when it is not the directory
// of path, so that in-place writes to a symlink's target are seen. It is
// best effort: a directory that vanished is simply not watched.
func (fw *fileWatch) follow(target string) {
	want := ""
	if target != "" {
		want = filepath.Dir(target)
		if sameDir(want, fw.dir) {
			want = ""
		}
	}
	if want == fw.targetDir && (want == "" || slices.Contains(fw.w.WatchList(), want)) {
		return // unchanged, and not deleted since (inotify drops a deleted directory's watch)
	}
	if fw.targetDir != "" {
		_ = fw.w.Remove(fw.targetDir) // fails if it was deleted: fine
	}
	fw.targetDir = ""
	if want != "" && fw.w.Add(want) == nil {
		fw.targetDir = want
	}
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ai, err1 := os.Stat(a)
	bi, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}
