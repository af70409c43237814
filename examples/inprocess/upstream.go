package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// upstream is a dependency on 127.0.0.1. While slow, it answers only after
// slowFor (or when the request is cancelled).
type upstream struct {
	name    string
	url     string
	srv     *http.Server
	served  chan error
	slow    atomic.Bool
	slowFor time.Duration
}

func startUpstream(name string, slowFor time.Duration) (*upstream, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{name: name, url: "http://" + lis.Addr().String() + "/", served: make(chan error, 1), slowFor: slowFor}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: time.Second}
	go func() { u.served <- u.srv.Serve(lis) }()
	return u, nil
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if u.slow.Load() {
		t := time.NewTimer(u.slowFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	fmt.Fprintf(w, "%s ok\n", u.name)
}

// stop closes the upstream, cutting requests still in progress.
func (u *upstream) stop() error {
	err := u.srv.Close()
	if serr := <-u.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// get fetches url with client and returns the body, trimmed.
func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), nil
}
