package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBalanceRule checks single looks of the rule.
func TestBalanceRule(t *testing.T) {
	ws := func(counts ...[]int) []worker {
		var out []worker
		for i, c := range counts {
			out = append(out, worker{name: fmt.Sprintf("o%d", i), parts: c})
		}
		return out
	}
	cases := []struct {
		name          string
		me            string
		mine          []int
		others        []worker
		p             int
		take, release int // how many
	}{
		{"alone takes all", "a", nil, nil, 6, 6, 0},
		{"a third of six", "a", nil, ws([]int{0, 1}, []int{2, 3}), 6, 2, 0},
		{"above the share gives up", "a", []int{0, 1, 2, 3, 4, 5}, ws(nil, nil), 6, 0, 4},
		{"at the share holds", "a", []int{0, 1}, ws([]int{2, 3}, []int{4, 5}), 6, 0, 0},
		{"a dead worker's partitions", "a", []int{0, 1}, ws([]int{2, 3}), 6, 1, 0},
		// 7 over 3: floor 2, ceil 3. b has 1: the free one is b's.
		{"the needy go first", "a", []int{0, 1}, ws([]int{2, 3, 4}, []int{5}), 7, 0, 0},
		{"the needy take", "a", []int{0}, ws([]int{2, 3, 4}, []int{5, 1}), 7, 1, 0},
		// 7 over 3, counts 3,3,1, none free: the first by name of the
		// most gives one.
		{"the first of the most gives one", "a", []int{0, 1, 2}, ws([]int{3, 4, 5}, []int{6}), 7, 0, 1},
		{"the others of the most wait", "z", []int{0, 1, 2}, ws([]int{3, 4, 5}, []int{6}), 7, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pl := balance(c.me, c.mine, nil, c.others, c.p, nil)
			if len(pl.take) != c.take || len(pl.release) != c.release {
				t.Fatalf("take %v, release %v; want %d and %d", pl.take, pl.release, c.take, c.release)
			}
			for _, q := range pl.take {
				if slices.Contains(c.mine, q) {
					t.Fatalf("takes %d, which it holds", q)
				}
				for _, o := range c.others {
					if slices.Contains(o.parts, q) {
						t.Fatalf("takes %d, which %s holds", q, o.name)
					}
				}
			}
			for _, q := range pl.release {
				if !slices.Contains(c.mine, q) {
					t.Fatalf("gives up %d, which it does not hold", q)
				}
			}
		})
	}
}

// TestBalanceConverges runs the rule over workers that join and leave at
// random, each looking in turn at what the others hold, as the table
// would tell it: after the last change the shares settle within a few
// rounds at ⌊P/W⌋ or ⌈P/W⌉ each, no partition held twice, none left free.
func TestBalanceConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		p := 1 + rng.IntN(24)
		hold := map[string][]int{}
		names := []string{}
		add := func() {
			n := fmt.Sprintf("w%02d", len(names)+rng.IntN(100)*100)
			if _, ok := hold[n]; ok {
				return
			}
			hold[n] = nil
			names = append(names, n)
		}
		for range 1 + rng.IntN(4) {
			add()
		}
		round := func() {
			order := slices.Clone(names)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, me := range order {
				var others []worker
				for _, o := range names {
					if o != me {
						others = append(others, worker{name: o, parts: hold[o]})
					}
				}
				pl := balance(me, hold[me], nil, others, p, nil)
				for _, q := range pl.release {
					i := slices.Index(hold[me], q)
					hold[me] = slices.Delete(hold[me], i, i+1)
				}
				hold[me] = append(hold[me], pl.take...)
			}
		}
		for range 3 + rng.IntN(5) {
			switch rng.IntN(3) {
			case 0:
				add()
			case 1:
				if len(names) > 1 {
					i := rng.IntN(len(names))
					delete(hold, names[i]) // dead: its partitions are free
					names = slices.Delete(names, i, i+1)
				}
			}
			for range rng.IntN(3) {
				round()
			}
		}
		for range 2*p + 4 {
			round()
		}
		w := len(names)
		seen := map[int]string{}
		for _, n := range names {
			if c := len(hold[n]); c < p/w || c > (p+w-1)/w {
				t.Fatalf("trial %d: %d partitions over %d workers: %s holds %d: %v", trial, p, w, n, c, hold)
			}
			for _, q := range hold[n] {
				if o, ok := seen[q]; ok {
					t.Fatalf("trial %d: partition %d held by %s and %s", trial, q, o, n)
				}
				seen[q] = n
			}
		}
		if len(seen) != p {
			t.Fatalf("trial %d: %d of %d partitions held: %v", trial, len(seen), p, hold)
		}
	}
}
