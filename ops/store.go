package ops

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidemark-go/tidemark/state"
)

// DefaultShowLimit is how many keys of each bucket a store listing holds
// when ShowOptions.Limit is zero.
const DefaultShowLimit = 100

// MaxShowLimit is the most keys per bucket that GET /stores/{store}
// answers with (its limit=): a listing is built in memory; page on with
// from=.
const MaxShowLimit = 100_000

// ShowOptions selects what ShowStore lists. The zero value lists every
// namespace and bucket, with the first DefaultShowLimit keys of each.
type ShowOptions struct {
	// Namespaces are the namespaces to list; nil means all of them.
	Namespaces []string
	// Buckets are the buckets to list in each namespace ("" is the root
	// bucket); nil means all of them.
	Buckets []string
	// Prefix, when set, lists only the keys that start with it, as the
	// bucket's key codec encodes it (see From).
	Prefix string
	// From, when set, starts each bucket's listing at the first key at or
	// after it: a number for a bucket of int64 or uint64 keys (as its
	// table writes them), else the key's bytes. Pass a listing's Next to
	// list the keys after it.
	From string
	// Limit is the most keys listed per bucket: zero means
	// DefaultShowLimit, a negative value lists no keys (the buckets
	// alone).
	Limit int
	// Count counts the keys of each bucket listed (within Prefix): it
	// reads every key of the bucket, which on a large store takes a
	// while, on a snapshot, beside the running processor.
	Count bool
}

// StoreListing is what a store holds, as [ShowStore] reads it:
// GET /stores/{store} serves it, and tidemark store show prints it.
type StoreListing struct {
	Store   string `json:"store"`
	Backend string `json:"backend"`
	Dir     string `json:"dir"`
	// Format is the store's format (state.Stats.Format).
	Format     int                `json:"format"`
	Namespaces []NamespaceListing `json:"namespaces"`
}

// NamespaceListing is one namespace of a [StoreListing]: its applied
// records and its buckets. Each namespace is read on a snapshot of its
// own.
type NamespaceListing struct {
	Name    string          `json:"name"`
	Applied []AppliedRecord `json:"applied"`
	Buckets []BucketListing `json:"buckets"`
}

// AppliedRecord is a durable applied position of a feed (of one of its
// files, for a feed that follows a set of files), with the lineage
// recorded with it.
type AppliedRecord struct {
	Feed            string `json:"feed"`
	File            string `json:"file,omitempty"`
	Epoch           uint64 `json:"epoch"`
	Position        int64  `json:"position"`
	Device          uint64 `json:"device"`
	Inode           uint64 `json:"inode"`
	FingerprintLen  int    `json:"fingerprintLen"`
	FingerprintHash uint64 `json:"fingerprintHash"`
	TailLen         int    `json:"tailLen"`
	TailHash        uint64 `json:"tailHash"`
}

// BucketListing is one bucket of a [NamespaceListing]. KeyCodec and
// ValueCodec are the codecs its table recorded (see [state.Schema]),
// empty for a bucket written only through the Bucket methods.
type BucketListing struct {
	Name       string  `json:"name"`
	KeyCodec   string  `json:"keyCodec,omitempty"`
	ValueCodec string  `json:"valueCodec,omitempty"`
	Entries    []Entry `json:"entries"`
	// Next is set when the bucket holds keys after the last one listed:
	// pass it as ShowOptions.From (--from) to list them.
	Next string `json:"next,omitempty"`
	// Count is the bucket's number of keys (within the prefix), with
	// ShowOptions.Count; -1 without.
	Count int64 `json:"count"`
}

// Entry is a key and its value, decoded by the bucket's codecs where they
// are known: an int64 or uint64 as a decimal number, a string as it is, a
// JSON value as its JSON text. Bytes without a known codec (a Bucket
// method's, [state.Bytes], a codec of the program's own) are shown as a Go
// quoted string ("acct-1", "\x00\x00\x00\x2a"), and Raw says which of the
// two are.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Raw is "key", "value" or "key,value": what is shown quoted, not
	// decoded.
	Raw string `json:"raw,omitempty"`
}

// ErrUnknownStore is returned for a store name the listener does not
// report (see Config.Stores).
var ErrUnknownStore = errors.New("ops: unknown store")

