package cluster

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is a worker's view of its job at one moment: the workers the
// table of workers lists, and every partition: held here (with its
// positions), held by another worker (as that worker last said), or free.
type Status struct {
	Job, Stream, Worker string
	Partitions          int
	// Floor and Ceil are the share of partitions a worker should hold:
	// ⌊P/W⌋ to ⌈P/W⌉ for W live workers, as of the last look.
	Floor, Ceil int
	// Held counts the partitions this worker holds (running or starting).
	Held int
	// Workers are the job's workers as last read, live ones first.
	Workers []WorkerStatus
	// TableError is set when the last heartbeat failed (the database is
	// unreachable): the view is from LastLook.
	TableError string
	LastLook   time.Time
	// PartitionStates are the partitions, by number.
	PartitionStates []PartitionStatus
	// Takeovers, Releases and Losses count this worker's take-overs,
	// clean hand-overs and servers stopped by an error (Fenced of them by
	// a take-over of the lease by another owner).
	Takeovers, Releases, Losses, Fenced uint64
}

// WorkerStatus is a worker of the job as the table says.
type WorkerStatus struct {
	Name  string
	Alive bool
	// HeartbeatLeft is how long its heartbeat lasts (negative: dead since).
	HeartbeatLeft time.Duration
	// Partitions are those it holds or is taking.
	Partitions []int
}

// PartitionStatus is one partition.
type PartitionStatus struct {
	Partition int
	// State is this worker's: Running or Starting when it holds it.
	State PartitionState
	// Owner is the worker that holds it: this one, another (as its last
	// heartbeat said), or "" when no live worker does. Token is the lease
	// token it holds it by.
	Owner string
	Token int64
	// Store is the partition's store.
	Store string
	// Since is when this worker's current state began.
	Since time.Time
	// The positions of a partition held here, in stream sequences: Applied
	// is the lowest position the store has durably applied (of its
	// namespaces); Committed what the framework committed (every
	// subscriber finished and every store made durable); Acked what was
	// acknowledged to the server; LastSeq the stream's last sequence; Lag
	// the partition's messages after the last one read.
	Applied               int64
	Committed, Acked      uint64
	LastSeq, Lag          uint64
	Buffered, Uncommitted int
	// LastError is the last error that stopped the partition here, and
	// RetryAt when it is tried again.
	LastError string
	ErrorAt   time.Time
	RetryAt   time.Time
	// Takeovers, Releases and Losses count this worker's.
	Takeovers, Releases, Losses uint64
}

// Status returns the worker's view. Safe from any goroutine.
func (s *Supervisor) Status() Status {
	st := Status{Job: s.cfg.Name, Stream: s.cfg.Stream, Worker: s.cfg.Worker, Partitions: s.cfg.Partitions}
	s.mu.Lock()
	view, at, terr, pl := slices.Clone(s.view), s.viewAt, s.viewErr, s.plan
	s.mu.Unlock()
	st.LastLook, st.TableError, st.Floor, st.Ceil = at, terr, pl.floor, pl.ceil
	owner := map[int]claimOf{}
	for _, r := range view {
		ws := WorkerStatus{Name: r.name, Alive: r.alive, HeartbeatLeft: r.left}
		for _, c := range r.claims {
			ws.Partitions = append(ws.Partitions, c.Partition)
			if r.alive && r.name != s.cfg.Worker {
				owner[c.Partition] = claimOf{r.name, c.Token}
			}
		}
		st.Workers = append(st.Workers, ws)
	}
	slices.SortStableFunc(st.Workers, func(a, b WorkerStatus) int {
		switch {
		case a.Alive == b.Alive:
			return 0
		case a.Alive:
			return -1
		}
		return 1
	})
	for _, pt := range s.parts {
		ps := s.partStatus(pt)
		if ps.State == Standby {
			if o, ok := owner[pt.index]; ok {
				ps.Owner, ps.Token = o.worker, o.token
			}
		} else {
			ps.Owner = s.cfg.Worker
			st.Held++
		}
		st.PartitionStates = append(st.PartitionStates, ps)
	}
	st.Takeovers, st.Releases, st.Losses, st.Fenced = s.takeovers.Load(), s.releases.Load(), s.losses.Load(), s.fenced.Load()
	return st
}

type claimOf struct {
	worker string
	token  int64
}

