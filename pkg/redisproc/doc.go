// Package redisproc runs a redis-server of its own for the measurement
// tools (the bench harness, the mesh simulator): loopback, a free port, no
// persistence, its own process group and, on Linux, a parent-death signal,
// so that no server outlives its owner; and it reads what the server did
// (INFO commandstats and cpu) and, before any client connects, what it
// does on its own (IdleFloor: its timers' CPU, the floor under every
// figure of its CPU per request).
//
// A Server is safe for concurrent use. Its one background goroutine
// (waiting for the process to exit) ends when the process does; Stop makes
// it end. An Info and a Floor are values, not shared.
package redisproc
