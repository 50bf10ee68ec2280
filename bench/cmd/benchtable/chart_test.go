package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The chart draws the ledger rows of two stores, one of them with a
// variant missing, as SVG and as PNG.
func TestDrawChart(t *testing.T) {
	pts := []ledgerPoint{
		{store: "bbolt", accounts: 20, tidemark: 2e6, map_: 1.5e6, bounded: 1.4e6, haveTidemark: true, haveMap: true, haveBnd: true},
		{store: "bbolt", accounts: 10_000_000, tidemark: 2e5, map_: 1e5, bounded: 5e4, haveTidemark: true, haveMap: true, haveBnd: true},
		{store: "pebble", accounts: 20, tidemark: 2e6, map_: 1.5e6, haveTidemark: true, haveMap: true},
	}
	dir := t.TempDir()
	for _, name := range []string{"c.svg", "c.png"} {
		path := filepath.Join(dir, name)
		if err := drawChart(path, pts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
			t.Fatalf("%s: %v, %v", name, fi, err)
		}
	}
	if err := drawChart(filepath.Join(dir, "none.svg"), nil); err == nil {
		t.Fatal("a chart of no points drew")
	}
}
