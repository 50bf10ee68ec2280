package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The check of a bbolt file. bbolt trusts its pages: a leaf whose element
// count was damaged hides its last keys, a branch page whose child pointer
// or key was damaged sends lookups astray, and a key not found reads as
// absent, which a value checksum cannot see. The check walks the tree of
// the committed meta page from its root, level by level (in chunks of at
// most walkChunk pages of a level, see walkLevel), each chunk's pages read
// in the order of their place in the file, and holds every
// page to what bbolt writes (go.etcd.io/bbolt v1.4, node.write and
// common.WriteInodeToPage):
//
//   - the page's header names its own id, is a branch or a leaf, and lies
//     below the high-water mark; no page is reached twice;
//   - its elements' data is packed behind their headers, in order, with no
//     gap, and ends in the page's last block (its overflow count is the
//     one bbolt gives a page of that size): a damaged count, position or
//     size breaks the packing;
//   - its keys are in order, and within the range of keys its parent's
//     element gives it;
//   - every value of the store's bucket carries its checksum (a key damaged
//     into another key in order no longer matches it);
//   - every page of the file is reached, free (in the freelist), a meta
//     page or the freelist's: exactly one of them, so that a damaged
//     freelist cannot hand a page in use to the next commit.
//
// It reads the file with pread, not through bbolt's memory map, so a file
// shorter than its pages say is an error, not a fault.

// bbolt's page format (go.etcd.io/bbolt/internal/common).
const (
	bbHeader     = 16 // id u64, flags u16, count u16, overflow u32
	bbElem       = 16 // leaf: flags, pos, ksize, vsize u32; branch: pos, ksize u32, pgid u64
	bbBranch     = 0x01
	bbLeaf       = 0x02
	bbMeta       = 0x04
	bbFreelist   = 0x10
	bbBucketFlag = 0x01
	bbBucketHdr  = 16 // root pgid u64, sequence u64
	bbMagic      = 0xED0CDAED
	bbVersion    = 2
	bbNoFreelist = ^uint64(0)
	// bbMetaSum is the offset of the checksum in the meta, which covers
	// the bytes before it.
	bbMetaSum = 56
)

// bbolt writes its pages in the machine's byte order.
var bbOrder = binary.NativeEndian

// errCheckStopped ends a check the store's Close stopped.
var errCheckStopped = errors.New("state: check of the bbolt file stopped")

// boltCheck is one check of a bbolt file.
type boltCheck struct {
	e    *boltEngine // for its names
	f    io.ReaderAt
	ps   uint64 // page size
	hwm  uint64 // page count
	seen []uint64
	// value checks a value of the store's bucket (its checksum); nil
	// checks none.
	value func(k, v []byte) error
	stop  <-chan struct{}
	// win is a window of the file read ahead: win holds the bytes from
	// winOff on.
	win    []byte
	winOff uint64
	pages  int // pages read, for the note
	els    []bbElement
	key    []byte // a table's key, for value
	// chunk is the most references of a level walked at a time
	// (walkChunk; tests make it smaller).
	chunk int
	// ahead are the pages the walk reads next, in file order: a read
	// takes those of them within checkWindow with it (see read).
	ahead []bbRef
}

// bbRef is a page to read and the range of keys its parent gives it:
// [lo, hi), nil for no bound.
type bbRef struct {
	id     uint64
	lo, hi []byte
	// data says whether the page is in the store's bucket (its values
	// are the store's) or in bbolt's root tree (its values are buckets).
	data, root bool
	// inline says the page is an inline bucket's, inside its parent's.
	inline bool
	// table is the prefix of the table whose bucket the page is in (a
	// store of format 4, see bolt_tables.go), nil for a page of another
	// bucket.
	table []byte
}

