package redisledger

import (
	"regexp"
	"strconv"
	"testing"
)

// The result codes are named on both sides of the Lua/Go boundary, one Go
// constant per Lua constant, with the same value.
func TestResultCodesMatchLua(t *testing.T) {
	goCodes := map[string]int{
		"ACQUIRE_GRANTED": acquireGranted, "ACQUIRE_QUEUED": acquireQueued, "ACQUIRE_REJECTED": acquireRejected,
		"RELEASE_RELEASED": releaseReleased, "RELEASE_DUPLICATE": releaseDuplicate, "RELEASE_EXPIRED": releaseExpired,
		"RELEASE_UNKNOWN": releaseUnknown, "RELEASE_WAITER": releaseWaiter, "RELEASE_FORWARDED": releaseForwarded,
		"RENEW_RENEWED": renewRenewed, "RENEW_ADOPTED_EXPIRED": renewAdoptedExpired,
		"RENEW_ADOPTED_UNKNOWN": renewAdoptedUnknown, "RENEW_LATE": renewLate, "RENEW_UNKNOWN": renewUnknown, "RENEW_FORWARDED": renewForwarded,
		"LEAVE_LEFT": leaveLeft, "LEAVE_KEPT": leaveKept, "LEAVE_GIVEN_BACK": leaveGivenBack, "LEAVE_NOT_FOUND": leaveNotFound,
		"LEASE_HELD": leaseHeld, "LEASE_STALE": leaseStale, "LEASE_LOST": leaseLost,
		"LEASE_FAILED": leaseFailed,
	}
	re := regexp.MustCompile(`(?m)^local ((?:ACQUIRE|RELEASE|RENEW|LEAVE|LEASE)_[A-Z_]+) = (\d+)$`)
	luaCodes := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(read("common.lua"), -1) {
		luaCodes[m[1]], _ = strconv.Atoi(m[2])
	}
	for name, v := range goCodes {
		if lv, ok := luaCodes[name]; !ok || lv != v {
			t.Errorf("%s: Go %d, common.lua %d (present %v)", name, v, lv, ok)
		}
	}
	for name := range luaCodes {
		if _, ok := goCodes[name]; !ok {
			t.Errorf("common.lua's %s has no Go constant", name)
		}
	}
}

// The wake-up messages are named on both sides too.
func TestWakeMessagesMatchLua(t *testing.T) {
	goMsgs := map[string]wakeMsg{"WAKE_GRANTED": wakeGranted, "WAKE_SHED": wakeShed, "WAKE_QUEUE_FULL": wakeQueueFull, "WAKE_RECALL": wakeRecall,
		"WAKE_ENDED": wakeEnded, "WAKE_HEARTBEAT": wakeHeartbeat}
	re := regexp.MustCompile(`(?m)^local (WAKE_[A-Z_]+) = '(.)'$`)
	luaMsgs := map[string]wakeMsg{}
	for _, m := range re.FindAllStringSubmatch(read("common.lua"), -1) {
		luaMsgs[m[1]] = wakeMsg(m[2][0])
	}
	if len(luaMsgs) != len(goMsgs) {
		t.Errorf("common.lua %v, Go %v", luaMsgs, goMsgs)
	}
	for name, v := range goMsgs {
		if luaMsgs[name] != v {
			t.Errorf("%s: Go %q, common.lua %q", name, v, luaMsgs[name])
		}
	}
}
