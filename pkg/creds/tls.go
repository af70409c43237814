package creds

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// DefaultCheckInterval is how often, at most, a TLS value reads its files
// again to see whether they changed.
const DefaultCheckInterval = time.Second

// Files names a listener's TLS files (PEM).
type Files struct {
	CertFile string // server certificate, leaf first
	KeyFile  string // private key of CertFile
	// ClientCAFile is a bundle of CA certificates; when set, clients must
	// present a certificate signed by one of them (mutual TLS).
	ClientCAFile string
}

// Recorder is told of the loads of a listener's TLS files: the first, each
// change that loads (ok, with the expiry of the certificate now served),
// and each distinct problem of a change that does not (not ok, zero time).
// listener is the name given to NewTLS.
type Recorder interface {
	Reloaded(listener string, ok bool, notAfter time.Time)
}

// TLS serves a listener's TLS from files that may be rotated while the
// daemon runs. A handshake that comes at least the check interval after
// the last check reads the files (the certificate, its key and, for mTLS,
// the client CA bundle; a few KiB) and compares their bytes with what is
// loaded; when they differ, the new key pair and CA pool serve that
// handshake and every later one. Connections already open keep the
// certificate they were made with. Comparing content, not modification
// times, sees every kind of rotation (in place, rename over, a Kubernetes
// secret's symlink swap) whatever the file system's timestamp granularity,
// and costs at most one read of the files per interval however many
// handshakes come.
//
// Files that do not load (a key that does not yet match its new
// certificate halfway through a rotation, a file half written or missing)
// leave the last good key pair serving; the problem is logged and recorded
// once, and the files are tried again at the next check. No goroutine is
// involved: the work happens on handshakes.
//
// Whether clients must present a certificate is fixed by Files: with a
// ClientCAFile every generation requires one.
//
// It is safe for concurrent use.
type TLS struct {
	files    Files
	listener string
	log      *slog.Logger
	rec      Recorder
	clock    clock.Clock
	interval time.Duration

	cur  atomic.Pointer[generation]
	next atomic.Int64 // Unix nanoseconds before which no handshake checks

	mu      sync.Mutex // serialises checks; guards problem
	problem string     // the last failure reported, "" after a success
}

// TLSOption configures a TLS.
type TLSOption func(*TLS)

// WithLogger sets where reloads and failed reloads are logged (default:
// nowhere).
func WithLogger(l *slog.Logger) TLSOption { return func(t *TLS) { t.log = l } }

// WithRecorder sets who is told of loads (default: nobody).
func WithRecorder(r Recorder) TLSOption { return func(t *TLS) { t.rec = r } }

// WithClock sets the clock of the check interval (default clock.Real).
func WithClock(c clock.Clock) TLSOption { return func(t *TLS) { t.clock = c } }

// WithCheckInterval sets how often, at most, the files are read again
// (default DefaultCheckInterval).
func WithCheckInterval(d time.Duration) TLSOption { return func(t *TLS) { t.interval = d } }

// generation is one loaded content of the files.
type generation struct {
	pem  [3][]byte // certificate, key, client CAs (nil without)
	pair tls.Certificate
	pool *x509.CertPool // nil without ClientCAFile
}

// NewTLS loads files once for the listener named listener (as logged and
// recorded, e.g. "grpc" or "admin"). The error names the file at fault and
// wraps the file system's error, ErrNotRegular, ErrTooLarge,
// ErrNoCertificate or ErrKeyPair.
func NewTLS(listener string, files Files, opts ...TLSOption) (*TLS, error) {
	t := &TLS{
		files: files, listener: listener,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), rec: nopRecorder{},
		clock: clock.Real{}, interval: DefaultCheckInterval,
	}
	for _, o := range opts {
		o(t)
	}
	g, err := t.load()
	if err != nil {
		return nil, err
	}
	t.cur.Store(g)
	t.next.Store(t.clock.Now().Add(t.interval).UnixNano())
	t.rec.Reloaded(listener, true, g.pair.Leaf.NotAfter)
	return t, nil
}

// MutualTLS reports whether clients must present a certificate signed by
// one of the client CAs. It is false for a nil TLS (plain TCP).
func (t *TLS) MutualTLS() bool { return t != nil && t.files.ClientCAFile != "" }

