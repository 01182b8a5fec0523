package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// open opens a store on srv for a test, at a minute's timeout unless opts
// gives one: the default second is a deadline a busy machine can outlast.
func open(t *testing.T, srv *redistest.Server, opts redis.Options) *redis.Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	st, err := redis.Open(context.Background(), srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestOptionsRefused: a prefix that picks a hash tag and a negative
// timeout, in-flight bound or lease size are errors (a negative one had
// quietly become the default), before any connection.
func TestOptionsRefused(t *testing.T) {
	for _, o := range []redis.Options{{Prefix: "a{b"}, {Timeout: -time.Second}, {MaxInFlight: -5}, {LeaseFor: time.Second, MaxLease: -3}} {
		if st, err := redis.New(nil, o); err == nil {
			st.Close()
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestKeysAreEscaped: a caller key cannot pick a hash tag or produce
// another key, and every key carries the prefix and an expiry.
func TestKeysAreEscaped(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{Prefix: "app:"})
	lim := algo.GCRA{Burst: 5, Count: 1, Period: time.Minute}
	for _, key := range []string{"a{b}", "a%7Bb%7D", "plain"} {
		if _, err := st.Decide(context.Background(), store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"app:a%7Bb%7D", "app:a%257Bb%257D", "app:plain"} {
		if n, err := srv.Do("EXISTS", want); err != nil || n != "1" {
			t.Errorf("EXISTS %s = %q, %v; want 1", want, n, err)
		}
		if ttl, err := srv.Do("PTTL", want); err != nil || strings.HasPrefix(ttl, "-") {
			t.Errorf("PTTL %s = %q, %v; want an expiry", want, ttl, err)
		}
	}
	if n, _ := srv.Do("DBSIZE"); n != "3" {
		t.Errorf("DBSIZE = %s, want 3", n)
	}
	if got := redis.KeyName("p:", "user:alex:trade", "user:alex"); got != "p:{user:alex}:trade" {
		t.Errorf("KeyName with tag = %q", got)
	}
	if got := redis.KeyName("p:", "u:{x}:t", "u:{x}"); got != "p:{u:%7Bx%7D}:t" {
		t.Errorf("KeyName with braces = %q", got)
	}
	if _, err := redis.New(st.Client(), redis.Options{Prefix: "{bad}"}); err == nil {
		t.Error("a prefix with braces was accepted")
	}
}

func TestHashSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{"foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363, "123456789": 12739} {
		if got := redis.HashSlot(key); got != want {
			t.Errorf("HashSlot(%q) = %d, want %d", key, got, want)
		}
	}
	// A consumers list lives in its level's hash slot.
	if redis.HashSlot(redis.ConsumersKey("sluice:", "user:alex:trade", "user:alex")) != redis.HashSlot(redis.KeyName("sluice:", "user:alex:trade", "user:alex")) {
		t.Error("the consumers list is in another hash slot than its key")
	}
}

// TestScriptReloadedAfterFlush: EVALSHA falls back to loading the script
// when the server has forgotten it (NOSCRIPT).
func TestScriptReloadedAfterFlush(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	lim := algo.FixedWindow{Count: 2, Window: noBoundary}
	ctx := context.Background()
	if _, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	r, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1})
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
	}
}

// TestDownOrSlowRedis: a decision returns an error within its context
// deadline when Redis is stopped or stalls; nothing hangs.
func TestDownOrSlowRedis(t *testing.T) {
	lim := algo.GCRA{Burst: 5, Count: 1, Period: time.Minute}
	check := func(t *testing.T, st *redis.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1})
		if err == nil {
			t.Fatal("decision succeeded against an unavailable Redis")
		}
	}
	t.Run("stopped", func(t *testing.T) {
		srv := redistest.Start(t)
		st := open(t, srv, redis.Options{})
		srv.Stop()
		check(t, st)
	})
	t.Run("stalled", func(t *testing.T) {
		srv := redistest.Start(t)
		st := open(t, srv, redis.Options{})
		srv.Pause(t)
		check(t, st)
	})
	t.Run("no deadline uses the store timeout", func(t *testing.T) {
		srv := redistest.Start(t)
		st := open(t, srv, redis.Options{Timeout: 150 * time.Millisecond})
		srv.Stop()
		if _, err := st.Decide(context.Background(), store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1}); err == nil {
			t.Fatal("decision succeeded against a stopped Redis")
		}
	})
	t.Run("open fails fast", func(t *testing.T) {
		port, _ := redistest.FreePort()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := redis.Open(ctx, "redis://127.0.0.1:"+strconv.Itoa(port)+"/0", redis.Options{})
		if err == nil {
			t.Fatal("Open succeeded with no server")
		}
	})
}

