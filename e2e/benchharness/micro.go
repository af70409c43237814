package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Micro is one Go benchmark, over -count runs (medians).
type Micro struct {
	Package     string    `json:"package"`
	Name        string    `json:"name"` // without the -GOMAXPROCS suffix
	Runs        int       `json:"runs"`
	NsPerOp     float64   `json:"ns_per_op"`
	AllNsPerOp  []float64 `json:"all_ns_per_op"`
	BytesPerOp  float64   `json:"bytes_per_op"`
	AllocsPerOp float64   `json:"allocs_per_op"`
}

// microPackages hold the micro-benchmarks the report reads.
var microPackages = []string{"./pkg/bulkhead", "./pkg/permit", "./pkg/authz", "./pkg/accesslog"}

// runMicro runs every benchmark of microPackages, one package at a time
// (-p 1: two benchmarks sharing two cores would measure each other), and
// copies go test's output to w.
func runMicro(ctx context.Context, plan Plan, w io.Writer) ([]Micro, error) {
	args := append([]string{"test", "-p", "1", "-run", "^$", "-bench", ".", "-benchmem",
		"-benchtime", plan.BenchTime, "-count", strconv.Itoa(plan.BenchCount)}, microPackages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, w)
	cmd.Stderr = w
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return parseBench(&out)
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads go test -bench output: "pkg:" lines name the package of
// the benchmark lines that follow.
func parseBench(r io.Reader) ([]Micro, error) {
	type key struct{ pkg, name string }
	runs := map[key][][3]float64{}
	var order []key
	pkg := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var v [3]float64 // ns/op, B/op, allocs/op
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			x, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %w", line, err)
			}
			switch f[i+1] {
			case "ns/op":
				v[0] = x
			case "B/op":
				v[1] = x
			case "allocs/op":
				v[2] = x
			}
		}
		k := key{pkg, m[1]}
		if _, seen := runs[k]; !seen {
			order = append(order, k)
		}
		runs[k] = append(runs[k], v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]Micro, 0, len(order))
	for _, k := range order {
		rs := runs[k]
		col := func(i int) []float64 {
			c := make([]float64, len(rs))
			for j, r := range rs {
				c[j] = r[i]
			}
			return c
		}
		out = append(out, Micro{Package: k.pkg, Name: k.name, Runs: len(rs), NsPerOp: median(col(0)),
			AllNsPerOp: col(0), BytesPerOp: median(col(1)), AllocsPerOp: median(col(2))})
	}
	return out, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// findMicro returns the benchmark named name (any package), or nil.
func findMicro(ms []Micro, name string) *Micro {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}

// profileHotPath CPU-profiles BenchmarkHotPath/server=bulkhead (one
// request's whole life in the daemon, in process, gRPC client included)
// and returns pprof's views: the top by cumulative time, then the
// daemon's own packages only. The profile and the test binary stay in dir.
func profileHotPath(ctx context.Context, dir, benchtime string) (string, error) {
	prof, bin := filepath.Join(dir, "hotpath.prof"), filepath.Join(dir, "accesslog.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkHotPath$/^server=bulkhead$",
		"-benchtime", benchtime, "-cpuprofile", prof, "-o", bin, "./pkg/accesslog")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("profile: %w\n%s", err, out)
	}
	var top bytes.Buffer
	for _, view := range [][]string{
		{"-top", "-cum", "-nodecount", "35"},
		{"-top", "-cum", "-show", `bulkhead-mesh/bulkhead/pkg/(authz|accesslog|permit|bulkhead|metrics)\.`, "-nodecount", "30"},
	} {
		args := append(append([]string{"tool", "pprof"}, view...), bin, prof)
		out, err := exec.CommandContext(ctx, "go", args...).Output()
		if err != nil {
			return "", fmt.Errorf("go tool pprof %s: %w", strings.Join(view, " "), err)
		}
		fmt.Fprintf(&top, "$ go tool pprof %s accesslog.test hotpath.prof\n%s\n", strings.Join(view, " "), trimPprofHeader(out))
	}
	return top.String(), nil
}

// trimPprofHeader drops pprof's File/Build ID/Type/Time lines, which
// change on every run.
func trimPprofHeader(b []byte) string {
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		out.WriteString(line)
	}
	return out.String()
}
