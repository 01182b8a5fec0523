package answer

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestDeadlineCtxLazy(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	var c deadlineCtx
	c.init(parent, time.Hour)
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline %v %v", d, ok)
	}
	if c.Err() != nil || c.Value(ctxKey{}) != "v" {
		t.Fatal("fresh context")
	}
	if c.inner != nil {
		t.Fatal("inner made without Done")
	}
	var lazy deadlineCtx
	lazy.init(parent, time.Hour)
	if lazy.Value(ctxKey{}) != "v" || lazy.deadline != 0 {
		t.Fatal("the clock started before anyone asked")
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("done early")
	default:
	}
	if c.Value(ctxKey{}) != "v" {
		t.Fatal("Value through inner")
	}
	c.release()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after release: %v", c.Err())
	}
}

func TestDeadlineCtxExpires(t *testing.T) {
	var c deadlineCtx
	c.init(context.Background(), 10*time.Millisecond)
	c.Deadline() // the clock starts
	time.Sleep(20 * time.Millisecond)
	// Without Done: Err still reports the deadline, and Done is closed.
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v", c.Err())
	}
	<-c.Done() // closed after the deadline (a test that hangs here fails by go test's timeout)

	var c2 deadlineCtx
	c2.init(context.Background(), 20*time.Millisecond)
	<-c2.Done()
	if !errors.Is(c2.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(&c2), context.DeadlineExceeded) {
		t.Fatalf("Err %v Cause %v", c2.Err(), context.Cause(&c2))
	}
}

func TestDeadlineCtxParent(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	var c deadlineCtx
	c.init(parent, time.Hour)
	child, cancelChild := context.WithCancel(&c) // derived: must follow c
	defer cancelChild()
	cancel()
	<-child.Done() // cancelled with the parent
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v", c.Err())
	}

	// An earlier parent deadline wins.
	p2, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	var c2 deadlineCtx
	c2.init(p2, time.Hour)
	if d, _ := c2.Deadline(); time.Until(d) > time.Millisecond {
		t.Fatalf("deadline %v away", time.Until(d))
	}

	// Released before anyone asked for Done: Done is closed at once.
	var c3 deadlineCtx
	c3.init(context.Background(), time.Hour)
	c3.release()
	if !errors.Is(c3.Err(), context.Canceled) {
		t.Fatalf("Err %v", c3.Err())
	}
	select {
	case <-c3.Done():
	default:
		t.Fatal("Done open after release")
	}
}
