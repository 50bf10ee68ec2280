// Package checkpoint lets a processor that saves its state asynchronously or
// in batches hold a feed's commits until that state is durable.
//
// By default a line counts as processed when its handler returns. A
// processor that saves later takes a hold on (feed, group); from then on the
// group's queue counts as processed only up to the last [Mark] it declared
// durable:
//
//	cp := checkpoints.Hold("orders", "orders-agent") // a *Set; in a framework processor, fc.Checkpoint("orders")
//	...
//	m := cp.Mark()           // what the queue has finished so far
//	go func() {
//		saveBatch(batch)      // make the state durable
//		cp.DurableThrough(m)  // any goroutine
//	}()
//
// Marks only advance. A group that subscribes again (restarted) ignores
// marks taken before. The framework binds each subscriber queue's progress
// to its checkpoint and consults [Checkpoint.Durable] when it computes the
// position every subscriber has finished. A program that uses a store
// without the framework plays the framework's part itself: it binds its
// reader's progress with [Set.Bind] (see the example). The rest of the
// framework's part (being told when a durable mark moves, telling which
// subscription a mark belongs to) is in the module's internal/hold, whose
// types these are defined on: it is not this package's API.
//
// The package knows nothing of files or stores.
package checkpoint
