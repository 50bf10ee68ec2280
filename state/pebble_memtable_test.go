package state

import (
	"testing"
)

// TestPebbleMemTableSize: a store's Pebble memtables are an eighth of its
// block cache, at least Pebble's default (4 MiB) and at most 64 MiB.
func TestPebbleMemTableSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cache int64
		want  uint64
	}{
		{0, 4 << 20},          // the default budget: a block cache of 16 MiB
		{-1, 4 << 20},         // no budget: Pebble's own block cache of 8 MiB
		{64 << 20, 4 << 20},   // a block cache of 32 MiB
		{512 << 20, 32 << 20}, // 256 MiB
		{699400192, 43712512}, // every balance of 1,000,000 accounts (bench/)
		{4 << 30, 64 << 20},
	} {
		o := &Options{CacheSize: c.cache}
		if got := o.pebbleMemTableSize(); got != c.want {
			t.Errorf("CacheSize %d: memtables of %d bytes, want %d", c.cache, got, c.want)
		}
	}
}

// TestPebbleLargeSavesStayInTheMemtable: with memtables of Pebble's
// default (4 MiB), a save of more than about 10,000 keys was larger than
// half a memtable, which Pebble flushes to a table of its own in level 0
// (a large batch): each such save a table, twelve of them a write stall
// and a compaction of the level below. With a budget whose block cache
// gives the memtables room, eight saves of 20,000 keys stay in the
// memtables until one fills.
func TestPebbleLargeSavesStayInTheMemtable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Pebble, open: OpenPebble}
	o := testOpts()
	o.CacheSize = 512 << 20
	s := mustOpen(t, be, dir, o)
	defer s.Close()
	const saves, keys = 8, 20000
	for i := range saves {
		addAccounts(t, s, i+1, i*keys, (i+1)*keys)
		if err := s.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	m := s.(*nsStore).c.rawEngine().(*pebbleEngine).db.Metrics()
	if m.Flush.Count > 2 {
		t.Fatalf("%d saves of %d keys made %d flushes (%d tables in level 0): the saves did not stay in the memtables",
			saves, keys, m.Flush.Count, m.Levels[0].TablesCount)
	}
	if got := sumInt64s(t, s, "acct"); got != saves*keys {
		t.Fatalf("sum of the accounts %d, want %d", got, saves*keys)
	}
}
