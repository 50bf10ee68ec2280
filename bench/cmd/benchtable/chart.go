package main

import (
	"errors"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// drawChart draws the ledger rows against the number of accounts to path
// (SVG, or PNG for a name ending in .png): on the left the lines/s of ledger run and of the naive program's
// two variants, on the right the ratios of ledger run to each.
func drawChart(path string, points []ledgerPoint) error {
	if len(points) == 0 {
		return errors.New("no ledger row measured: nothing to draw")
	}
	slices.SortFunc(points, func(a, b ledgerPoint) int { return a.accounts - b.accounts })
	var stores []string
	for _, p := range points {
		if !slices.Contains(stores, p.store) {
			stores = append(stores, p.store)
		}
	}
	rates := newAccountsPlot("lines/s (log)", "ledger run and the naive program")
	rates.Y.Scale = plot.LogScale{}
	rates.Y.Tick.Marker = rateTicks{log: true}
	ratios := newAccountsPlot("ledger run / naive program", "ratio (goal: at least 1)")
	ratios.Y.Min = 0
	for si, st := range stores {
		c := storeColor(si)
		var tm, tc, mp, bd, rm, rb plotter.XYs
		for _, p := range points {
			if p.store != st {
				continue
			}
			x := float64(p.accounts)
			if p.haveTidemark {
				tm = append(tm, plotter.XY{X: x, Y: p.tidemark})
			}
			if p.haveMap {
				mp = append(mp, plotter.XY{X: x, Y: p.map_})
			}
			if p.haveBnd {
				bd = append(bd, plotter.XY{X: x, Y: p.bounded})
			}
			if p.haveCached {
				tc = append(tc, plotter.XY{X: x, Y: p.cached})
			}
			// Against the map: ledger run with a cache for every balance
			// where that is more than the default budget.
			switch {
			case p.haveCached && p.haveMap:
				rm = append(rm, plotter.XY{X: x, Y: p.cached / p.map_})
			case p.haveTidemark && p.haveMap:
				rm = append(rm, plotter.XY{X: x, Y: p.tidemark / p.map_})
			}
			if p.haveTidemark && p.haveBnd {
				rb = append(rb, plotter.XY{X: x, Y: p.tidemark / p.bounded})
			}
		}
		for _, s := range []struct {
			p    *plot.Plot
			xy   plotter.XYs
			name string
			dash []vg.Length
			g    draw.GlyphDrawer
		}{
			{rates, tm, "ledger run, " + st, nil, draw.CircleGlyph{}},
			{rates, tc, "ledger run, cache for every balance, " + st, []vg.Length{vg.Points(6), vg.Points(2)}, draw.RingGlyph{}},
			{rates, mp, "naive map, " + st, []vg.Length{vg.Points(4), vg.Points(3)}, draw.BoxGlyph{}},
			{rates, bd, "naive bounded, " + st, []vg.Length{vg.Points(1), vg.Points(2)}, draw.TriangleGlyph{}},
			{ratios, rm, "/ naive map, " + st, []vg.Length{vg.Points(4), vg.Points(3)}, draw.BoxGlyph{}},
			{ratios, rb, "/ naive bounded, " + st, []vg.Length{vg.Points(1), vg.Points(2)}, draw.TriangleGlyph{}},
		} {
			if len(s.xy) == 0 {
				continue
			}
			line, pts, err := plotter.NewLinePoints(s.xy)
			if err != nil {
				return err
			}
			line.Color, pts.Color = c, c
			line.Width = vg.Points(1.5)
			line.Dashes = s.dash
			pts.Shape = s.g
			s.p.Add(line, pts)
			s.p.Legend.Add(s.name, line, pts)
		}
	}
	lo, hi := float64(points[0].accounts), float64(points[len(points)-1].accounts)
	goal, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 1}, {X: hi, Y: 1}})
	if err != nil {
		return err
	}
	goal.Color = color.Gray{Y: 0x60}
	goal.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
	ratios.Add(goal)
	ratios.Legend.Add("goal", goal)

	const w, h = 12 * vg.Inch, 5 * vg.Inch
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if strings.HasSuffix(path, ".png") {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		canvas = vgsvg.New(w, h)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(12), PadLeft: vg.Points(6), PadRight: vg.Points(6), PadTop: vg.Points(6), PadBottom: vg.Points(6)}
	cs := plot.Align([][]*plot.Plot{{rates, ratios}}, tiles, dc)
	rates.Draw(cs[0][0])
	ratios.Draw(cs[0][1])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

func newAccountsPlot(ylabel, title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "accounts (log)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

func storeColor(i int) color.Color {
	cs := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	return cs[i%len(cs)]
}

// rateTicks labels a rate axis in k and M; on a log axis, at powers of
// ten.
type rateTicks struct{ log bool }

func (rt rateTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	if rt.log {
		ticks = plot.LogTicks{Prec: -1}.Ticks(min, max)
	} else {
		ticks = plot.DefaultTicks{}.Ticks(min, max)
	}
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
