package main

import (
	"errors"
	"image/color"

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
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