// checkFile checks the file of e as committed by its latest meta page. It
// holds a read transaction of bbolt for as long as it reads, so that
// commits made meanwhile (a file left checked, see boltleft.go, does not
// hold them back) reuse none of the pages it reads: bbolt frees a page
// for reuse only once no reader of a transaction that reached it is left.
// The meta page of the transaction is read before anything else: the next
// commit but one writes over it. When commits came between the
// transaction's start and that read (neither meta page is of it, one is
// of a later transaction: no damage), the check begins again with a new
// transaction; after metaAttempts such tries it holds bbolt's writer lock
// (commits wait) from the transaction's start until both meta pages are
// read.
func (e *boltEngine) checkFile(value func(k, v []byte) error, stop <-chan struct{}) (pages int, err error) {
	f, err := os.Open(e.path)
	if err != nil {
		return 0, fmt.Errorf("check bbolt %s: %w", e.path, err)
	}
	defer f.Close()
	for attempt := 1; ; attempt++ {
		// A new check each time: none of what the last one read is kept.
		ck := &boltCheck{e: e, f: f, ps: uint64(e.db.Info().PageSize), value: value, stop: stop, chunk: walkChunk}
		if e.hooks != nil && e.hooks.boltWalkChunk > 0 {
			ck.chunk = e.hooks.boltWalkChunk
		}
		var hold *bolt.Tx
		if attempt > metaAttempts && !e.db.IsReadOnly() {
			if hold, err = e.db.Begin(true); err != nil {
				return 0, err
			}
		}
		tx, err := e.db.Begin(false)
		if err != nil {
			if hold != nil {
				_ = hold.Rollback()
			}
			return 0, err
		}
		if h := e.hooks; h != nil && h.boltCheckBegun != nil {
			h.boltCheckBegun()
		}
		m, err := ck.meta(uint64(tx.ID()))
		if hold != nil {
			_ = hold.Rollback() // nothing written: it only held the commits
		}
		if errors.Is(err, errMetaPassed) {
			if attempt <= metaAttempts {
				_ = tx.Rollback()
				continue
			}
			// With the commits held (or none possible: read-only), a
			// later meta page and no page of the transaction is damage.
			err = ck.damaged(0, fmt.Sprintf("neither meta page is the one of transaction %d that bbolt opened", tx.ID()))
		}
		if err == nil {
			err = ck.from(m)
		}
		_ = tx.Rollback()
		return ck.pages, err
	}
}

// metaAttempts is how many times a check of a bbolt file begins again
// when commits wrote over the meta page of its transaction before it read
// it, before it holds the commits for that read.
const metaAttempts = 3

// errMetaPassed is the error of boltCheck.meta when neither meta page is
// of the transaction asked for and one is of a later one: commits wrote
// over it (the other may be one a commit was writing as it was read).
var errMetaPassed = errors.New("state: the meta pages of the bbolt file are of later transactions")

// run checks the file as committed by transaction txid.
func (ck *boltCheck) run(txid uint64) error {
	m, err := ck.meta(txid)
	if errors.Is(err, errMetaPassed) {
		err = ck.damaged(0, fmt.Sprintf("neither meta page is the one of transaction %d that bbolt opened", txid))
	}
	if err != nil {
		return err
	}
	return ck.from(m)
}

// from checks the file from the meta page m on.
func (ck *boltCheck) from(m bbMetaInfo) error {
	if h := ck.e.hooks; h != nil && h.boltCheck != nil && ck.stop != nil {
		h.boltCheck(ck.stop)
	}
	ck.hwm = m.hwm
	ck.seen = make([]uint64, (m.hwm+63)/64)
	ck.mark(0, 0)
	ck.mark(1, 0)
	if err := ck.walk(m.root); err != nil {
		return err
	}
	if err := ck.freelist(m.freelist); err != nil {
		return err
	}
	for id := uint64(0); id < ck.hwm; id++ {
		if ck.seen[id/64]&(1<<(id%64)) == 0 {
			return ck.damaged(id, "no page of the tree reaches it and the freelist does not hold it: a page pointer or the freelist is damaged")
		}
	}
	return nil
}

type bbMetaInfo struct{ root, freelist, hwm uint64 }

