package main

import (
	"errors"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// drawChart draws the ledger's throughput against the batch size, for both
// stores and their bare loops, to path (SVG or PNG by its extension).
func drawChart(path string, series []*chartSeries) error {
	if len(series) == 0 {
		return errors.New("no throughput measured: nothing to draw")
	}
	p := plot.New()
	p.Title.Text = "ledger, exactly once: throughput against batch size"
	p.X.Label.Text = "batch size (lines per durable save)"
	p.Y.Label.Text = "lines/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = 0
	p.Y.Tick.Marker = rateTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	colors := map[string]color.Color{
		"bbolt":  color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		"pebble": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
	for _, s := range series {
		xy := make(plotter.XYs, len(s.x))
		for i := range s.x {
			xy[i].X, xy[i].Y = s.x[i], s.y[i]
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		c := color.Color(color.Black)
		for k, v := range colors {
			if contains(s.name, k) {
				c = v
			}
		}
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if contains(s.name, "bare") {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			points.Shape = draw.BoxGlyph{}
		} else {
			points.Shape = draw.CircleGlyph{}
		}
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: 100, Y: 1e6}, {X: 10000, Y: 1e6}})
	if err != nil {
		return err
	}
	goal.Color = color.Gray{Y: 0x60}
	goal.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
	p.Add(goal)
	p.Legend.Add("goal: 1 M lines/s", goal)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

// rateTicks labels a rate axis in k and M.
type rateTicks struct{}

func (rateTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		v := ticks[i].Value
		switch {
		case v >= 1e6:
			ticks[i].Label = strconv.FormatFloat(v/1e6, 'f', -1, 64) + " M"
		case v >= 1e3:
			ticks[i].Label = strconv.FormatFloat(v/1e3, 'f', -1, 64) + " k"
		}
	}
	return ticks
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
