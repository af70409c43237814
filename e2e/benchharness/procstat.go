package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// errProcStat is wrapped by errors reading /proc.
var errProcStat = errors.New("proc stat")

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// cpuTime returns the user+system CPU time process pid has used so far
// (its threads included; children it waited for are not).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errProcStat, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime, fields 14 and 15 of /proc/PID/stat.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no ')' in %q", errProcStat, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: %d fields after the command", errProcStat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errProcStat, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// memory returns the resident set size now and its peak (VmRSS, VmHWM).
func memory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
	}
	return parseStatusMemory(b)
}

// parseStatusMemory reads VmRSS and VmHWM (in kB) from /proc/PID/status.
func parseStatusMemory(b []byte) (rss, peak int64, err error) {
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%w: bad %s line %q", errProcStat, name, line)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
		}
		if name == "VmRSS" {
			rss = v << 10
		} else {
			peak = v << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("%w: no VmRSS or VmHWM", errProcStat)
	}
	return rss, peak, nil
}

// machineCPU returns the time all CPUs spent busy (user, nice, system, irq,
// softirq) and stolen by the hypervisor, from the first line of /proc/stat.
func machineCPU() (busy, steal time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
	}
	return parseMachineCPU(b)
}

func parseMachineCPU(b []byte) (busy, steal time.Duration, err error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("%w: /proc/stat starts %q", errProcStat, line)
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
		}
	}
	tick := time.Second / clockTicks
	return time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * tick, time.Duration(v[7]) * tick, nil
}

// threadsCPU returns the CPU time the live threads of process pid have used
// so far, in nanoseconds: the sum of the first field of
// /proc/PID/task/*/schedstat. cpuTime's utime+stime come in 10 ms ticks,
// too coarse for a window in which a process uses a few hundred
// milliseconds (the heartbeat phase's long requests: about 100 requests a
// second). Threads that exit between two readings take their time with
// them; the daemon, Envoy and the harness keep theirs for their lifetime.
func threadsCPU(pid int) (time.Duration, int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
	}
	var total time.Duration
	var runs int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited since ReadDir
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", errProcStat, err)
		}
		d, n, err := parseSchedstat(b)
		if err != nil {
			return 0, 0, err
		}
		total += d
		runs += n
	}
	return total, runs, nil
}

// parseSchedstat reads /proc/PID/task/TID/schedstat: the time the thread
// spent on a CPU, in nanoseconds, and how many times it was run (its
// timeslices: each wake-up of an event loop is at least one).
func parseSchedstat(b []byte) (time.Duration, int64, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, 0, fmt.Errorf("%w: schedstat %q", errProcStat, b)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, 0, fmt.Errorf("%w: schedstat %q", errProcStat, b)
	}
	runs, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || runs < 0 {
		return 0, 0, fmt.Errorf("%w: schedstat %q", errProcStat, b)
	}
	return time.Duration(ns), runs, nil
}