func (s *Supervisor) partStatus(pt *part) PartitionStatus {
	pt.mu.Lock()
	ps := PartitionStatus{
		Partition: pt.index, State: pt.state, Token: pt.token, Store: pt.storeName, Since: pt.since,
		LastError: pt.lastErr, ErrorAt: pt.errAt, RetryAt: pt.retryAt,
		Takeovers: pt.takeovers, Releases: pt.releases, Losses: pt.losses,
	}
	src, st := pt.src, pt.st
	pt.mu.Unlock()
	if ps.State == Standby {
		ps.Token = 0
	}
	if src != nil {
		ss := src.Stats()
		ps.Committed, ps.Acked, ps.LastSeq, ps.Lag = ss.Committed, ss.Acked, ss.LastSeq, ss.Lag
		ps.Buffered, ps.Uncommitted = ss.Buffered, ss.Uncommitted
	}
	if st != nil {
		ps.Applied = -1
		for _, l := range st.AppliedAll(s.cfg.FeedName) {
			if ps.Applied < 0 || l.Position < ps.Applied {
				ps.Applied = l.Position
			}
		}
		if ps.Applied < 0 {
			ps.Applied = 0
		}
	}
	return ps
}

// Collector returns a Prometheus collector of the worker's metrics, each
// labelled with the job and the stream, and per partition with the
// partition; with it, the metrics of the JetStream source of every
// partition held here (tidemark_jetstream_*, see natsfeed.Source.Collector):
//
//	tidemark_cluster_workers              live workers of the job
//	tidemark_cluster_partitions           the stream's partitions
//	tidemark_cluster_partitions_held      partitions this worker holds
//	tidemark_cluster_share_min/max        ⌊P/W⌋ and ⌈P/W⌉
//	tidemark_cluster_partition_held       1 for a partition held here, by partition
//	tidemark_cluster_partition_applied_sequence   the store's durable position, by partition
//	tidemark_cluster_partition_lag_messages       by partition
//	tidemark_cluster_takeovers_total, _releases_total, _losses_total, _fenced_total
//	tidemark_cluster_table_up             1 when the last heartbeat succeeded
func (s *Supervisor) Collector() prometheus.Collector { return &collector{s: s} }

type collector struct{ s *Supervisor }

// Describe sends nothing: the set of metrics follows the partitions held
// (an unchecked collector).
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.Status()
	base := prometheus.Labels{"tidemark_job": s.cfg.Name, "stream": s.cfg.Stream}
	g := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("tidemark_cluster_"+name, help, nil, base), prometheus.GaugeValue, v)
	}
	cnt := func(name, help string, v uint64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("tidemark_cluster_"+name, help, nil, base), prometheus.CounterValue, float64(v))
	}
	live := 0
	for _, w := range st.Workers {
		if w.Alive {
			live++
		}
	}
	g("workers", "Live workers of the job, as last read.", float64(live))
	g("partitions", "The stream's partitions.", float64(st.Partitions))
	g("partitions_held", "Partitions this worker holds.", float64(st.Held))
	g("share_min", "The fewest partitions a worker should hold.", float64(st.Floor))
	g("share_max", "The most partitions a worker should hold.", float64(st.Ceil))
	up := 1.0
	if st.TableError != "" {
		up = 0
	}
	g("table_up", "1 when the last heartbeat to the table of workers succeeded.", up)
	cnt("takeovers_total", "Partitions this worker took.", st.Takeovers)
	cnt("releases_total", "Partitions this worker gave up cleanly.", st.Releases)
	cnt("losses_total", "Partition servers stopped by an error.", st.Losses)
	cnt("fenced_total", "Partitions lost because another owner took their lease over.", st.Fenced)
	pd := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tidemark_cluster_partition_"+name, help, []string{"partition"}, base)
	}
	held := pd("held", "1 when this worker holds the partition.")
	applied := pd("applied_sequence", "The lowest stream sequence the partition's store has durably applied.")
	lag := pd("lag_messages", "Messages of the partition after the last one read.")
	for _, ps := range st.PartitionStates {
		l := strconv.Itoa(ps.Partition)
		h := 0.0
		if ps.State == Running || ps.State == Starting {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(held, prometheus.GaugeValue, h, l)
		if ps.State == Running {
			ch <- prometheus.MustNewConstMetric(applied, prometheus.GaugeValue, float64(ps.Applied), l)
			ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, float64(ps.Lag), l)
		}
	}
	for _, pt := range s.parts {
		pt.mu.Lock()
		src := pt.src
		pt.mu.Unlock()
		if src != nil {
			src.Collector().Collect(ch)
		}
	}
}

// Handler returns an HTTP handler of the worker's operations endpoints:
//
//	GET /status    the [Status] as JSON
//	GET /metrics   the Collector's metrics, in Prometheus' text format
//	GET /healthz   "ok"
//
// It has no access control of its own: serve it on a loopback address,
// or behind the authentication the rest of the service uses.
func (s *Supervisor) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Status())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