// meta reads the meta page of transaction txid (bbolt chose it at open).
// When neither is, and one is of a later transaction, it returns
// errMetaPassed.
func (ck *boltCheck) meta(txid uint64) (bbMetaInfo, error) {
	later := 0
	for id := range uint64(2) {
		b, err := ck.read(id*ck.ps, bbHeader+bbMetaSum+8)
		if err != nil {
			return bbMetaInfo{}, err
		}
		m := b[bbHeader:]
		if bbOrder.Uint16(b[8:]) != bbMeta || bbOrder.Uint32(m) != bbMagic || bbOrder.Uint32(m[4:]) != bbVersion {
			continue
		}
		h := fnv.New64a()
		h.Write(m[:bbMetaSum])
		if h.Sum64() != bbOrder.Uint64(m[bbMetaSum:]) {
			continue
		}
		if t := bbOrder.Uint64(m[48:]); t != txid {
			if t > txid {
				later++
			}
			continue
		}
		mi := bbMetaInfo{root: bbOrder.Uint64(m[16:]), freelist: bbOrder.Uint64(m[32:]), hwm: bbOrder.Uint64(m[40:])}
		if mi.hwm < 2 || mi.hwm > (1<<48)/ck.ps {
			return mi, ck.damaged(id, fmt.Sprintf("its meta page counts %d pages", mi.hwm))
		}
		return mi, nil
	}
	if later > 0 {
		return bbMetaInfo{}, errMetaPassed
	}
	return bbMetaInfo{}, ck.damaged(0, fmt.Sprintf("neither meta page is the one of transaction %d that bbolt opened", txid))
}

// walk checks the tree from root, level by level.
func (ck *boltCheck) walk(root uint64) error {
	return ck.walkLevel([]bbRef{{id: root, root: true}})
}

// walkChunk is the most references to pages of the next level that a
// level of the walk collects before it walks them. A leaf level of
// 10,000,000 keys has about 400,000 pages, and their references (about
// 100 bytes each, the keys that bound them included), held for the whole
// check, took 72 to 98 MiB of anonymous memory at the peak of a check of
// such a file (27 to 30 MiB in chunks of 65,536). So a level hands its
// children on in chunks, each walked down to the leaves before the level
// goes on, each chunk's pages read in the order of their place in the
// file; a smaller chunk reads fewer of its pages a window (16,384: twice
// the system time of the check).
const walkChunk = 65536