// ShowStore lists what st holds, on snapshots of its durable state (see
// [state.Store.Snapshot]): it runs beside the processor without blocking
// it. name labels the listing.
func ShowStore(ctx context.Context, name string, st state.Store, o ShowOptions) (StoreListing, error) {
	out := StoreListing{Store: name, Backend: st.Backend(), Dir: st.Dir(), Format: st.Stats().Format, Namespaces: []NamespaceListing{}}
	nss := o.Namespaces
	if nss == nil {
		err := st.Snapshot(ctx, func(tx *state.Tx) error {
			var err error
			nss, err = tx.Namespaces()
			return err
		})
		if err != nil {
			return out, fmt.Errorf("list the namespaces of store %s: %w", st.Dir(), err)
		}
	}
	for _, ns := range nss {
		nl := NamespaceListing{Name: ns, Applied: []AppliedRecord{}, Buckets: []BucketListing{}}
		err := st.Namespace(ns).Snapshot(ctx, func(tx *state.Tx) error {
			feeds, err := tx.Feeds()
			if err != nil {
				return err
			}
			for _, f := range slices.Sorted(maps.Keys(feeds)) {
				for _, l := range feeds[f] {
					nl.Applied = append(nl.Applied, AppliedRecord{Feed: f, File: l.File, Epoch: l.Epoch, Position: l.Position,
						Device: l.Identity.Dev, Inode: l.Identity.Ino, FingerprintLen: l.Fingerprint.Len, FingerprintHash: l.Fingerprint.Hash,
						TailLen: l.TailLen, TailHash: l.TailHash})
				}
			}
			bs := o.Buckets
			if bs == nil {
				if bs, err = tx.Buckets(); err != nil {
					return err
				}
			}
			for _, b := range bs {
				bl, err := listBucket(ctx, tx.Bucket(b), b, o)
				if err != nil {
					return fmt.Errorf("bucket %q: %w", b, err)
				}
				nl.Buckets = append(nl.Buckets, bl)
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("list namespace %q of store %s: %w", ns, st.Dir(), err)
		}
		out.Namespaces = append(out.Namespaces, nl)
	}
	return out, nil
}

func listBucket(ctx context.Context, b *state.Bucket, name string, o ShowOptions) (BucketListing, error) {
	bl := BucketListing{Name: name, Entries: []Entry{}, Count: -1}
	s, ok, err := b.Schema()
	if err != nil {
		return bl, err
	}
	if ok {
		bl.KeyCodec, bl.ValueCodec = s.Key, s.Value
	}
	prefix, err := encodeKeyArg(bl.KeyCodec, o.Prefix)
	if err != nil {
		return bl, fmt.Errorf("prefix %q: %w", o.Prefix, err)
	}
	from, err := encodeKeyArg(bl.KeyCodec, o.From)
	if err != nil {
		return bl, fmt.Errorf("from %q: %w", o.From, err)
	}
	limit := o.Limit
	if limit == 0 {
		limit = DefaultShowLimit
	}
	seq := b.Prefix(prefix)
	if len(from) > 0 {
		if bytes.Compare(from, prefix) < 0 {
			from = prefix
		}
		seq = b.Range(from, prefixEnd(prefix))
	}
	var n int64
	for k, v := range seq {
		n++
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return bl, err
			}
		}
		if limit < 0 {
			if !o.Count {
				break
			}
			continue
		}
		if len(bl.Entries) < limit {
			bl.Entries = append(bl.Entries, entryOf(bl.KeyCodec, bl.ValueCodec, k, v))
			continue
		}
		if bl.Next == "" {
			bl.Next = nextArg(bl.KeyCodec, k)
		}
		if !o.Count {
			break
		}
	}
	if o.Count {
		bl.Count = n
	}
	return bl, nil
}

// prefixEnd returns the first key after every key that starts with p, nil
// if there is none.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// encodeKeyArg encodes a --from or --prefix argument as the bucket's key
// codec does: a number for int64 and uint64 keys, else the bytes.
func encodeKeyArg(codec, s string) ([]byte, error) {
	if s == "" {
		return []byte{}, nil
	}
	switch codec {
	case "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the bucket's keys are int64: give a number: %w", err)
		}
		return state.Int64{}.AppendKey(nil, n)
	case "uint64":
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the bucket's keys are uint64: give a number: %w", err)
		}
		return state.Uint64{}.AppendKey(nil, n)
	}
	return []byte(s), nil
}

// nextArg returns the From argument that lists k first.
func nextArg(codec string, k []byte) string {
	if s, ok := decode(codec, k, true); ok {
		return s
	}
	return string(k)
}

func entryOf(kc, vc string, k, v []byte) Entry {
	var e Entry
	var raw []string
	var ok bool
	if e.Key, ok = decode(kc, k, true); !ok {
		e.Key, raw = strconv.Quote(string(k)), append(raw, "key")
	}
	if e.Value, ok = decode(vc, v, false); !ok {
		e.Value, raw = strconv.Quote(string(v)), append(raw, "value")
	}
	e.Raw = strings.Join(raw, ",")
	return e
}

