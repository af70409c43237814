package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// errNothingToPlot is returned by writePlot when the run has no open-loop
// latency to draw (-open-window negative, -loops=false, or no open-loop
// phase that completed a request): a log scale needs positive values.
var errNothingToPlot = errors.New("no open-loop latency to plot")

// hasOpenLatency reports whether r has an open-loop phase, among those the
// plot draws (the reported round of each rate), that completed a request.
func (r *Results) hasOpenLatency() bool {
	for _, c := range r.Configs {
		for _, base := range []string{BaseCommon, BaseFloor} {
			for _, f := range r.Plan.Fractions {
				if ph := r.open(c.Name, base, f); ph != nil && ph.Latency.N > 0 && ph.TargetRPS > 0 {
					return true
				}
			}
		}
	}
	return false
}

// writePlot draws latency.png: one panel per percentile (p50, p90, p99,
// p99.9), latency against the offered rate (every open-loop rate of both
// bases, the reported round of each), one line per configuration. Without
// anything to draw it writes nothing and returns errNothingToPlot.
func writePlot(path string, r *Results) error {
	if !r.hasOpenLatency() {
		return errNothingToPlot
	}
	quantiles := []struct {
		name string
		get  func(Summary) float64
	}{
		{"p50", func(s Summary) float64 { return s.P50Ms }},
		{"p90", func(s Summary) float64 { return s.P90Ms }},
		{"p99", func(s Summary) float64 { return s.P99Ms }},
		{"p99.9", func(s Summary) float64 { return s.P999Ms }},
	}
	plots := [][]*plot.Plot{make([]*plot.Plot, 2), make([]*plot.Plot, 2)}
	for i, q := range quantiles {
		pl := plot.New()
		pl.Title.Text = q.name + " latency, from intended send time"
		pl.X.Label.Text = "offered load, req/s (open loop, log scale)"
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = ticks125{}
		pl.Y.Label.Text = "ms (log scale)"
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = ticks125{}
		pl.Add(plotter.NewGrid())
		lo, hi := math.Inf(1), 0.0   // latency range
		xlo, xhi := math.Inf(1), 0.0 // rate range
		for ci, c := range r.Configs {
			var pts plotter.XYs
			for _, base := range []string{BaseCommon, BaseFloor} {
				for _, f := range r.Plan.Fractions {
					// The reported round (the median one) at each rate.
					if ph := r.open(c.Name, base, f); ph != nil && ph.Latency.N > 0 && ph.TargetRPS > 0 {
						y := max(q.get(ph.Latency), 0.01) // log scale: keep it positive
						pts = append(pts, plotter.XY{X: ph.TargetRPS, Y: y})
						lo, hi = min(lo, y), max(hi, y)
						xlo, xhi = min(xlo, ph.TargetRPS), max(xhi, ph.TargetRPS)
					}
				}
			}
			slices.SortFunc(pts, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			line.Color = plotutil.Color(ci)
			line.Dashes = plotutil.Dashes(ci)
			line.Width = vg.Points(1.5)
			points.Color = plotutil.Color(ci)
			points.Shape = plotutil.Shape(ci)
			points.Radius = vg.Points(3)
			pl.Add(line, points)
			pl.Legend.Add(c.Name, line, points)
		}
		if hi > 0 {
			// Set, not left to gonum: a single rate would make its X range
			// [rate-1, rate+1], not positive below 1 req/s.
			pl.Y.Min, pl.Y.Max = lo/1.3, hi*1.6 // room for the legend
			pl.X.Min, pl.X.Max = xlo/1.2, xhi*1.2
		}
		pl.Legend.Top, pl.Legend.Left = true, true
		pl.Legend.Padding = vg.Points(2)
		plots[i/2][i%2] = pl
	}
	const width, height = 30 * vg.Centimeter, 22 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %w", err)
	}
	return f.Close()
}

// ticks125 marks a log axis at 1, 2 and 5 times each power of ten.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 || hi <= 0 || math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return nil // not a log axis's range
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
		}
	}
	return ts
}