// walkLevel checks the pages of refs, all of one level, in the order of
// their place in the file, and the subtrees below them.
func (ck *boltCheck) walkLevel(refs []bbRef) error {
	slices.SortFunc(refs, func(a, b bbRef) int { return cmpU64(a.id, b.id) })
	var next []bbRef
	for i, r := range refs {
		select {
		case <-ck.stop:
			return errCheckStopped
		default:
		}
		ck.ahead = refs[i+1:]
		p, err := ck.page(r.id)
		ck.ahead = nil
		if err != nil {
			return err
		}
		if next, err = ck.node(r, p, next); err != nil {
			return err
		}
		refs[i] = bbRef{} // its keys, for the collector
		if len(next) >= ck.chunk {
			if err := ck.walkLevel(next); err != nil {
				return err
			}
			next = next[:0]
		}
	}
	if len(next) == 0 {
		return nil
	}
	return ck.walkLevel(next)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// page reads page id and its overflow pages, and marks them reached.
func (ck *boltCheck) page(id uint64) ([]byte, error) {
	if id < 2 || id >= ck.hwm {
		return nil, ck.damaged(id, fmt.Sprintf("a page pointer names it, outside the file's pages 2 to %d", ck.hwm-1))
	}
	h, err := ck.read(id*ck.ps, bbHeader)
	if err != nil {
		return nil, err
	}
	if got := bbOrder.Uint64(h); got != id {
		return nil, ck.damaged(id, fmt.Sprintf("its header names page %d: a pointer to it, or the page, is damaged", got))
	}
	over := uint64(bbOrder.Uint32(h[12:]))
	if over >= ck.hwm-id {
		return nil, ck.damaged(id, fmt.Sprintf("its %d overflow pages run past the file's %d pages", over, ck.hwm))
	}
	if err := ck.mark(id, over); err != nil {
		return nil, err
	}
	ck.pages++
	return ck.read(id*ck.ps, (over+1)*ck.ps)
}

// mark records pages id to id+over as reached, once.
func (ck *boltCheck) mark(id, over uint64) error {
	for p := id; p <= id+over; p++ {
		w, bit := p/64, uint64(1)<<(p%64)
		if ck.seen[w]&bit != 0 {
			return ck.damaged(p, "it is reached twice (from two pointers, or a pointer and the freelist)")
		}
		ck.seen[w] |= bit
	}
	return nil
}

// bbElement is one element of a page: a key, and a value (leaf) or a
// child page (branch).
type bbElement struct {
	k, v   []byte
	child  uint64
	bucket bool
}

// node checks page p of r and appends its children to next.
func (ck *boltCheck) node(r bbRef, p []byte, next []bbRef) ([]bbRef, error) {
	id := r.id
	if len(p) < bbHeader {
		return nil, ck.damaged(id, "an inline bucket's page is shorter than a page header")
	}
	flags, count := bbOrder.Uint16(p[8:]), int(bbOrder.Uint16(p[10:]))
	kind := "leaf"
	switch {
	case flags == bbBranch:
		kind = "branch"
	case flags != bbLeaf:
		return nil, ck.damaged(id, fmt.Sprintf("its type is %#x, neither a branch nor a leaf", flags))
	}
	if count == 0 && (flags == bbBranch || !r.root) {
		return nil, ck.damaged(id, "it is a "+kind+" page without elements")
	}
	end := uint64(bbHeader + bbElem*count)
	if end > uint64(len(p)) {
		return nil, ck.damaged(id, fmt.Sprintf("its %d elements do not fit in it", count))
	}
	els := ck.els[:0]
	for i := range count {
		el := p[bbHeader+bbElem*i:]
		var e bbElement
		var pos, ksize, vsize uint64
		if flags == bbBranch {
			pos, ksize, e.child = uint64(bbOrder.Uint32(el)), uint64(bbOrder.Uint32(el[4:])), bbOrder.Uint64(el[8:])
		} else {
			pos, ksize, vsize = uint64(bbOrder.Uint32(el[4:])), uint64(bbOrder.Uint32(el[8:])), uint64(bbOrder.Uint32(el[12:]))
			e.bucket = bbOrder.Uint32(el) == bbBucketFlag
		}
		at := uint64(bbHeader+bbElem*i) + pos
		if at != end || ksize == 0 || ksize+vsize > uint64(len(p))-end {
			return nil, ck.damaged(id, fmt.Sprintf("element %d of its %d is not where bbolt writes it (its data at byte %d, %d+%d bytes, where the data before it ends at byte %d, in a page of %d): its element count or an element is damaged",
				i, count, at, ksize, vsize, end, len(p)))
		}
		e.k, e.v = p[end:end+ksize], p[end+ksize:end+ksize+vsize]
		end += ksize + vsize
		if i > 0 && bytes.Compare(els[i-1].k, e.k) >= 0 {
			return nil, ck.damaged(id, fmt.Sprintf("its key %s comes after %s, out of order", quoteKey(e.k), quoteKey(els[i-1].k)))
		}
		els = append(els, e)
	}
	ck.els = els
	// In order, its keys are in the range its parent gives it when its
	// first and last are.
	if count > 0 {
		for _, k := range [][]byte{els[0].k, els[count-1].k} {
			if (r.lo != nil && bytes.Compare(k, r.lo) < 0) || (r.hi != nil && bytes.Compare(k, r.hi) >= 0) {
				return nil, ck.damaged(id, fmt.Sprintf("its key %s is outside the keys its parent page gives it", quoteKey(k)))
			}
		}
	}
	// bbolt gives a page as many blocks as its bytes take; an inline page
	// is the rest of its bucket's value.
	if !r.inline {
		if over := uint64(len(p))/ck.ps - 1; end <= over*ck.ps {
			return nil, ck.damaged(id, fmt.Sprintf("its data ends at byte %d, short of its last block of %d bytes: its overflow count or element count is damaged", end, ck.ps))
		}
	}
	// The window the page is in serves the next reads: the keys that
	// bound the children are copied.
	var lo []byte
	for i, e := range els {
		if flags == bbBranch {
			if lo == nil {
				lo = bytes.Clone(e.k)
			}
			c := bbRef{id: e.child, lo: lo, hi: r.hi, data: r.data, table: r.table}
			if i+1 < len(els) {
				lo = bytes.Clone(els[i+1].k)
				c.hi = lo
			}
			next = append(next, c)
			continue
		}
		switch {
		case r.data && e.bucket && (ck.e.tables || ck.e.moving) && r.table == nil && tablePrefixLen(e.k) == len(e.k):
			// A table's bucket (format 4, or a move to it under way).
			var err error
			if next, err = ck.bucket(id, e, bbRef{data: true, root: true, table: bytes.Clone(e.k)}, next); err != nil {
				return nil, err
			}
		case r.data && e.bucket:
			return nil, ck.damaged(id, fmt.Sprintf("its key %s holds a nested bucket, which the store never writes", quoteKey(e.k)))
		case r.data && r.table != nil:
			k, ok := appendOuter(append(ck.key[:0], r.table...), e.k)
			ck.key = k
			if !ok {
				return nil, ck.damaged(id, fmt.Sprintf("its key %s in the bucket of table %s is not one the store writes", quoteKey(e.k), quoteKey(r.table)))
			}
			if ck.value != nil {
				if err := ck.value(k, e.v); err != nil {
					return nil, err
				}
			}
		case r.data && ck.e.tables && tablePrefixLen(e.k) > 0:
			return nil, ck.damaged(id, fmt.Sprintf("it holds the data key %s outside its table's bucket, where a store of format 4 never writes it", quoteKey(e.k)))
		case r.data:
			if ck.value != nil {
				if err := ck.value(e.k, e.v); err != nil {
					return nil, err
				}
			}
		case !e.bucket || len(e.v) < bbBucketHdr:
			return nil, ck.damaged(id, fmt.Sprintf("bbolt's root holds %s, not a bucket", quoteKey(e.k)))
		case !bytes.Equal(e.k, boltBucket):
			return nil, ck.damaged(id, fmt.Sprintf("bbolt's root holds a bucket %s, which the store never makes", quoteKey(e.k)))
		default:
			var err error
			if next, err = ck.bucket(id, e, bbRef{data: true, root: true}, next); err != nil {
				return nil, err
			}
		}
	}
	return next, nil
}

// bucket checks the bucket of element e of page id, whose root is r (its
// id aside): an inline bucket's page at once, another's root with the
// next level.
func (ck *boltCheck) bucket(id uint64, e bbElement, r bbRef, next []bbRef) ([]bbRef, error) {
	if len(e.v) < bbBucketHdr {
		return nil, ck.damaged(id, fmt.Sprintf("the bucket of its key %s has a header of %d bytes, short of %d", quoteKey(e.k), len(e.v), bbBucketHdr))
	}
	if r.id = bbOrder.Uint64(e.v); r.id != 0 {
		return append(next, r), nil
	}
	// An inline bucket: its page follows its header, in this page.
	r.id, r.inline = id, true
	ck.els = nil // the caller's loop holds them
	return ck.node(r, e.v[bbBucketHdr:], next)
}

// freelist checks the freelist page id: each page it holds is inside the
// file and reached by nothing else.
func (ck *boltCheck) freelist(id uint64) error {
	if id == bbNoFreelist {
		return nil // not synced: bbolt rebuilds it from the tree
	}
	if id < 2 || id >= ck.hwm {
		return ck.damaged(id, fmt.Sprintf("the meta page names it as the freelist, outside the file's pages 2 to %d", ck.hwm-1))
	}
	h, err := ck.read(id*ck.ps, bbHeader+8)
	if err != nil {
		return err
	}
	if flags := bbOrder.Uint16(h[8:]); flags != bbFreelist || bbOrder.Uint64(h) != id {
		return ck.damaged(id, fmt.Sprintf("the meta page names it as the freelist, but it is page %d of type %#x", bbOrder.Uint64(h), flags))
	}
	over := uint64(bbOrder.Uint32(h[12:]))
	if over >= ck.hwm-id {
		return ck.damaged(id, fmt.Sprintf("the freelist's %d overflow pages run past the file's %d pages", over, ck.hwm))
	}
	if err := ck.mark(id, over); err != nil {
		return err
	}
	idx, n := uint64(0), uint64(bbOrder.Uint16(h[10:]))
	if n == 0xFFFF {
		idx, n = 1, bbOrder.Uint64(h[bbHeader:])
	}
	if n > ((over+1)*ck.ps-bbHeader)/8-idx {
		return ck.damaged(id, fmt.Sprintf("the freelist counts %d pages, more than its %d bytes hold", n, (over+1)*ck.ps))
	}
	b, err := ck.read(id*ck.ps, bbHeader+(idx+n)*8)
	if err != nil {
		return err
	}
	for i := range n {
		p := bbOrder.Uint64(b[bbHeader+(idx+i)*8:])
		if p < 2 || p >= ck.hwm {
			return ck.damaged(id, fmt.Sprintf("the freelist holds page %d, outside the file's pages 2 to %d", p, ck.hwm-1))
		}
		if ck.seen[p/64]&(1<<(p%64)) != 0 {
			return ck.damaged(p, "the freelist holds it, though it is in use (or listed twice): the next commit would write over it")
		}
		ck.seen[p/64] |= 1 << (p % 64)
	}
	return nil
}

// read returns n bytes of the file at off, read ahead in windows of at
// most checkWindow bytes (exactly that outside the walk of the tree, the
// meta and freelist pages, unless the file's pages end before): the pages
// of a chunk of a level are read in file order.
func (ck *boltCheck) read(off, n uint64) ([]byte, error) {
	if off >= ck.winOff && off+n <= ck.winOff+uint64(len(ck.win)) {
		return ck.win[off-ck.winOff : off-ck.winOff+n], nil
	}
	// The window reaches the last page to be read next that starts
	// within checkWindow, and no further: a chunk's pages may lie far
	// apart in a large file, and a window read for one page would copy a
	// megabyte each.
	size := n
	for _, r := range ck.ahead {
		at := r.id * ck.ps
		if at < off {
			continue
		}
		if at+ck.ps > off+checkWindow {
			break
		}
		size = max(size, at+ck.ps-off)
	}
	// No window reaches past the file's pages (its page count, from the
	// meta page; the two meta pages before it is known): a store's file
	// is often far larger than its pages (bbolt grows it ahead), and a
	// new store's check would read and hold a megabyte for a few pages.
	window := uint64(checkWindow)
	if end := max(ck.hwm, 2) * ck.ps; end > off {
		window = min(window, end-off)
	}
	if ck.ahead == nil {
		size = max(n, window)
	}
	if uint64(cap(ck.win)) < size {
		ck.win = make([]byte, max(size, min(checkWindow, max(ck.hwm, 2)*ck.ps)))
	}
	ck.win = ck.win[:size]
	got, err := ck.f.ReadAt(ck.win, int64(off))
	ck.win, ck.winOff = ck.win[:got], off
	if uint64(got) < n {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, ck.damaged(off/ck.ps, fmt.Sprintf("the file ends at byte %d, before the end of its pages", off+uint64(got)))
		}
		return nil, fmt.Errorf("check bbolt %s: %w", ck.e.path, err)
	}
	return ck.win[:n], nil
}

