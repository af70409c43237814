package envoyproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// ErrNoListener means the admin interface lists no listener of that name.
var ErrNoListener = errors.New("envoy listener not found")

// adminTimeout bounds a single admin request.
const adminTimeout = 5 * time.Second

const maxAdminBody = 16 << 20

func (p *Proc) get(ctx context.Context, path string) (*http.Response, error) {
	return p.do(ctx, http.MethodGet, path)
}

func (p *Proc) post(ctx context.Context, path string) (*http.Response, error) {
	return p.do(ctx, http.MethodPost, path)
}

func (p *Proc) do(ctx context.Context, method, path string) (*http.Response, error) {
	if p.admin == "" {
		return nil, fmt.Errorf("%w: admin address unknown", ErrAdmin)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.admin+path, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: %w", ErrAdmin, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: %s %s: %w", ErrAdmin, method, path, err)
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// getJSON GETs path and decodes a 200 JSON answer into v.
func (p *Proc) getJSON(ctx context.Context, path string, v any) error {
	resp, err := p.get(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: status %d", ErrAdmin, path, resp.StatusCode)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxAdminBody))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: GET %s: %w", ErrAdmin, path, err)
	}
	return nil
}

// ListenerAddr returns the bound host:port of the named listener, which
// resolves listeners configured with port 0.
func (p *Proc) ListenerAddr(ctx context.Context, name string) (string, error) {
	var body struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := p.getJSON(ctx, "/listeners?format=json", &body); err != nil {
		return "", err
	}
	for _, l := range body.ListenerStatuses {
		if l.Name == name {
			sa := l.LocalAddress.SocketAddress
			return net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue)), nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrNoListener, name)
}

// Stats returns every counter and gauge by name (histograms are left out).
func (p *Proc) Stats(ctx context.Context) (map[string]uint64, error) {
	var body struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := p.getJSON(ctx, "/stats?format=json", &body); err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(body.Stats))
	for _, s := range body.Stats {
		if s.Name == "" || len(s.Value) == 0 {
			continue // the histograms element
		}
		if s.Value[0] == '"' {
			continue // a text readout (the RTDS layer's version, with shares)
		}
		v, err := strconv.ParseUint(string(s.Value), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: stat %q: %w", ErrAdmin, s.Name, err)
		}
		out[s.Name] = v
	}
	return out, nil
}
