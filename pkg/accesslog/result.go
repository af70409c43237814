package accesslog

// EntryResult says what the server did with one access-log entry; its value
// is the metric label (Recorder.LogEntry).
type EntryResult string

// The results Recorder.LogEntry counts.
const (
	EntryReleased   EntryResult = "released"    // the entry's token released its permit
	EntryDuplicate  EntryResult = "duplicate"   // its permit was already released
	EntryUnknown    EntryResult = "unknown"     // a token the ledger does not know
	EntryNoToken    EntryResult = "no_token"    // an end entry without a permit token
	EntryNotEnd     EntryResult = "not_end"     // not a DownstreamEnd entry
	EntryTCPIgnored EntryResult = "tcp_ignored" // a TCP entry (not served)
)
