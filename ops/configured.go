package ops

import (
	"context"
	"io"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// FromConfig returns the listener Config of the operator settings c of a
// server's config (framework.Config.Operator, YAML "operator:"), reporting
// on srv with its groups' stores. Its zero values take the defaults here
// (DefaultAddr, DefaultMaxConns, the Default timeouts, DefaultRefresh).
func FromConfig(srv *framework.Server, c framework.OperatorConfig) Config {
	return Config{
		Addr:              c.Addr,
		Token:             c.Token,
		AllowedHosts:      c.AllowedHosts,
		Server:            srv,
		Logger:            srv.Logger(),
		Watch:             c.Watch,
		Refresh:           c.Refresh,
		MaxConns:          c.MaxConns,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
	}
}

// Start starts the listener of the operator settings c for srv, and is a
// framework.Config.StartOperator: the server calls it at its Start and
// closes the listener once it has stopped. Its histograms stay empty
// unless the server and the stores feed them: Use wires them.
func Start(ctx context.Context, srv *framework.Server, c framework.OperatorConfig) (io.Closer, error) {
	return start(ctx, srv, c, nil)
}

func start(ctx context.Context, srv *framework.Server, c framework.OperatorConfig, obs *Observer) (io.Closer, error) {
	cfg := FromConfig(srv, c)
	cfg.Observer = obs
	l, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := l.Start(ctx); err != nil {
		return nil, err
	}
	return l, nil // it logs the address it listens on

}

// Use makes a server made from cfg serve the operator listener that
// cfg.Operator describes (YAML "operator:"), with the latency and batch
// histograms fed: it sets cfg.StartOperator, and, where they are not set,
// cfg.Observer and the Observer of each group's store options (a copy of
// them), all to one new Observer. Call it before framework.New; it does
// nothing when cfg.Operator is nil.
//
//	cfg, err := framework.LoadConfigFile("orders.yaml")
//	...
//	ops.Use(&cfg)
//	srv, err := framework.New(cfg, processors)
func Use(cfg *framework.Config) {
	if cfg.Operator == nil {
		return
	}
	obs, ok := cfg.Observer.(*Observer)
	if !ok {
		obs = NewObserver()
	}
	if cfg.Observer == nil {
		cfg.Observer = obs
	}
	for i := range cfg.Groups {
		g := &cfg.Groups[i]
		if g.Store == "" {
			continue
		}
		var o state.Options
		if g.StoreOptions != nil {
			o = *g.StoreOptions
		}
		if o.Observer == nil {
			o.Observer = obs.ForStore(g.Name)
		}
		g.StoreOptions = &o
	}
	cfg.StartOperator = func(ctx context.Context, srv *framework.Server, c framework.OperatorConfig) (io.Closer, error) {
		return start(ctx, srv, c, obs)
	}
}