// checkWindow is how much of the file a read takes at least.
const checkWindow = 1 << 20

func (ck *boltCheck) damaged(id uint64, what string) *CorruptError {
	return &CorruptError{Backend: Bolt, Dir: ck.e.dir, File: ck.e.path, Record: fmt.Sprintf("page %d of the bbolt database", id), Detail: what}
}

// leftCheckDelay is how long the background check of a file left checked
// waits before it reads.
const leftCheckDelay = time.Second

// delayed waits leftCheckDelay, or until hurry (nil: never) is closed; it
// returns false when stop is closed first.
func delayed(hurry, stop <-chan struct{}) bool {
	t := time.NewTimer(leftCheckDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-hurry:
	case <-stop:
		return false
	}
	return true
}

// bgCheck is the check of a bbolt file running in the background: the
// store serves reads meanwhile, and its first commit waits for the result.
type bgCheck struct {
	done chan struct{} // closed with err set
	err  error
	stop chan struct{} // closed by Close to end the check
	// left says the file was found as the store left it checked
	// (boltleft.go): commits do not wait for this check, which starts
	// leftCheckDelay after the open, or once something waits for it
	// (hurry: a snapshot, a backup, an upgrade).
	left      bool
	hurry     chan struct{}
	hurryOnce sync.Once
}

