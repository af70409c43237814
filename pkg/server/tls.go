package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// DefaultTLSCheckInterval is how often, at most, the gRPC listener's TLS
// files are read again to see whether they changed.
const DefaultTLSCheckInterval = time.Second

// certReloader serves the gRPC listener's TLS from files that may be
// rotated while the daemon runs. A handshake that comes at least the check
// interval after the last check reads the files (the certificate, its key
// and, for mTLS, the client CA bundle; a few KiB) and compares their bytes
// with what is loaded; when they differ, the new key pair and CA pool serve
// that handshake and every later one. Connections already open keep the
// certificate they were made with. Comparing content, not modification
// times, sees every kind of rotation (in place, rename over, a Kubernetes
// secret's symlink swap) whatever the file system's timestamp granularity,
// and costs at most one read of the files per interval however many
// handshakes come.
//
// Files that do not load (a key that does not yet match its new
// certificate halfway through a rotation, a file half written or missing)
// leave the last good key pair serving; the problem is logged and counted
// once, and the files are tried again at the next check. No goroutine is
// involved: the work happens on handshakes.
//
// It is safe for concurrent use.
type certReloader struct {
	files    config.TLSFiles
	log      *slog.Logger
	rec      tlsRecorder
	clock    clock.Clock
	interval time.Duration

	cur  atomic.Pointer[tlsState]
	next atomic.Int64 // Unix nanoseconds before which no handshake checks

	mu      sync.Mutex // serialises checks; guards problem
	problem string     // the last failure logged, "" after a success
}

// tlsRecorder counts loads; *metrics.Metrics is one.
type tlsRecorder interface {
	TLSReload(ok bool)
	TLSNotAfter(t time.Time)
}

// tlsState is one loaded generation of the files.
type tlsState struct {
	pem config.TLSPEM
	cfg *tls.Config // served to each client of this generation
}

// newCertReloader loads the files once; an error means they do not hold a
// usable key pair (and CA bundle).
func newCertReloader(files config.TLSFiles, log *slog.Logger, rec tlsRecorder, clk clock.Clock, interval time.Duration) (*certReloader, error) {
	c := &certReloader{files: files, log: log, rec: rec, clock: clk, interval: interval}
	pem, err := files.ReadPEM()
	if err != nil {
		return nil, fmt.Errorf("listen.grpc_tls: %w", err)
	}
	st, err := c.parse(pem)
	if err != nil {
		return nil, err
	}
	c.cur.Store(st)
	c.next.Store(clk.Now().Add(interval).UnixNano())
	rec.TLSReload(true)
	rec.TLSNotAfter(st.cfg.Certificates[0].Leaf.NotAfter)
	return c, nil
}

// serverConfig is the listener's base configuration: every handshake gets
// the current generation's.
func (c *certReloader) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		GetConfigForClient: c.configForClient,
	}
}

// configForClient implements tls.Config.GetConfigForClient.
func (c *certReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	if now := c.clock.Now(); now.UnixNano() >= c.next.Load() {
		c.check(now)
	}
	return c.cur.Load().cfg, nil
}

// check reads the files and swaps in their content if it changed and loads,
// unless another handshake checked since now.
func (c *certReloader) check(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.UnixNano() < c.next.Load() {
		return
	}
	c.next.Store(now.Add(c.interval).UnixNano())
	cur := c.cur.Load()
	pem, err := c.files.ReadPEM()
	if err == nil && pem.Equal(cur.pem) {
		return
	}
	var st *tlsState
	if err == nil {
		st, err = c.parse(pem)
	} else {
		err = fmt.Errorf("listen.grpc_tls: %w", err)
	}
	if err != nil {
		if msg := err.Error(); msg != c.problem {
			c.problem = msg
			c.rec.TLSReload(false)
			c.log.Warn("gRPC TLS files changed but do not load; the previous certificate keeps serving", "err", err)
		}
		return
	}
	c.problem = ""
	c.cur.Store(st)
	leaf := st.cfg.Certificates[0].Leaf
	c.rec.TLSReload(true)
	c.rec.TLSNotAfter(leaf.NotAfter)
	c.log.Info("gRPC TLS certificate reloaded", "cert_file", c.files.CertFile,
		"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter, "client_ca", st.cfg.ClientCAs != nil)
}

// parse turns the files' content into a generation.
func (c *certReloader) parse(pem config.TLSPEM) (*tlsState, error) {
	pair, pool, err := c.files.Parse(pem)
	if err != nil {
		return nil, fmt.Errorf("listen.grpc_tls: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC requires HTTP/2 by ALPN
		Certificates: []tls.Certificate{pair},
	}
	if pool != nil {
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &tlsState{pem: pem, cfg: cfg}, nil
}
