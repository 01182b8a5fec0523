package answer

import (
	"context"
	"sync"
	"time"
)

// deadlineCtx is context.WithTimeout(parent, timeout) made lazily. The
// deadline is fixed when the checker first consults the context (Deadline,
// Done or Err), and the real context (a timer and a channel, three
// allocations) is made only when someone asks for Done. A checker that
// never blocks, such as one on the memory store, never asks, so bounding
// it costs nothing, not even a clock read; one that
// waits on the network, such as the Redis store, asks before it waits and
// gets an ordinary deadline context. The timeout so runs from the
// checker's first look at the context, which for the sluice checkers is
// when they call the store, microseconds into the check.
//
// What it pays: bench/NOTES.md, "What each micro-optimisation pays";
// ctx_test.go holds it to WithTimeout's answers.
//
// It lives inside a per-request allocation and is never reused, so a
// checker that keeps it past Check (it should not) sees a cancelled
// context rather than another request's.
type deadlineCtx struct {
	parent  context.Context
	timeout time.Duration

	mu       sync.Mutex
	deadline int64           // Unix ns; 0 until first needed
	inner    context.Context // nil until Done is called
	cancel   context.CancelFunc
	done     bool // release was called: Err reports Canceled
}

func (c *deadlineCtx) init(parent context.Context, timeout time.Duration) {
	c.parent, c.timeout = parent, timeout
}

// deadlineLocked fixes the deadline on first use; c.mu is held.
func (c *deadlineCtx) deadlineLocked() time.Time {
	if c.deadline == 0 {
		d := time.Now().Add(c.timeout)
		if pd, ok := c.parent.Deadline(); ok && pd.Before(d) {
			d = pd
		}
		c.deadline = d.UnixNano()
	}
	return time.Unix(0, c.deadline)
}

// release cancels the context once the check is over.
func (c *deadlineCtx) release() {
	c.mu.Lock()
	c.done = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadlineLocked(), true
}

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if d, ok := c.parent.Deadline(); ok && !d.After(c.deadlineLocked()) {
			// The parent's deadline comes first: its end is the end, and
			// the caller sees the parent done, not a deadline of ours.
			c.inner, c.cancel = context.WithCancel(c.parent)
		} else {
			c.inner, c.cancel = context.WithDeadline(c.parent, c.deadlineLocked())
		}
		if c.done {
			c.cancel()
		}
	}
	return c.inner.Done()
}

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	inner, done, deadline := c.inner, c.done, c.deadlineLocked()
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	if done {
		return context.Canceled
	}
	return nil
}

// Value answers from the real context once it exists, so that
// context.Cause and the cancellation of derived contexts (which find their
// parent's cancelCtx through Value) see it; before that, from the parent.
func (c *deadlineCtx) Value(key any) any {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return c.parent.Value(key)
}