// ServerConfig returns a listener's configuration: every handshake gets
// the current generation of the files, offering nextProtos by ALPN (the
// listener's protocols: "h2" for gRPC).
func (t *TLS) ServerConfig(nextProtos ...string) *tls.Config {
	v := &view{t: t, nextProtos: nextProtos}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         nextProtos,
		GetConfigForClient: v.configForClient,
	}
}

// view is one ServerConfig's: the current generation with its protocols,
// built once per generation.
type view struct {
	t          *TLS
	nextProtos []string
	cur        atomic.Pointer[viewConfig]
}

type viewConfig struct {
	gen *generation
	cfg *tls.Config
}

// configForClient implements tls.Config.GetConfigForClient.
func (v *view) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	g := v.t.current()
	if c := v.cur.Load(); c != nil && c.gen == g {
		return c.cfg, nil
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   v.nextProtos,
		Certificates: []tls.Certificate{g.pair},
	}
	if g.pool != nil {
		cfg.ClientCAs = g.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// Two handshakes may build the same generation's at once; either is fine.
	v.cur.Store(&viewConfig{gen: g, cfg: cfg})
	return cfg, nil
}

// current returns the generation to serve now, checking the files first
// when the interval has passed.
func (t *TLS) current() *generation {
	if now := t.clock.Now(); now.UnixNano() >= t.next.Load() {
		t.check(now)
	}
	return t.cur.Load()
}

// check reads the files and swaps in their content if it changed and
// loads, unless another handshake checked since now.
func (t *TLS) check(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.UnixNano() < t.next.Load() {
		return
	}
	t.next.Store(now.Add(t.interval).UnixNano())
	cur := t.cur.Load()
	g, err := t.read()
	if err == nil && g.same(cur) {
		return
	}
	if err == nil {
		err = t.parse(g)
	}
	if err != nil {
		if msg := err.Error(); msg != t.problem {
			t.problem = msg
			t.rec.Reloaded(t.listener, false, time.Time{})
			t.log.Warn("TLS files changed but do not load; the previous certificate keeps serving",
				"listener", t.listener, "err", err)
		}
		return
	}
	t.problem = ""
	t.cur.Store(g)
	leaf := g.pair.Leaf
	t.rec.Reloaded(t.listener, true, leaf.NotAfter)
	t.log.Info("TLS certificate reloaded", "listener", t.listener, "cert_file", t.files.CertFile,
		"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter, "client_ca", g.pool != nil)
}

// same reports whether g and h were read from the same bytes.
func (g *generation) same(h *generation) bool {
	for i := range g.pem {
		if !bytes.Equal(g.pem[i], h.pem[i]) {
			return false
		}
	}
	return true
}

// load reads and parses the files.
func (t *TLS) load() (*generation, error) {
	g, err := t.read()
	if err != nil {
		return nil, err
	}
	return g, t.parse(g)
}

// read reads the files, each bounded by MaxPEMSize.
func (t *TLS) read() (*generation, error) {
	g := &generation{}
	paths := [3]string{t.files.CertFile, t.files.KeyFile, t.files.ClientCAFile}
	for i, path := range paths {
		if path == "" && i == 2 {
			break
		}
		data, err := ReadFile(path, MaxPEMSize)
		if err != nil {
			return nil, err
		}
		g.pem[i] = data
	}
	return g, nil
}

// parse fills g's key pair and pool from its content. Errors name the
// files, never their content.
func (t *TLS) parse(g *generation) error {
	pair, err := KeyPair(g.pem[0], g.pem[1])
	switch {
	case errors.Is(err, ErrKeyPair):
		return fmt.Errorf("%s, %s: %w", t.files.CertFile, t.files.KeyFile, err)
	case err != nil:
		return fmt.Errorf("%s: %w", t.files.CertFile, err)
	}
	g.pair = pair
	if g.pem[2] != nil {
		if g.pool, err = CertPool(g.pem[2]); err != nil {
			return fmt.Errorf("%s: %w", t.files.ClientCAFile, err)
		}
	}
	return nil
}

type nopRecorder struct{}

func (nopRecorder) Reloaded(string, bool, time.Time) {}
