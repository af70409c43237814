package envoyproc

import (
	"strings"
	"sync"
)

// tailBuffer is an io.Writer that keeps the last max bytes written. It is
// safe for concurrent use.
type tailBuffer struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// suffix returns the kept output formatted for the end of an error message,
// or "" when there is none.
func (t *tailBuffer) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "; envoy stderr:\n" + s
}
