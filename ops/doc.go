// Package ops is the operator's side of a running tidemark server: an
// opt-in HTTP listener that serves Prometheus metrics, every feed's status
// as JSON and as a small page, liveness and readiness probes, and the
// operator command that releases a removed consumer's hold.
//
// # Endpoints
//
//	GET  /                      the status as a page that reloads itself
//	GET  /status                the status of every feed, group and store ([Report])
//	GET  /status/{feed}         one feed's status ([FeedReport])
//	GET  /metrics               Prometheus metrics (names below)
//	GET  /livez, /healthz       "ok": the process is alive and its listener answers
//	GET  /readyz                200 when the server is ready, 503 when not,
//	                            with one line per check (below)
//	POST /feeds/{feed}/release  consumer=<group>: give up the hold a removed
//	                            consumer has on the feed's pointer
//	GET  /stores                the stores reported ([StoreInfo])
//	GET  /stores/{store}        the store's namespaces, applied records, buckets,
//	                            keys and values ([StoreListing], [ShowOptions])
//	POST /stores/{store}/backup dir=<folder>: a consistent copy of the store
//	                            ([state.Store.Backup]), written on the server's host
//
// The store endpoints read on snapshots of the durable state, beside the
// running processors, without blocking them: a listing decodes the keys
// and values of a bucket that a [state.Table] wrote (its codecs are
// recorded in the store), and holds at most limit keys per bucket
// ([DefaultShowLimit] by default; from= pages on). A backup is written into
// a new folder, renamed into place once complete: opening it is a restore.
// tidemark store show and tidemark store backup take --addr to use them,
// and work on a stopped server's store folder as well.
//
// A release is what the spec calls delivery.release: the feed's pointer may
// then move past the lines the removed consumer left unfinished, and that
// consumer never processes them. Use it when a run must complete without a
// restart; a restart instead re-delivers the held lines to every consumer.
// The command-line tool does the same: tidemark release --addr HOST:PORT
// --feed F --consumer G.
//
// # Health
//
// /readyz answers 503 while the server is not ready: it has stopped, a
// feed has not started reading or is stopped, stalled or failing to write
// its pointer, a group is dead, fenced or restarting, a store has failed a
// commit, or a status could not be read. A feed waiting for its input to
// appear is ready. The body is plain text, a line per check, then the
// verdict:
//
//	[+]feed orders ok
//	[-]feed payments: stalled: a removed consumer left unprocessed items: audit (15 items); restart, or Release the hold
//	[+]group ledger ok
//	[-]group audit: is fenced: processor audit failed on feed payments at epoch 1764…, position 4096: …
//	readyz check failed: 2 of 4 checks
//
// The verdict is [Report.Health], computed from the same report /status
// serves: tidemark status --check computes it from /status and exits 3
// with the same reasons. /livez (and its older name /healthz) answers "ok"
// whenever the process answers at all: restart on liveness, route or alert
// on readiness.
//
// # Access
//
// The listener binds 127.0.0.1 unless Config.Addr says otherwise.
//
// Without a Config.Token it serves loopback clients only: a request from
// any other address is refused with 403.
//
// With a token it serves every address, and demands the token on every
// request, reads included, loopback included: as "Authorization: Bearer
// <token>", or as the password of HTTP Basic authentication with any user
// name, which is what a browser prompts for on the page. A Prometheus
// server scrapes with the token as a bearer:
//
//	scrape_configs:
//	  - job_name: tidemark
//	    authorization:
//	      type: Bearer
//	      credentials_file: /etc/prometheus/tidemark.token
//	    static_configs:
//	      - targets: ["tidemark-1.example.net:9100"]
//
// and tidemark status and release take --token (or $TIDEMARK_TOKEN).
//
// The probes are the exception: a prober (a kubelet, a load balancer)
// seldom holds a secret, so /livez and /healthz answer without the token
// (they say nothing but "ok"), and so does /readyz, with its status code
// and verdict alone; with the token, /readyz names the feeds and groups
// and says why. Without a token, the probes too serve loopback clients
// only: to probe from another host, set a token.
//
// Either way, a request must name in its Host header localhost, an IP
// address, or one of Config.AllowedHosts (for the example above,
// "tidemark-1.example.net"); any other is refused with 403. A web page
// that points its own name at the listener's address (DNS rebinding) sends
// its own name, so it cannot read the status even from the loopback
// interface; an IP address cannot be rebound. Mutating requests a browser
// sends from another origin are refused as well (net/http's
// CrossOriginProtection), so a web page cannot release a hold. Behind a
// reverse proxy on the same host every request looks like loopback: set a
// token there.
//
// # Limits
//
// The listener's own server (Start) holds under a flood of connections.
// It keeps at most Config.MaxConns connections open (DefaultMaxConns,
// 100): at the cap it closes the connection that has been quiet the
// longest, one that has not sent a whole request header yet or a
// keep-alive connection between requests, so that a new client is served
// instead of waiting behind connections that do nothing. Connections in a
// request are never closed for room; their time is bounded by
// ReadHeaderTimeout (5 s), ReadTimeout (10 s, the body included),
// WriteTimeout (30 s, to the end of the response) and, between requests,
// IdleTimeout (60 s). A request body is read only by a release and a backup, and is at
// most [MaxRequestBody] (64 KiB, else 413); a GET with a body is refused
// (400), and a refused request's body is never read: its connection is
// closed after the answer. Refusals are counted by reason and logged at
// most once a minute per reason, so a flood does not flood the log.
//
// A host that serves [Listener.Handler] on its own server keeps the access
// rules and the body rules; the connection cap and the timeouts are then
// that server's to set.
//
// # Metrics
//
// Registered on a private registry, and on Config.Registerer when set;
// never on the global registry. Read from status at each scrape:
//
//	per feed (label feed)
//	  tidemark_feed_read_position_bytes, _pointer_position_bytes,
//	  _committed_position_bytes, _epoch, _file_size_bytes, _behind_bytes,
//	  _pending_acks, _commit_lag_lines, _consumers, _stalled (0/1), _settled (0/1),
//	  _state{state} (1 for the current state),
//	  _lines_read_total, _lines_delivered_total, _lines_dropped_total,
//	  _lines_failed_total, _lines_skipped_total, _lines_oversize_total,
//	  _partial_lines_dropped_total, _releases_total, _poll_errors_total,
//	  _commit_errors_total, _reopens_total{reason}
//	per file of a feed that follows a set of files (labels feed, file: its path)
//	  tidemark_file_read_position_bytes, _pointer_position_bytes,
//	  _size_bytes, _behind_bytes, _lines_read_total, _caught_up (0/1)
//	tidemark_build_info{version, revision, goversion}  1: the tidemark module's
//	  version in the program (runtime/debug.ReadBuildInfo), its VCS revision
//	  when tidemark is the main module, and the Go version
//	per group (label group)
//	  tidemark_group_state{state} (1 for the current state: running, fenced,
//	  dead, removed, restarting)
//	per feed and group (labels feed, group)
//	  tidemark_queue_depth, _lines_processed_total, _failures_total,
//	  _lines_skipped_total, _lines_skipped_by_reason_total{reason}
//	  (framework.RejectReason), _lines_dropped_total, _fenced (0/1),
//	  _removed_held_items (removed queues that still hold the pointer)
//	per store (label store; durable positions also by feed)
//	  tidemark_store_batches_committed_total, _failed_commits_total,
//	  _failed (0/1), _applied_total, _redeliveries_skipped_total,
//	  _redeliveries_skipped_by_lineage_total, _staged, _backpressure_total,
//	  _cache_hits_total, _cache_misses_total, _cache_budget_bytes,
//	  _durable_position_bytes{feed}, _durable_epoch{feed}
//	the listener itself
//	  tidemark_ops_status_errors (feeds whose status failed at this scrape),
//	  tidemark_ops_connections (open), _connections_evicted_total (closed
//	  to make room at the cap), _requests_refused_total{reason}
//	  (non_loopback_client, host, token, body)
//
// Fed by the framework and the stores through an [Observer]:
//
//	tidemark_group_handle_seconds{group}  handling latency per line
//	tidemark_store_commit_seconds{store}  commit latency per batch
//	tidemark_store_batch_lines{store}     deliveries per batch
//
// ObserveHandle costs about 90 ns a line on one core of the CI machine
// (60 ns a call from two goroutines at once; BenchmarkObserveHandle), and a
// scrape of 10 feeds about 0.9 ms (BenchmarkScrape).
//
// Counters restart from zero with the process, as the status they are read
// from does. An epoch is a nanosecond timestamp: as a float metric it is
// exact to about a microsecond, enough to see that it changed.
//
// # Logs
//
// A [Watcher] (or Config.Watch on the listener) reads the status
// periodically and logs one record per stall, end of a stall, new epoch,
// reopen, drop and failed commit, with the feed, group, epoch and position
// as attributes: the records to alert on. The listener itself logs its
// start and stop, every release and every refused request.
//
// # Use
//
//	srv, _ := framework.New(cfg, processors)
//	_ = srv.Start(ctx)
//	l, err := ops.New(ops.Config{Server: srv, Feeds: []string{"orders"}})
//	if err != nil { ... }
//	if err := l.Start(ctx); err != nil { ... }
//	defer l.Close()
//	fmt.Println("operator endpoint on", l.Addr())
//
// Or from the server's config (YAML "operator:", framework.OperatorConfig:
// addr, token, allowedHosts, maxConns, the timeouts, watch, refresh): [Use]
// sets the config's StartOperator and wires the histograms, and the server
// starts the listener at Start and closes it once stopped:
//
//	cfg, err := framework.LoadConfigFile("orders.yaml")
//	if err != nil { ... }
//	ops.Use(&cfg)
//	srv, err := framework.New(cfg, processors)
package ops