// start lets the check of a file left checked start at once: a caller
// waits for it.
func (bg *bgCheck) start() { bg.hurryOnce.Do(func() { close(bg.hurry) }) }

// checkAtOpen checks the bbolt file of an existing store (see boltCheck):
// before Open returns when the file is at most maxBytes, in the background
// otherwise, with every commit held back until it passed (nothing read from
// a damaged file is committed). A file as the store left it checked is
// checked in the background whatever its size, and its commits do not wait
// (boltleft.go). A failure in the background makes every
// later read and commit of the store fail, and is passed to fail. value
// checks the values of the store's bucket; a negative maxBytes checks
// nothing.
func (e *boltEngine) checkAtOpen(value func(k, v []byte) error, maxBytes int64, log *slog.Logger, fail func(error)) error {
	if maxBytes < 0 {
		return nil
	}
	size := e.size()
	left := e.leftChecked()
	if size <= maxBytes && !left {
		_, err := e.runCheck(value, nil)
		e.vouched.Store(err == nil)
		return err
	}
	bg := &bgCheck{done: make(chan struct{}), stop: make(chan struct{}), left: left, hurry: make(chan struct{})}
	e.bg = bg
	if bg.left {
		e.vouched.Store(true)
		log.Info("state: checking the bbolt file in the background; the file is as this store left it checked at its last close, so commits do not wait for the check",
			"store", e.dir, "file", e.path, "bytes", size, "verify_max_bytes", maxBytes)
	} else {
		log.Info("state: checking the bbolt file in the background; the store serves reads meanwhile, and its first commit waits for the check",
			"store", e.dir, "file", e.path, "bytes", size, "verify_max_bytes", maxBytes)
	}
	go func() {
		defer close(bg.done)
		if bg.left {
			// Nothing waits for this check: it starts a moment later, so
			// that a short run (a restart that applies a few lines) does
			// not share the machine with its reads.
			if !delayed(bg.hurry, bg.stop) {
				bg.err = fmt.Errorf("check bbolt %s: %w", e.path, ErrClosed)
				return
			}
		}
		start := time.Now()
		pages, err := e.runCheck(value, bg.stop)
		switch {
		case errors.Is(err, errCheckStopped):
			bg.err = fmt.Errorf("check bbolt %s: %w", e.path, ErrClosed)
		case err != nil:
			bg.err = err
			e.vouched.Store(false)
			e.forgetLeft()
			log.Error("state: the check of the bbolt file found damage: the store refuses every read and commit from now on",
				"store", e.dir, "file", e.path, "err", err)
			// The store fails before its reads do: a read refused means
			// the store's Flush and Apply are too.
			fail(err)
			if ce := (*CorruptError)(nil); errors.As(err, &ce) {
				e.broken.CompareAndSwap(nil, ce)
			}
		default:
			e.vouched.Store(true)
			log.Info("state: the bbolt file passed its check", "store", e.dir, "file", e.path, "pages", pages, "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	return nil
}

// runCheck runs checkFile, a panic in it (a bug: it reads with bounds
// checked) taken for damage.
func (e *boltEngine) runCheck(value func(k, v []byte) error, stop <-chan struct{}) (pages int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = boltDamaged(e.dir, e.path, r)
		}
	}()
	return e.checkFile(value, stop)
}

// waitChecked waits for the check running in the background, if any, and
// returns its error.
func (e *boltEngine) waitChecked() error {
	if e.bg == nil {
		return nil
	}
	if e.bg.left {
		// The file is as the store left it checked: a commit waits for
		// nothing, but not past damage the check found.
		select {
		case <-e.bg.done:
			if !errors.Is(e.bg.err, ErrClosed) {
				return e.bg.err
			}
		default:
		}
		return nil
	}
	<-e.bg.done
	return e.bg.err
}

// stopChecking ends the check running in the background, if any.
func (e *boltEngine) stopChecking() {
	if e.bg != nil {
		stopAndWait(e.bg.stop, e.bg.done)
	}
}

// stopAndWait closes stop, unless it is closed, and waits for done: the end
// of a check running in the background.
func stopAndWait(stop chan struct{}, done <-chan struct{}) {
	select {
	case <-stop:
	default:
		close(stop)
	}
	<-done
}

// checkStore checks the backend's data at open: bbolt's file (see
// boltEngine.checkAtOpen); Pebble checks its blocks' checksums as it
// reads them (and a small store whole at open, see pebbleEngine.check, or
// in the background when the store left it checked, see pebble_left.go).
func (c *core) checkStore(sums *sumEngine) error {
	var value func(k, v []byte) error
	if sums.sums {
		value = func(k, v []byte) error { _, err := sums.verify(k, v); return err }
	}
	switch e := sums.engine.(type) {
	case *boltEngine:
		return e.checkAtOpen(value, c.opts.verifyMaxBytes(), c.log, c.fail)
	case *pebbleEngine:
		if e.left && e.bg == nil {
			e.checkLeftInBackground(value, c.log, c.fail)
		}
	}
	return nil
}

// fail puts the store in its failed state for err, damage a check in the
// background found: every later Apply, Flush and commit returns it.
func (c *core) fail(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.stats.LastError = err.Error()
		c.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		c.noteFailed()
	}
	c.broadcast()
	c.mu.Unlock()
}

