package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/cluster"
)

// A worker told to stop before it joined (its ctx done while it waits for
// the table of workers, or for a killed worker of its name to time out)
// stops cleanly: Run returns nil, as for a stop after it joined, and holds
// nothing.
func TestRunStoppedBeforeJoiningIsClean(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config("early", 2*time.Second)
	s, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run with its ctx done before it joined: %v; want nil (a clean stop)", err)
	}
	if st := s.Status(); st.Takeovers != 0 {
		t.Fatalf("a worker stopped before it joined took %d partitions", st.Takeovers)
	}
}
