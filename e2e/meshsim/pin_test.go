package meshsim

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int // nil: refused
	}{
		{"0", []int{0}},
		{"1", []int{1}},
		{"0-3", []int{0, 1, 2, 3}},
		{"0,2-3", []int{0, 2, 3}},
		{" 3, 1 ,1-2", []int{1, 2, 3}},
		{"2-2", []int{2}},
		{"", nil},
		{"a", nil},
		{"-1", nil},
		{"3-1", nil},
		{"0,", nil},
		{"0-", nil},
		{"0-1-2", nil},
	} {
		got, err := parseCPUList(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("parseCPUList(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestValidCPUsAndSame(t *testing.T) {
	if !validCPUs("") || !validCPUs("0-1") || validCPUs("x") {
		t.Error(`validCPUs: want "" and "0-1" valid, "x" not`)
	}
	if !sameCPUs("0-2", "2,0,1") || sameCPUs("0", "0-1") || sameCPUs("x", "x") {
		t.Error("sameCPUs: want 0-2 = 2,0,1, 0 != 0-1, and nothing the same as a bad list")
	}
}

func TestPinnedCommand(t *testing.T) {
	if got := pinned("", "/bin/d", "-a").Args; !slices.Equal(got, []string{"/bin/d", "-a"}) {
		t.Errorf("unpinned: %v", got)
	}
	if got := pinned("0", "/bin/d", "-a").Args; !slices.Equal(got, []string{"taskset", "-c", "0", "/bin/d", "-a"}) {
		t.Errorf("pinned: %v", got)
	}
}

// envPinSelfHelper makes the test binary TestPinSelf runs call pinSelf and
// print its threads' affinity.
const envPinSelfHelper = "MESHSIM_TEST_PIN_SELF"

// TestPinSelf runs this test binary pinning itself to CPU 0: pinSelf
// re-executes it under taskset, and every thread of the new process,
// those the runtime started before and after, is on CPU 0.
func TestPinSelf(t *testing.T) {
	if os.Getenv(envPinSelfHelper) != "" {
		return // the helper is TestPinSelfHelper
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	if _, err := threadCPUs(os.Getpid()); err != nil {
		t.Skip("no /proc:", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPinSelfHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envPinSelfHelper+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "affinity: 0 (all ") {
		t.Errorf("want every thread on CPU 0:\n%s", out)
	}
}

func TestPinSelfHelper(t *testing.T) {
	if os.Getenv(envPinSelfHelper) == "" {
		t.Skip("run by TestPinSelf")
	}
	if err := pinSelf("0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // a thread or two more, started after the pinning
		defer close(done)
		_ = exec.Command("true").Run()
	}()
	<-done
	a, err := threadCPUs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("affinity: %v", a)
}

func TestOnlineCPUs(t *testing.T) {
	cpus, err := onlineCPUs()
	if err != nil {
		t.Skip("no /sys:", err)
	}
	if list, _ := parseCPUList(cpus); !slices.Contains(list, 0) {
		t.Errorf("online CPUs %q: want CPU 0 among them", cpus)
	}
}
