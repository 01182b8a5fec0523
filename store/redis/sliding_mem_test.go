package redis_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// memoryCase is a limit whose key's MEMORY USAGE is measured after n
// actions spread evenly over span.
type memoryCase struct {
	name  string
	limit algo.Limit
	span  time.Duration
}

var memoryCases = []memoryCase{
	{"sliding_log exact, 1 limit", algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactLimit, Window: time.Hour}}}, time.Hour},
	{"sliding_log sampled (60 buckets), 1 limit", algo.SlidingLog{Limits: []algo.Window{{Count: 1_000_000, Window: time.Hour}}, Buckets: 60}, time.Hour},
	{"sliding_log exact, 2 limits (1h, 1m)", algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactLimit, Window: time.Hour}, {Count: algo.MaxExactLimit, Window: time.Minute}}}, time.Hour},
	{"sliding_log sampled (60 buckets), 2 limits (1h, 1m)", algo.SlidingLog{Limits: []algo.Window{{Count: 1_000_000, Window: time.Hour}, {Count: 1_000_000, Window: time.Minute}}, Buckets: 60}, time.Hour},
	{"window_counter 1s slices, windows 1s/10s/15s", algo.WindowCounter{Limits: []algo.Window{{Count: 1_000_000, Window: time.Second}, {Count: 5_000_000, Window: 10 * time.Second}, {Count: 7_000_000, Window: 15 * time.Second}}}, 15 * time.Second},
}

// memoryUsage records n actions of cost 1 on a fresh key, spread evenly
// over the case's span and all admitted, and returns the key's MEMORY
// USAGE (SAMPLES 0: every element counted) and encoding.
func memoryUsage(t *testing.T, srv *redistest.Server, st *redis.Store, c memoryCase, n int) (int64, string) {
	key := "mem:" + strconv.Itoa(n) + ":" + c.name
	step := c.span / time.Duration(n)
	at := time.UnixMicro(1800003000334587)
	for i := 0; i < n; i++ {
		at = at.Add(step)
		r, err := st.Decide(context.Background(), store.Request{Key: key, Plan: algo.MustCompile(c.limit), Cost: 1, Time: at})
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		if !r.Allowed {
			t.Errorf("%s: action %d denied", c.name, i)
			return 0, ""
		}
	}
	name := redis.StateKey(redis.DefaultPrefix, store.Request{Key: key, Plan: algo.MustCompile(c.limit)})
	v, err := srv.Do("MEMORY", "USAGE", name, "SAMPLES", "0")
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	b, err := strconv.ParseInt(v, 10, 64)
	if err != nil || b <= 0 {
		t.Errorf("%s: MEMORY USAGE of %s: %q %v", c.name, name, v, err)
	}
	enc, _ := srv.Do("OBJECT", "ENCODING", name)
	return b, enc
}

// TestWindowedMemory measures Redis memory per key after 100 and 10,000
// actions (and 100,000 with SLUICE_MEMORY=full, which also prints the
// table for bench/NOTES.md) and requires the sampled logs' and the window
// counter's to stay within 2x whatever the traffic: memory bounded by
// the buckets, not by the actions.
func TestWindowedMemory(t *testing.T) {
	counts := []int{100, 10_000}
	if os.Getenv("SLUICE_MEMORY") == "full" {
		counts = append(counts, 100_000)
	}
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	bytes := make([][]int64, len(memoryCases))
	encs := make([][]string, len(memoryCases))
	var wg sync.WaitGroup
	for i, c := range memoryCases {
		bytes[i], encs[i] = make([]int64, len(counts)), make([]string, len(counts))
		for j, n := range counts {
			if exact(c.limit) && n > algo.MaxExactLimit {
				continue // beyond an exact log's bound
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				bytes[i][j], encs[i][j] = memoryUsage(t, srv, st, c, n)
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| limit |")
	for _, n := range counts {
		fmt.Fprintf(&table, " %d actions |", n)
	}
	fmt.Fprintf(&table, "\n|---|%s\n", strings.Repeat("---|", len(counts)))
	for i, c := range memoryCases {
		fmt.Fprintf(&table, "| %s |", c.name)
		for j := range counts {
			fmt.Fprintf(&table, " %d B (%s) |", bytes[i][j], encs[i][j])
		}
		table.WriteString("\n")
		if exact(c.limit) {
			continue
		}
		lo, hi := bytes[i][0], bytes[i][0]
		for _, b := range bytes[i] {
			lo, hi = min(lo, b), max(hi, b)
		}
		if hi > 2*lo {
			t.Errorf("%s: %d to %d bytes per key over %v actions: more than 2x", c.name, lo, hi, counts)
		}
	}
	t.Logf("Redis MEMORY USAGE per key:\n%s", table.String())
}

// exact reports whether l is an exact sliding log, whose memory grows with
// the actions it holds.
func exact(l algo.Limit) bool {
	sl, ok := l.(algo.SlidingLog)
	return ok && sl.Buckets == 0
}
