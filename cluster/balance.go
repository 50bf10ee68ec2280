package cluster

import (
	"hash/fnv"
	"slices"
)

// The balancing rule. Every worker decides for itself, from the same facts
// (the job's live workers and the partitions each says it holds, as last
// read from the table of workers), what to take and what to give up; no
// worker takes a partition whose lease another holds, and a worker gives
// partitions up only by a clean stop, so that a hand-over re-reads nothing
// and the next owner starts at once.
//
// With P partitions and W live workers, a worker should hold ⌊P/W⌋ or
// ⌈P/W⌉ of them:
//
//   - a worker above ⌈P/W⌉ gives up the excess (a new worker joined);
//   - a worker below ⌈P/W⌉ takes partitions no live worker holds (a
//     worker died or gave them up), but leaves to the workers below
//     ⌊P/W⌋ as many as they need first;
//   - when none is free and a worker is below ⌊P/W⌋, one worker at the
//     most, the first by name among those that hold the most, gives one
//     up.
//
// It converges within a few intervals after the set of workers changes,
// and never moves a partition while the counts already differ by at most
// one.

// worker is what the table says of one live worker: its name and the
// partitions it holds or is taking.
type worker struct {
	name  string
	parts []int
}

// plan is what a worker does at one look.
type plan struct {
	take    []int // partitions to try to take, in order
	release []int // partitions to give up
	floor   int   // ⌊P/W⌋
	ceil    int   // ⌈P/W⌉
}

// balance returns what worker me does, holding mine, among the other live
// workers others, for p partitions. leaving are partitions me is giving up
// (they count as held, by no one). avoid reports partitions me must not
// take now (given up a moment ago, or waiting out a back-off).
func balance(me string, mine, leaving []int, others []worker, p int, avoid func(int) bool) plan {
	w := len(others) + 1
	pl := plan{floor: p / w, ceil: (p + w - 1) / w}
	held := make([]bool, p)
	for _, q := range append(slices.Clone(mine), leaving...) {
		held[q] = true
	}
	need := 0 // what the workers below the floor lack
	most, mostName := len(mine), me
	for _, o := range others {
		for _, q := range o.parts {
			if q >= 0 && q < p {
				held[q] = true
			}
		}
		if n := len(o.parts); n < pl.floor {
			need += pl.floor - n
		}
		if n := len(o.parts); n > most || n == most && o.name < mostName {
			most, mostName = n, o.name
		}
	}
	var free []int
	for _, q := range rotation(me, p) {
		if !held[q] {
			free = append(free, q)
		}
	}
	n := len(mine)
	switch {
	case n > pl.ceil:
		pl.release = releaseOrder(mine)[:n-pl.ceil]
	case n < pl.ceil && len(free) > 0:
		room := pl.ceil - n
		if n >= pl.floor {
			// The workers below the floor go first.
			room = min(room, max(len(free)-need, 0))
		}
		for _, q := range free {
			if room == 0 {
				break
			}
			if avoid != nil && avoid(q) {
				continue
			}
			pl.take = append(pl.take, q)
			room--
		}
	case n == pl.ceil && pl.ceil > pl.floor && len(free) == 0 && need > 0 && mostName == me:
		pl.release = releaseOrder(mine)[:1]
	}
	return pl
}

// releaseOrder returns mine in the order partitions are given up: the
// highest numbers first.
func releaseOrder(mine []int) []int {
	s := slices.Clone(mine)
	slices.Sort(s)
	slices.Reverse(s)
	return s
}

// rotation returns 0..p-1 starting at a place that depends on the worker's
// name, so that workers that look for free partitions at the same moment
// try different ones first.
func rotation(name string, p int) []int {
	h := fnv.New32a()
	h.Write([]byte(name))
	start := int(h.Sum32() % uint32(p))
	out := make([]int, p)
	for i := range out {
		out[i] = (start + i) % p
	}
	return out
}
