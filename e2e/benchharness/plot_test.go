package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run without an open loop (-open-window negative, -loops=false) has
// nothing for the log-scale plot: no panic, no plot, and none left over
// from an earlier run in the same folder.
func TestPlotWithoutOpenLoop(t *testing.T) {
	closedOnly := &Results{
		Configs: []ConfigInfo{{Name: Floor}, {Name: Noop}},
		Plan:    Plan{Rounds: 1}, // -open-window negative: no fractions
		Phases:  []Phase{closedPhase(Floor, 1, 30000, 90), closedPhase(Noop, 1, 7000, 190)},
	}
	// Open-loop phases that completed nothing (all failed) draw nothing
	// either.
	served := openPhase(Noop, 1, 0.5, 190, 300, 2, nil)
	served.Latency = Summary{}
	failed := &Results{Configs: closedOnly.Configs, Plan: Plan{Fractions: []float64{0.5}}, Phases: []Phase{served}}

	for name, r := range map[string]*Results{"no open loop": closedOnly, "no open-loop request served": failed} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			plot := filepath.Join(dir, "latency.png")
			if err := writePlot(plot, r); !errors.Is(err, errNothingToPlot) {
				t.Fatalf("writePlot = %v, want errNothingToPlot", err)
			}
			if _, err := os.Stat(plot); !os.IsNotExist(err) {
				t.Fatalf("writePlot wrote %s: %v", plot, err)
			}

			if err := os.WriteFile(plot, []byte("an earlier run's plot"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := writeResults(dir, r); err != nil {
				t.Fatalf("writeResults = %v", err)
			}
			if _, err := os.Stat(plot); !os.IsNotExist(err) {
				t.Errorf("an earlier run's latency.png is left beside this run's results: %v", err)
			}
			md, err := os.ReadFile(filepath.Join(dir, "results.md"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), "no open loop in this run: no latency.png") {
				t.Errorf("results.md does not say why there is no plot")
			}
		})
	}
}

func TestPlotDraws(t *testing.T) {
	tests := map[string][]float64{
		"every rate":      {0.25, 0.5, 0.75},
		"a single rate":   {0.5}, // one X value: its range must stay positive
		"a rate of 1/s":   {0.001},
		"latencies of 0s": {0.25, 0.5},
	}
	for name, fractions := range tests {
		t.Run(name, func(t *testing.T) {
			r := &Results{Configs: []ConfigInfo{{Name: Floor}, {Name: Bulkhead}}, Plan: Plan{Fractions: fractions}}
			for _, f := range fractions {
				for _, c := range r.Configs {
					p := openPhase(c.Name, 1, f, 100, 200, 2*f, nil)
					p.Latency = Summary{N: 10, P50Ms: f, P90Ms: f, P99Ms: 2 * f, P999Ms: 3 * f}
					if name == "latencies of 0s" {
						p.Latency = Summary{N: 10}
					}
					r.Phases = append(r.Phases, p)
				}
			}
			plot := filepath.Join(t.TempDir(), "latency.png")
			if err := writePlot(plot, r); err != nil {
				t.Fatalf("writePlot = %v", err)
			}
			if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
				t.Fatalf("latency.png: %v, %v", fi, err)
			}
		})
	}
}

func TestTicks125(t *testing.T) {
	got := ticks125{}.Ticks(0.8, 60)
	var labels []string
	for _, tk := range got {
		labels = append(labels, tk.Label)
	}
	if s := strings.Join(labels, " "); s != "1 2 5 10 20 50" {
		t.Errorf("ticks = %q", s)
	}
	for _, lohi := range [][2]float64{{0, 10}, {-1, 1}, {1, 0}} {
		if ts := (ticks125{}).Ticks(lohi[0], lohi[1]); ts != nil {
			t.Errorf("Ticks(%v, %v) = %v, want none (not a log range)", lohi[0], lohi[1], ts)
		}
	}
}
