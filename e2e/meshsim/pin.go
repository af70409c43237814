package meshsim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Pinning the daemon and the simulator to CPUs of their own (-daemon-cpus,
// -sim-cpus) separates the daemon's figures from the simulator's load on a
// small machine. Both go through taskset(1), which sets its own affinity
// and then execs the command, so that every thread the Go runtime starts
// later inherits it: sched_setaffinity from inside a running Go process
// pins only the calling thread, and the runtime's other threads (and those
// they start) keep the old mask.

// ErrPin is wrapped by the errors of pinning to CPUs.
var ErrPin = errors.New("pin")

// envPinned marks a simulator that pinSelf re-executed under taskset: its
// value is the CPU list it asked for, so that it re-executes once.
const envPinned = "MESHSIM_PINNED_CPUS"

// parseCPUList parses a CPU list as taskset -c takes it and the kernel
// writes it (Cpus_allowed_list): CPUs and ranges, comma-separated ("1",
// "0-3", "0,2-3"). It returns the CPUs sorted, each once.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%w: CPU list %q: %q is no CPU or range (want e.g. 1, 0-3, 0,2-3)", ErrPin, s, f)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// validCPUs reports whether s is "" (no pinning) or a CPU list.
func validCPUs(s string) bool {
	_, err := parseCPUList(s)
	return s == "" || err == nil
}

// sameCPUs reports whether two CPU lists name the same CPUs.
func sameCPUs(a, b string) bool {
	x, errX := parseCPUList(a)
	y, errY := parseCPUList(b)
	return errX == nil && errY == nil && slices.Equal(x, y)
}

// onlineCPUs is the machine's CPUs, as the kernel lists them.
func onlineCPUs() (string, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPin, err)
	}
	cpus := strings.TrimSpace(string(b))
	if !validCPUs(cpus) {
		return "", fmt.Errorf("%w: /sys/devices/system/cpu/online: %q", ErrPin, cpus)
	}
	return cpus, nil
}

// pinned is the command that runs name with args on cpus ("": unpinned).
func pinned(cpus, name string, args ...string) *exec.Cmd {
	if cpus == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
}

// pinSelf puts every thread of this process on cpus ("": leaves it). If
// they are not all there already, it re-executes this program with its
// arguments under taskset -c cpus and does not return; the new process
// finds itself pinned and carries on. Call it before the work starts.
func pinSelf(cpus string) error {
	if cpus == "" {
		return nil
	}
	got, err := threadCPUs(os.Getpid())
	if err != nil {
		return err
	}
	if len(got.Lists) == 1 && sameCPUs(got.Lists[0], cpus) {
		return nil
	}
	if os.Getenv(envPinned) == cpus {
		return fmt.Errorf("%w: re-executed under taskset -c %s, the threads are on %v", ErrPin, cpus, got.Lists)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("%w: -sim-cpus needs taskset: %w", ErrPin, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPin, err)
	}
	argv := append([]string{"taskset", "-c", cpus, self}, os.Args[1:]...)
	err = syscall.Exec(taskset, argv, append(os.Environ(), envPinned+"="+cpus))
	return fmt.Errorf("%w: exec taskset: %w", ErrPin, err)
}

// Affinity is where a process's threads may run: the distinct CPU lists
// of its threads (one when they all share it) and how many threads it has.
type Affinity struct {
	Lists   []string `json:"cpu_lists"`
	Threads int      `json:"threads"`
}

// String is "1 (all 14 threads)", or each list, for threads that differ.
func (a Affinity) String() string {
	if len(a.Lists) == 1 {
		return fmt.Sprintf("%s (all %d threads)", a.Lists[0], a.Threads)
	}
	return fmt.Sprintf("%s (%d threads, not all alike)", strings.Join(a.Lists, " / "), a.Threads)
}

// threadCPUs reads the affinity of every thread of process pid
// (Cpus_allowed_list in /proc/PID/task/TID/status).
func threadCPUs(pid int) (Affinity, error) {
	var a Affinity
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil {
		return a, fmt.Errorf("%w: %w", ErrPin, err)
	}
	if len(tasks) == 0 {
		return a, fmt.Errorf("%w: no threads of process %d in /proc", ErrPin, pid)
	}
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended
		}
		a.Threads++
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if l := strings.TrimSpace(rest); !slices.Contains(a.Lists, l) {
					a.Lists = append(a.Lists, l)
				}
			}
		}
	}
	slices.Sort(a.Lists)
	return a, nil
}