// checked waits for the check of the backend's data running in the
// background, if any: a commit must not record what was read from a
// damaged file.
// checkedFor waits, until ctx is done, for the check of the file running in
// the background, if any, and returns its error: the reads for operators (a
// snapshot, a backup) wait for it, so that nothing read from a damaged file
// is shown or copied. what names the read, for the error.
func (c *core) checkedFor(ctx context.Context, what string) error {
	be, ok := c.rawEngine().(*boltEngine)
	if !ok || be.bg == nil {
		return nil
	}
	be.bg.start()
	select {
	case <-be.bg.done:
		return be.bg.err
	case <-ctx.Done():
		return fmt.Errorf("%s of %s store %s waits for the check of its file, still running: %w", what, c.kind, c.dir, ctx.Err())
	}
}

func (c *core) checked() error {
	if be, ok := c.rawEngine().(*boltEngine); ok {
		return be.waitChecked()
	}
	return nil
}

// checkedFully waits for the check running in the background even when
// the file is as the store left it checked: an upgrade gives checksums
// only to values of a file checked in this process.
func (c *core) checkedFully() error {
	if be, ok := c.rawEngine().(*boltEngine); ok && be.bg != nil {
		be.bg.start()
		<-be.bg.done
		return be.bg.err
	}
	return c.checked()
}
