// Package testkit holds the fixtures that tests of several packages share,
// so that each lives once: a certificate authority issuing server and
// client certificates (CA), files written and rotated the way secret
// managers do (WriteFile, Replace), a buffer safe for a concurrent writer
// and reader (SyncBuffer), gRPC servers on an in-memory listener
// (ServeBufconn), a TCP proxy that turns into a silent or refusing link
// (Proxy), and polling with a deadline for a state a test is not
// told of (Eventually).
//
// It is for tests only: only _test.go files (and other test-helper
// packages) may import it, never code that ships in a binary; its own
// test checks that. Its helpers take a testing.TB, fail the test on error
// and clean up when the test ends. SyncBuffer and Proxy are safe for concurrent use;
// a CA may issue from several goroutines.
package testkit