// decode renders b by the codec named codec, and reports whether it could.
func decode(codec string, b []byte, key bool) (string, bool) {
	switch codec {
	case "int64":
		if len(b) != 8 {
			return "", false
		}
		u := binary.BigEndian.Uint64(b)
		if key {
			u ^= 1 << 63
		}
		return strconv.FormatInt(int64(u), 10), true
	case "uint64":
		if len(b) != 8 {
			return "", false
		}
		return strconv.FormatUint(binary.BigEndian.Uint64(b), 10), true
	case "string":
		return string(b), utf8.Valid(b)
	case "json":
		var c bytes.Buffer
		if json.Compact(&c, b) != nil {
			return "", false
		}
		return c.String(), true
	}
	return "", false
}

// BackupResult is the answer of POST /stores/{store}/backup.
type BackupResult struct {
	Store string `json:"store"`
	// Dir is the backup's folder, on the server's host.
	Dir string `json:"dir"`
	// Seconds is how long the backup took.
	Seconds float64 `json:"seconds"`
}

// StoreInfo is an entry of GET /stores.
type StoreInfo struct {
	Store   string `json:"store"`
	Backend string `json:"backend"`
	Dir     string `json:"dir"`
}

func (l *Listener) store(w http.ResponseWriter, r *http.Request) (string, state.Store, bool) {
	name := r.PathValue("store")
	for _, sc := range l.cfg.Stores {
		if sc.Name == name {
			return name, sc.Store, true
		}
	}
	var names []string
	for _, sc := range l.cfg.Stores {
		names = append(names, sc.Name)
	}
	httpError(w, http.StatusNotFound, fmt.Sprintf("%v %q: this listener reports the stores %q (GET /stores)", ErrUnknownStore, name, names))
	return "", nil, false
}

func (l *Listener) serveStores(w http.ResponseWriter, r *http.Request) {
	out := []StoreInfo{}
	for _, sc := range l.cfg.Stores {
		out = append(out, StoreInfo{Store: sc.Name, Backend: sc.Store.Backend(), Dir: sc.Store.Dir()})
	}
	writeJSON(w, http.StatusOK, out)
}

// serveStoreShow lists a store: GET /stores/{store}?namespace=&bucket=
// (repeatable)&prefix=&from=&limit=&count=1.
func (l *Listener) serveStoreShow(w http.ResponseWriter, r *http.Request) {
	name, st, ok := l.store(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	o := ShowOptions{Prefix: q.Get("prefix"), From: q.Get("from"), Count: q.Get("count") == "1" || q.Get("count") == "true"}
	if _, ok := q["namespace"]; ok {
		o.Namespaces = q["namespace"]
	}
	if _, ok := q["bucket"]; ok {
		o.Buckets = q["bucket"]
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("show store %q: limit=%q: want a number of keys per bucket", name, s))
			return
		}
		if n > MaxShowLimit {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("show store %q: limit=%d: the listener answers at most %d keys per bucket; page on with from=", name, n, MaxShowLimit))
			return
		}
		o.Limit = n
	}
	if o.Count {
		// Counting reads every key: the write timeout is for the answer.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	ls, err := ShowStore(r.Context(), name, st, o)
	if err != nil {
		httpError(w, storeStatus(err), fmt.Sprintf("show store %q: %v", name, err))
		return
	}
	writeJSON(w, http.StatusOK, ls)
}

// serveStoreBackup writes a backup: POST /stores/{store}/backup with
// dir=<folder on the server's host> in the query or form.
func (l *Listener) serveStoreBackup(w http.ResponseWriter, r *http.Request) {
	name, st, ok := l.store(w, r)
	if !ok {
		return
	}
	if err := r.ParseForm(); err != nil {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("backup of store %q: read the form: %v", name, err))
		return
	}
	dir := r.FormValue("dir")
	if dir == "" {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("backup of store %q: name the new folder for the copy, on the server's host, with dir=<folder>", name))
		return
	}
	// A large store takes longer than the write timeout: the backup is
	// bounded by the client's patience (the request's context) instead.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	start := time.Now()
	if err := st.Backup(r.Context(), dir); err != nil {
		l.log.Warn("ops: backup failed", "store", name, "dir", dir, "remote", r.RemoteAddr, "err", err)
		httpError(w, storeStatus(err), err.Error())
		return
	}
	l.log.Info("ops: backup written at an operator's request", "store", name, "dir", dir, "remote", r.RemoteAddr, "took", time.Since(start))
	writeJSON(w, http.StatusOK, BackupResult{Store: name, Dir: dir, Seconds: time.Since(start).Seconds()})
}

// storeStatus maps the errors of a store listing or backup to HTTP
// statuses.
func storeStatus(err error) int {
	switch {
	case errors.Is(err, state.ErrBackupExists):
		return http.StatusConflict
	case errors.Is(err, state.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, strconv.ErrSyntax), errors.Is(err, strconv.ErrRange):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}
