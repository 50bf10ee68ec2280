package state

// failedChan returns the channel closed once the store has failed, making
// it on first use (closed already when the store has failed).
func (c *core) failedChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failedCh == nil {
		c.failedCh = make(chan struct{})
		if c.failed != nil {
			close(c.failedCh)
		}
	}
	return c.failedCh
}

// noteFailed tells the waiters on failedChan that the store has failed.
// c.mu held; called once, where c.failed is first set.
func (c *core) noteFailed() {
	if c.failedCh != nil {
		close(c.failedCh)
	}
}

// failure returns the error the store failed with, or nil.
func (c *core) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

func (s *nsStore) Failed() <-chan struct{} { return s.c.failedChan() }
func (s *nsStore) Err() error              { return s.c.failure() }
