// Package control owns Bulkhead's run-time state: which bulkheads exist and
// with which settings, reconciling the configuration file (at start and on
// every reload) with changes made through the admin API.
//
// An admin Update overrides the file for that one bulkhead until (a) a
// reload changes the file's own entry for that bulkhead (a newer intent:
// the file wins), (b) Reset drops the override, or (c) the process restarts
// (overrides live in memory only). Reloads that leave that bulkhead's entry
// unchanged keep the override. An Update that makes the settings equal to
// the file's drops the override.
//
// Changes are applied in place: resizing keeps waiters and permits,
// removed bulkheads stop admitting while their permits are still released.
// Every change is logged with its actor and the settings before and after.
// Control is safe for concurrent use; its lock serialises reloads and admin
// changes and is never taken on the Check path.
package control
