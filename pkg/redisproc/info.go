package redisproc

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Info is what one INFO commandstats cpu said: every command's calls
// (commands run inside scripts included) and time, and the server's CPU
// time (used_cpu_sys + used_cpu_user, the whole process).
type Info struct {
	Calls map[string]int64 // by command: "evalsha", "hset"...
	Usec  map[string]int64 // by command: the time Redis spent running it, microseconds
	CPU   time.Duration
}

// IsScript reports whether cmd (a commandstats name) runs a script.
func IsScript(cmd string) bool {
	return slices.Contains([]string{"evalsha", "eval", "evalsha_ro", "eval_ro"}, cmd)
}

// Scripts is the calls of every command that runs a script.
func (i Info) Scripts() int64 {
	var n int64
	for cmd, calls := range i.Calls {
		if IsScript(cmd) {
			n += calls
		}
	}
	return n
}

// ScriptUsec is the time Redis spent running scripts (the commands they
// ran included), in microseconds: wall time, as commandstats measures it.
func (i Info) ScriptUsec() int64 {
	var n int64
	for cmd, usec := range i.Usec {
		if IsScript(cmd) {
			n += usec
		}
	}
	return n
}

// ParseInfo reads the answer of INFO commandstats cpu: lines
// "cmdstat_NAME:calls=N,usec=U,...", "used_cpu_sys:S.ssssss" and
// "used_cpu_user:S.ssssss"; section headers, blank lines and other fields
// are skipped. A command name may hold '|' (subcommands: "client|setname").
func ParseInfo(text string) (Info, error) {
	r := Info{Calls: map[string]int64{}, Usec: map[string]int64{}}
	var sys, user bool
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(key, "cmdstat_"):
			calls, usec := "", ""
			for f := range strings.SplitSeq(val, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					calls = v
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					usec = v
				}
			}
			n, err := strconv.ParseInt(calls, 10, 64)
			u, uerr := strconv.ParseInt(usec, 10, 64)
			if err != nil || uerr != nil || n < 0 || u < 0 {
				return Info{}, fmt.Errorf("%w INFO: bad %q", ErrRedis, line)
			}
			cmd := strings.TrimPrefix(key, "cmdstat_")
			r.Calls[cmd], r.Usec[cmd] = n, u
		case key == "used_cpu_sys" || key == "used_cpu_user":
			secs, err := strconv.ParseFloat(val, 64)
			if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0 {
				return Info{}, fmt.Errorf("%w INFO: bad %q", ErrRedis, line)
			}
			r.CPU += time.Duration(secs * float64(time.Second))
			sys, user = sys || key == "used_cpu_sys", user || key == "used_cpu_user"
		}
	}
	if !sys || !user {
		return Info{}, fmt.Errorf("%w INFO: no used_cpu_sys or used_cpu_user", ErrRedis)
	}
	return r, nil
}
