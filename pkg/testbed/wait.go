package testbed

import (
	"context"
	"fmt"
)

// waitUntil blocks until a condition holds, woken by every change of the
// state it reads, never polling. state returns the channel closed at the
// next change (taken before the condition is read, so that no change is
// missed), whether the condition holds, and whether the server is closed
// (ErrUpstreamClosed, unless the condition holds). When ctx ends, the
// error says what was awaited (what, evaluated then).
func waitUntil(ctx context.Context, state func() (changed <-chan struct{}, ok, closed bool), what func() string) error {
	for {
		ch, ok, closed := state()
		if ok {
			return nil
		}
		if closed {
			return ErrUpstreamClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what(), context.Cause(ctx))
		}
	}
}
