package queue

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// benchStores runs b on the memory store and a real redis-server.
func benchStores(b *testing.B, f func(b *testing.B, st store.Store)) {
	b.Run("memory", func(b *testing.B) {
		st := memory.New()
		defer st.Close()
		f(b, st)
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		st := openRedisStore(b, srv.URL())
		f(b, st)
		// Redis's own time per script call, from INFO commandstats.
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		if m := evalshaUsec.FindStringSubmatch(info); m != nil {
			us, _ := strconv.ParseFloat(m[1], 64)
			b.ReportMetric(us, "script-µs/call")
		}
	})
}

var evalshaUsec = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([0-9.]+)`)

// BenchmarkAdd: admissions from parallel producers (GOMAXPROCS x 16
// goroutines) into a queue large enough never to fill; entries/s.
func BenchmarkAdd(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		q, err := Open(context.Background(), st, "bench-add-"+strconv.Itoa(b.N), Options{Capacity: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		fields := map[string]string{"job": "resize", "id": "42"}
		b.SetParallelism(16)
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := q.Add(context.Background(), fields, ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "entries/s")
	})
}

// BenchmarkDrain: b.N entries queued first, then 1 or 4 workers (Work,
// no-op handler, 16 entries a read) drain them to the end; entries/s from the
// first read to the last ack.
func BenchmarkDrain(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			benchStores(b, func(b *testing.B, st store.Store) {
				ctx := context.Background()
				q, err := Open(ctx, st, "bench-drain-"+strconv.Itoa(b.N), Options{Capacity: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				adders := make(chan struct{}, 64)
				for range b.N {
					adders <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-adders }()
						if _, err := q.Add(ctx, nil, ""); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				var left atomic.Int64
				left.Store(int64(b.N))
				wctx, stop := context.WithCancel(ctx)
				defer stop()
				b.ResetTimer()
				start := time.Now()
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := q.Work(wctx, func(context.Context, Entry) error {
							if left.Add(-1) == 0 {
								stop()
							}
							return nil
						}, WorkerOptions{PerRead: 16})
						if err != nil && !errors.Is(err, context.Canceled) {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "entries/s")
			})
		})
	}
}
