package cluster

import (
	"context"
	"sync"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
)

// partitionSource is the feed.Source a partition's server is made with.
// The JetStream source behind it is made once the server has opened the
// partition's store, since its consumer is named by the store's lease
// token (NAME-P-TOKEN); until then it holds what the framework gives it.
// Once the source has opened (its consumer exists and starts where the
// store says), opened is called, once: the older owners' consumers are
// deleted then.
type partitionSource struct {
	mu     sync.Mutex
	inner  *natsfeed.Source
	closed bool

	opened     func()
	openedDone bool // the runner's own
}

// set makes src the source; false when the server closed the source first.
func (s *partitionSource) set(src *natsfeed.Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inner = src
	return true
}

func (s *partitionSource) get() *natsfeed.Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner
}

// ResumeFrom hands the stores' records to the JetStream source.
func (s *partitionSource) ResumeFrom(points []feed.ResumePoint) error {
	src := s.get()
	if src == nil {
		return errNotSet
	}
	return src.ResumeFrom(points)
}

// Poll reads from the JetStream source, and tells opened once it opened.
func (s *partitionSource) Poll(ctx context.Context, items []feed.Item) (int, error) {
	src := s.get()
	if src == nil {
		return 0, errNotSet
	}
	if !s.openedDone {
		if err := src.Open(ctx); err != nil {
			return 0, err
		}
		if src.Stats().Start == 0 {
			return 0, nil // the stream does not exist yet
		}
		s.openedDone = true
		if s.opened != nil {
			s.opened()
		}
	}
	return src.Poll(ctx, items)
}

// Commit acknowledges through the JetStream source.
func (s *partitionSource) Commit(epoch uint64, position int64) error {
	if src := s.get(); src != nil {
		return src.Commit(epoch, position)
	}
	return nil
}

// Rereadable reports true: the stream keeps what was not committed.
func (s *partitionSource) Rereadable() bool { return true }

// Status is the JetStream source's.
func (s *partitionSource) Status() feed.Status {
	if src := s.get(); src != nil {
		return src.Status()
	}
	return feed.Status{State: feed.StateStarting}
}

// Close closes the JetStream source.
func (s *partitionSource) Close() error {
	s.mu.Lock()
	src := s.inner
	s.closed = true
	s.mu.Unlock()
	if src != nil {
		return src.Close()
	}
	return nil
}