func TestBadInputIsAnErrorValue(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	if _, err := st.Decide(context.Background(), store.Request{Key: "", Plan: algo.MustCompile(algo.Gate{Interval: time.Second}), Cost: 1}); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := st.Decide(context.Background(), store.Request{Key: "k", Plan: new(algo.Plan), Cost: 1}); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("a plan Compile did not make: %v", err)
	}
}

// TestExpiryFollowsTheClockInUse: with Redis TIME a key expires with its
// state; with an explicit time it lives a minute longer, so a caller whose
// clock does not run with Redis's keeps its state.
func TestExpiryFollowsTheClockInUse(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	lim := algo.GCRA{Burst: 0, Count: 1, Period: 10 * time.Second}
	ctx := context.Background()
	for _, c := range []struct {
		key    string
		at     time.Time
		lo, hi int64 // PTTL bounds, ms
	}{
		{"redis-time", time.Time{}, 9000, 10000},
		{"explicit", time.UnixMicro(1800003000334587), 69000, 70000},
	} {
		start := time.Now()
		if _, err := st.Decide(ctx, store.Request{Key: c.key, Plan: algo.MustCompile(lim), Cost: 1, Time: c.at}); err != nil {
			t.Fatal(err)
		}
		v, err := srv.Do("PTTL", "sluice:"+c.key)
		// The TTL runs down while the test runs (by far more than a
		// millisecond on a busy machine): so does the lower bound.
		lo := c.lo - time.Since(start).Milliseconds()
		n, _ := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= lo || n > c.hi {
			t.Errorf("%s: PTTL %q %v, want in (%d, %d]", c.key, v, err, lo, c.hi)
		}
	}
}

// TestEveryKindBound: every kind in algo has a binding, whose script file
// is embedded, and runs its example limit (a kind without one panics).
func TestEveryKindBound(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	for _, k := range algo.Kinds() {
		l := k.Example()
		r, err := st.Decide(context.Background(), store.Request{Key: "every-kind:" + k.String(), Plan: algo.MustCompile(l), Cost: 1})
		if err != nil || !r.Allowed {
			t.Errorf("%v: %+v, %v", k, r, err)
		}
	}
}

// TestTLSAgainstPlaintextSaysSo: rediss:// against a Redis that does not
// speak TLS fails by the deadline with a word on what to do (it once said
// only "context deadline exceeded").
func TestTLSAgainstPlaintextSaysSo(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := redis.Open(ctx, "rediss://"+srv.Addr+"/0", redis.Options{})
	if err == nil || !strings.Contains(err.Error(), "use redis://") {
		t.Errorf("rediss:// against plaintext: %v, want a hint to use redis://", err)
	}
}

// TestCalendarWindowOnRedisTime: a fixed window of the calendar decided by
// Redis TIME (no explicit time): the store gives the windows around its own
// clock, and Redis picks the one that holds its time; the answer says the
// time to the next midnight in the zone.
func TestCalendarWindowOnRedisTime(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	ctx := context.Background()
	req := store.Request{Key: "calendar:now", Plan: algo.MustCompile(algo.FixedWindow{Count: 2, Calendar: algo.Calendar{Unit: "day", TimeZone: "Asia/Kolkata"}}), Cost: 1}
	loc, _ := time.LoadLocation("Asia/Kolkata")
	for i, want := range []bool{true, true, false} {
		t1 := time.Now()
		r, err := st.Decide(ctx, req)
		t2 := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		// Redis decided at a time between t1 and t2 (its clock is this
		// machine's, give or take 50ms): the reset is the time from it to
		// the next midnight in Kolkata.
		y, m, d := t1.In(loc).Date()
		end := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		if t2.After(end) {
			return // a midnight passed during the call: nothing to judge
		}
		slack := 50 * time.Millisecond
		if r.Allowed != want || r.ResetAfter < end.Sub(t2)-slack || r.ResetAfter > end.Sub(t1)+slack {
			t.Fatalf("decision %d: %+v, want allowed %v and a reset at %v", i, r, want, end)
		}
	}
}
