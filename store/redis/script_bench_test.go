package redis

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// Benchmarks of the decision scripts' own cost: decide.lua and coalesce.lua
// run directly, one call at a time, and Redis's commandstats give the time
// spent in the scripts (script-ns/decision), without the round trip and the
// client that ns/op also holds. They measure, they never fail on a timing:
//
//	go test -run '^$' -bench 'DecideScript|CoalesceScript' -count 5 ./store/redis
//
// The levels: one GCRA; or five, which take every path of the levels'
// loop: a GCRA, a fixed window with a block, a debt, a debt that stops and
// a shadow token bucket. Keys are random among 1000 per level, the limits
// high: every level is ok and committed. "denied" repeats one key whose
// first level has a limit of 1: the others are checked, not committed.

// scriptLevels are the benchmarks' sets of levels.
var scriptLevels = []struct {
	name   string
	random bool
	levels []store.Request
}{
	{"1level", true, []store.Request{{Plan: algo.MustCompile(algo.GCRA{Burst: 1_000_000, Count: 1_000_000, Period: time.Second})}}},
	{"5levels", true, fiveLevels(1_000_000)},
	{"5levels-denied", false, fiveLevels(1)},
}

func fiveLevels(first int64) []store.Request {
	big := int64(1_000_000)
	return []store.Request{
		{Plan: algo.MustCompile(algo.GCRA{Burst: first, Count: first, Period: time.Hour})},
		{Plan: algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: big, Window: time.Hour}, Block: algo.Block{For: time.Second}})},
		{Plan: algo.MustCompile(algo.Debt{Limit: algo.GCRA{Burst: big, Count: big, Period: time.Second}})},
		{Plan: algo.MustCompile(algo.Debt{Limit: algo.TokenBucket{Burst: big, Count: big, Period: time.Second}}), Stop: true},
		{Plan: algo.MustCompile(algo.TokenBucket{Burst: big, Count: big, Period: time.Second}), Shadow: true},
	}
}

// scriptDecision returns decide.lua's keys and arguments for the levels
// on the n-th of 1000 keys, and the kinds they use.
func scriptDecision(levels []store.Request, n int) (kindSet, []string, []string) {
	var set kindSet
	args := []string{""}
	keys := make([]string, len(levels))
	for i, r := range levels {
		r.Key, r.Cost = "l"+strconv.Itoa(i)+":"+strconv.Itoa(n%1000), 1
		levels[i] = r
		keys[i] = r.Key
		set |= 1 << r.Plan.Kind()
		args = appendLevel(args, bindings[r.Plan.Kind()], r)
	}
	keys, err := blockKeys(levels, keys, false)
	if err != nil {
		panic(err)
	}
	return set, keys, args
}

func BenchmarkDecideScript(b *testing.B) {
	srv := redistest.Start(b)
	c := redistest.Client(b, srv.URL())
	for _, l := range scriptLevels {
		b.Run(l.name, func(b *testing.B) {
			levels := append([]store.Request(nil), l.levels...)
			benchScript(b, srv, 1, func(n int) error {
				if !l.random {
					n = 0
				}
				set, keys, args := scriptDecision(levels, n)
				return decideDriver.script(set).Exec(context.Background(), c, keys, args).Error()
			})
		})
	}
}

// BenchmarkCoalesceScript: coalesce.lua with 8 decisions a call, each as
// BenchmarkDecideScript's.
func BenchmarkCoalesceScript(b *testing.B) {
	const group = 8
	srv := redistest.Start(b)
	c := redistest.Client(b, srv.URL())
	for _, l := range scriptLevels {
		b.Run(l.name, func(b *testing.B) {
			levels := append([]store.Request(nil), l.levels...)
			benchScript(b, srv, group, func(n int) error {
				var all kindSet
				keys, args := []string{}, []string{strconv.Itoa(group)}
				for d := range group {
					m := n*group + d
					if !l.random {
						m = d // one key a decision, each denied after its first
					}
					set, k, a := scriptDecision(levels, m)
					all |= set
					keys = append(keys, k...)
					args = append(append(args, a[0], strconv.Itoa(len(levels))), a[1:]...)
				}
				return coalesceDriver.script(all).Exec(context.Background(), c, keys, args).Error()
			})
		})
	}
}

var scriptStatsRe = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+)`)

// benchScript runs call b.N times, its n-th call given n, and reports the
// time Redis spent in the scripts per decision (each call decides
// decisions).
func benchScript(b *testing.B, srv *redistest.Server, decisions int, call func(n int) error) {
	if err := call(0); err != nil { // loads the script
		b.Fatal(err)
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		if err := call(n); err != nil {
			b.Fatal(err)
		}
		n++
	}
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec int64
	for _, m := range scriptStatsRe.FindAllStringSubmatch(info, -1) {
		c, _ := strconv.ParseInt(m[1], 10, 64)
		u, _ := strconv.ParseInt(m[2], 10, 64)
		calls, usec = calls+c, usec+u
	}
	if calls > 0 {
		b.ReportMetric(float64(usec)*1000/float64(calls)/float64(decisions), "script-ns/decision")
	}
}
