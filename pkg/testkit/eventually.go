package testkit

import (
	"testing"
	"time"
)

// EventuallyWithin is how long Eventually waits.
const EventuallyWithin = 10 * time.Second

// Eventually polls cond until it holds, failing the test, naming what, if
// it does not within EventuallyWithin. It is for a state another goroutine
// or process reaches without telling the test: polling with a deadline,
// not synchronisation by sleep.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(EventuallyWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, EventuallyWithin)
		}
		time.Sleep(time.Millisecond)
	}
}
