package sluice_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// killLimit is the limit the holder process and the test share. Its hold,
// 10s, is one the holder's renewals keep up with on a busy machine (they
// come every 2 to 3s), so that its slots are still held when the test
// looks; the test waits a hold for them after the kill.
var killLimit = algo.Concurrency{Count: 3, HoldFor: 10 * time.Second}

// TestHolderProcess is not a test: TestSlotsFreedAfterKill runs the test
// binary with SLUICE_HOLDER set to a Redis URL, and this takes every slot
// of the key with Acquire, says "held", waits for its permit to renew once
// (the lease end moves on), says "renewed" and waits to be killed.
func TestHolderProcess(t *testing.T) {
	url := os.Getenv("SLUICE_HOLDER")
	if url == "" {
		t.Skip("run by TestSlotsFreedAfterKill")
	}
	ctx := context.Background()
	st, err := redis.Open(ctx, url, redis.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lim, _ := sluice.NewLimiter(st, killLimit)
	p, err := lim.AcquireN(ctx, "job", killLimit.Count)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("held", p.ID())
	first := p.Result().ResetAfter
	start, _ := st.Now(ctx)
	for {
		now, _ := st.Now(ctx)
		r, err := st.Decide(ctx, store.Request{Key: "job", Plan: algo.MustCompile(killLimit)})
		if err == nil && now.Sub(start)+r.ResetAfter > first {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("renewed")
	select {}
}

// TestSlotsFreedAfterKill: a process holds every slot of a key on Redis,
// renewing them, and is killed with SIGKILL. By the store's clock, its
// slots' lease then ends no later than HoldFor after the kill, and from
// then the slots are free; the test then waits (without a deadline) until
// a decision at the store's clock sees them free, and reports how long
// that took since the kill.
func TestSlotsFreedAfterKill(t *testing.T) {
	if os.Getenv("SLUICE_HOLDER") != "" {
		t.Skip("in the holder process")
	}
	srv := redistest.Start(t)
	ctx := context.Background()
	st, err := redis.Open(ctx, srv.URL(), redis.Options{Timeout: time.Minute}) // the test's decisions: no default second to miss

	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderProcess$")
	cmd.Env = append(os.Environ(), "SLUICE_HOLDER="+srv.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "renewed" {
		if strings.HasPrefix(lines.Text(), "error") {
			t.Fatal(lines.Text())
		}
	}
	peek := func(at time.Time) algo.Result {
		t.Helper()
		r, err := st.Decide(ctx, store.Request{Key: "job", Plan: algo.MustCompile(killLimit), Time: at})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := peek(time.Time{}); r.Remaining != 0 {
		t.Fatalf("the holder holds %d of %d slots", killLimit.Count-r.Remaining, killLimit.Count)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()
	killed, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := peek(killed)
	if r.Remaining != 0 || r.ResetAfter <= 0 || r.ResetAfter > killLimit.HoldFor {
		t.Fatalf("at the kill: %+v; the lease must end within %v", r, killLimit.HoldFor)
	}
	end := killed.Add(r.ResetAfter)
	if r := peek(end.Add(-time.Microsecond)); r.Remaining != 0 {
		t.Fatalf("free before the lease ended: %+v", r)
	}
	if r := peek(end); r.Remaining != killLimit.Count {
		t.Fatalf("at the lease's end: %+v", r)
	}
	for peek(time.Time{}).Remaining != killLimit.Count {
		time.Sleep(10 * time.Millisecond)
	}
	freed, _ := st.Now(ctx)
	t.Logf("slots freed %v after SIGKILL by Redis TIME (lease end %v after it; hold_for %v)", freed.Sub(killed), r.ResetAfter, killLimit.HoldFor)
}
