package server

import (
	"fmt"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// listenerTLS loads the TLS files of the listener named listener ("grpc",
// "admin"), configured at setting, and registers their series; the files
// are then checked for changes at most every r.tlsCheck, on handshakes.
// The error names the setting and the file.
func (r *Runner) listenerTLS(listener, setting string, files config.TLSFiles) (*creds.TLS, error) {
	if err := r.Metrics.RegisterTLS(r.promReg, listener, setting); err != nil {
		return nil, err
	}
	t, err := creds.NewTLS(listener, files.Creds(),
		creds.WithLogger(r.log.With("component", listener+"-tls")),
		creds.WithRecorder(r.Metrics),
		creds.WithCheckInterval(r.tlsCheck))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	return t, nil
}
