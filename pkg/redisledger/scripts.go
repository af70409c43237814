package redisledger

import (
	"embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// expiryGrace is how long a lease stays live past its expiry: every
// script's sweep (acquire, release, renew, a replica's look) reclaims a
// lease only grace after it expired, and a periodic entry within the grace
// renews it (Renewed, counted all along, never adopted past the limit).
// The in-memory ledger gives the same: it sweeps every
// permit.DefaultSweepInterval, so a late heartbeat finds its lease up to
// that long after expiry. The cost is that a dead Envoy's permits come back
// grace later. The scripts read it as GRACE (ms), which loadScripts puts
// before common.lua.
const expiryGrace = permit.DefaultSweepInterval

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the ledger's operations, each one Lua script run atomically
// by EVALSHA (go-redis loads a script on NOSCRIPT, so a restarted or
// failed-over Redis needs nothing from the replicas). Every per-bulkhead
// script starts with GRACE (expiryGrace) and common.lua, which documents
// the data model.
type scripts struct {
	acquire, release, renew, leave, state, reopen, replicas *redis.Script
	// lease grants, renews, resizes and gives back capacity leases
	// (capacity.go).
	lease *redis.Script
}

func loadScripts() scripts {
	common := fmt.Sprintf("local GRACE = %d\n", expiryGrace.Milliseconds()) + read("common.lua")
	op := func(name string) *redis.Script { return redis.NewScript(common + "\n" + read(name)) }
	return scripts{
		acquire:  op("acquire.lua"),
		release:  op("release.lua"),
		renew:    op("renew.lua"),
		leave:    op("leave.lua"),
		state:    op("state.lua"),
		reopen:   op("reopen.lua"),
		replicas: redis.NewScript(read("replicas.lua")),
		lease:    op("lease.lua"),
	}
}

func read(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic("redisledger: embedded script missing: " + name) // a broken build
	}
	return string(b)
}

// The scripts' result codes (the first element of each answer), named as
// common.lua names them (acquireGranted is ACQUIRE_GRANTED, ...): change one
// side, change the other (TestResultCodesMatchLua). Each operation
// translates its codes to a permit.Result in one place (released,
// renewedResult).
const (
	acquireGranted  = 1 // ACQUIRE_GRANTED
	acquireQueued   = 2 // ACQUIRE_QUEUED
	acquireRejected = 3 // ACQUIRE_REJECTED

	releaseReleased  = 1 // RELEASE_RELEASED
	releaseDuplicate = 2 // RELEASE_DUPLICATE
	releaseExpired   = 3 // RELEASE_EXPIRED
	releaseUnknown   = 4 // RELEASE_UNKNOWN
	releaseWaiter    = 5 // RELEASE_WAITER
	releaseForwarded = 6 // RELEASE_FORWARDED

	renewRenewed        = 1 // RENEW_RENEWED
	renewAdoptedExpired = 2 // RENEW_ADOPTED_EXPIRED
	renewAdoptedUnknown = 3 // RENEW_ADOPTED_UNKNOWN
	renewLate           = 4 // RENEW_LATE
	renewUnknown        = 5 // RENEW_UNKNOWN
	renewForwarded      = 6 // RENEW_FORWARDED

	leaveLeft      = 1 // LEAVE_LEFT
	leaveKept      = 2 // LEAVE_KEPT
	leaveGivenBack = 3 // LEAVE_GIVEN_BACK
	leaveNotFound  = 4 // LEAVE_NOT_FOUND

	leaseHeld   = 1 // LEASE_HELD
	leaseStale  = 2 // LEASE_STALE
	leaseLost   = 3 // LEASE_LOST
	leaseFailed = 4 // LEASE_FAILED: a command failed for one bulkhead of the call
)

// keySuffixes are the keys of one bulkhead, in the order common.lua reads
// KEYS.
var keySuffixes = [...]string{"s", "p", "i", "q1", "q2", "q3", "w", "wd", "t", "tq", "ex", "ed", "tw", "tm", "cl", "cx"}

// keyInfo is the index in keySuffixes of I, the leases' info by token.
const keyInfo = 2

// keysOf returns the ledger's keys of bulkhead name (Key).
func keysOf(prefix, name string) []string {
	ks := make([]string, len(keySuffixes))
	for i, s := range keySuffixes {
		ks[i] = Key(prefix, name, s)
	}
	return ks
}

// Key is the key suffix of bulkhead name under prefix:
// <prefix>{<name>}:<suffix>. Every key of a bulkhead, the ledger's and
// those of what the replicas share about it, has that one hash tag, so it
// lives in one Redis Cluster slot.
func Key(prefix, name, suffix string) string { return prefix + "{" + name + "}:" + suffix }
