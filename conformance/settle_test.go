package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// TestSettleOnce: a ticket settles once, on both stores: its changes are
// made the first time, and a second settle, a ticket never issued and an
// expired one change nothing.
func TestSettleOnce(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := st.(store.Settler)
			lim := store.Request{Key: "settle:" + name, Plan: algo.MustCompile(algo.FixedWindow{Count: 10, Window: time.Hour})}
			now, err := st.(store.Clock).Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			remaining := func() int64 {
				t.Helper()
				r, err := st.Decide(ctx, lim)
				if err != nil {
					t.Fatal(err)
				}
				return r.Remaining
			}
			charge := lim
			charge.Cost = 8
			if _, err := st.Decide(ctx, charge); err != nil {
				t.Fatal(err)
			}
			tk := store.Request{Key: "settle:" + name + "#t1", Tag: "settle:" + name}
			if err := s.Issue(ctx, tk, time.Hour); err != nil {
				t.Fatal(err)
			}
			back := lim
			back.Cost, back.Time = 5, now // given back where the charge was counted
			for i, want := range []bool{true, false} {
				ok, err := s.Settle(ctx, tk, []store.Request{back}, algo.Reward)
				if err != nil || ok != want {
					t.Fatalf("settle %d: %v %v, want %v", i, ok, err, want)
				}
			}
			if r := remaining(); r != 7 {
				t.Fatalf("after one settle giving back 5 of 8: %d remaining, want 7", r)
			}
			if ok, err := s.Settle(ctx, store.Request{Key: "settle:" + name + "#forged", Tag: "settle:" + name}, []store.Request{back}, algo.Reward); ok || err != nil {
				t.Fatalf("a ticket never issued settled: %v %v", ok, err)
			}
			exp := store.Request{Key: "settle:" + name + "#t2", Tag: "settle:" + name}
			if err := s.Issue(ctx, exp, store.MinTicket); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * store.MinTicket) // at least this long passes, on any clock
			if ok, err := s.Settle(ctx, exp, []store.Request{back}, algo.Reward); ok || err != nil {
				t.Fatalf("an expired ticket settled: %v %v", ok, err)
			}
			if r := remaining(); r != 7 {
				t.Fatalf("refused settles changed the key: %d remaining, want 7", r)
			}
			// A penalty: the excess of a real cost over its estimate.
			over := store.Request{Key: "settle:" + name + "#t3", Tag: "settle:" + name}
			s.Issue(ctx, over, time.Hour)
			pen := lim
			pen.Cost = 12
			if ok, err := s.Settle(ctx, over, []store.Request{pen}, algo.Penalize); !ok || err != nil {
				t.Fatalf("penalty settle: %v %v", ok, err)
			}
			if r := remaining(); r != 0 {
				t.Fatalf("after a penalty of 12: %d remaining", r)
			}
			for _, bad := range []struct {
				t   store.Request
				ttl time.Duration
			}{{store.Request{}, time.Hour}, {tk, 0}, {tk, store.MaxTicket + 1}, {store.Request{Key: "x", Tag: "x", Time: conformance.T0.AddDate(300, 0, 0)}, time.Hour}, {store.Request{Key: "x"}, time.Hour}} {
				if err := s.Issue(ctx, bad.t, bad.ttl); err == nil {
					t.Errorf("Issue(%+v, %v) accepted", bad.t, bad.ttl)
				}
			}
		})
	}
}

// TestSettleAcrossAWindow: a settle gives back only to the window its
// estimate was counted in, on both stores, for every kind that counts both
// ways. An estimate of the whole limit at 3 s, settled at 0 once its
// window has ended (or, sliding, once it has left every window), while
// callers spend the next window's limit: no more than the limit is
// admitted there (before: a fixed window, a window counter, a sliding log
// and a bucket gave the estimate back to the new window, which admitted
// twice its limit). A settle while the estimate still counts gives it
// back.
func TestSettleAcrossAWindow(t *testing.T) {
	tz, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2027, 3, 10, 0, 0, 0, 0, tz) // a day's window ends there
	// base is a whole number of 4 s (and of a day's µs, for the slices).
	base := time.UnixMicro(conformance.T0.UnixMicro() - conformance.T0.UnixMicro()%(24*time.Hour).Microseconds())
	four := 4 * time.Second
	cases := []struct {
		name       string
		limit      algo.Limit
		at, spend  time.Time // the estimate's time, and the next window's
		stillCount time.Time // a time the estimate still counts at
	}{
		{"fixed_window", algo.FixedWindow{Count: 100, Window: four}, base.Add(3 * time.Second), base.Add(4*time.Second + 500*time.Millisecond), base.Add(3500 * time.Millisecond)},
		{"calendar", algo.FixedWindow{Count: 100, Calendar: algo.Calendar{Unit: "day", TimeZone: "Europe/Paris"}}, midnight.Add(-3 * time.Second), midnight.Add(30 * time.Minute), midnight.Add(-time.Second)},
		{"window_counter", algo.WindowCounter{Limits: []algo.Window{{Count: 100, Window: four}}}, base.Add(3 * time.Second), base.Add(7500 * time.Millisecond), base.Add(6500 * time.Millisecond)},
		{"sliding_log", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: four}}}, base.Add(3 * time.Second), base.Add(7500 * time.Millisecond), base.Add(6500 * time.Millisecond)},
		{"sliding_log sampled", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: four}}, Buckets: 4}, base.Add(3 * time.Second), base.Add(8500 * time.Millisecond), base.Add(6500 * time.Millisecond)},
		{"gcra", algo.GCRA{Count: 100, Period: four, Burst: 99}, base.Add(3 * time.Second), base.Add(7500 * time.Millisecond), base.Add(3010 * time.Millisecond)},
		{"token_bucket", algo.TokenBucket{Count: 100, Period: four, Burst: 100}, base.Add(3 * time.Second), base.Add(7500 * time.Millisecond), base.Add(3010 * time.Millisecond)},
	}
	for name, st := range stores(t) {
		s := st.(store.Settler)
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				key := "across:" + name + ":" + c.name
				lim := store.Request{Key: key, Tag: key, Plan: algo.MustCompile(c.limit)}
				decide := func(at time.Time, cost int64) bool {
					r := lim
					r.Time, r.Cost = at, cost
					res, err := st.Decide(ctx, r)
					if err != nil {
						t.Error(err)
					}
					return res.Allowed
				}
				// Ten estimates of 10 each: the whole limit.
				var tickets []store.Request
				for i := range 10 {
					tk := store.Request{Key: key + "#t" + strconv.Itoa(i), Tag: key, Time: c.at}
					if err := s.Issue(ctx, tk, time.Hour); err != nil {
						t.Fatal(err)
					}
					if !decide(c.at, 10) {
						t.Fatalf("estimate %d denied", i)
					}
					tickets = append(tickets, tk)
				}
				back := lim
				back.Cost, back.Time = 10, c.at
				// The next window's limit, spent by 100 callers of 1 while
				// the ten estimates are settled at 0; then one more.
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for i := range 100 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if decide(c.spend, 1) {
							admitted.Add(1)
						}
					}()
					if i%10 == 0 {
						tk := tickets[i/10]
						tk.Time = c.spend
						wg.Add(1)
						go func() {
							defer wg.Done()
							if ok, err := s.Settle(ctx, tk, []store.Request{back}, algo.Reward); !ok || err != nil {
								t.Errorf("settle: %v %v", ok, err)
							}
						}()
					}
				}
				wg.Wait()
				for range 100 {
					if decide(c.spend, 1) {
						admitted.Add(1)
					}
				}
				if n := admitted.Load(); n > 100 {
					t.Fatalf("%d admitted after the estimates were settled in another window, of a limit of 100", n)
				}
				// An estimate settled while it still counts comes back.
				lim.Key, lim.Tag = key+":still", key+":still"
				back.Key, back.Tag = lim.Key, lim.Tag
				tk := store.Request{Key: lim.Key + "#t", Tag: lim.Tag, Time: c.at}
				if err := s.Issue(ctx, tk, time.Hour); err != nil {
					t.Fatal(err)
				}
				for range 10 {
					decide(c.at, 10)
				}
				if decide(c.stillCount, 5) {
					t.Fatal("the limit was not spent")
				}
				tk.Time = c.stillCount
				if ok, err := s.Settle(ctx, tk, []store.Request{back}, algo.Reward); !ok || err != nil {
					t.Fatalf("settle: %v %v", ok, err)
				}
				if !decide(c.stillCount, 5) {
					t.Fatal("an estimate settled while it still counted was not given back")
				}
			})
		}
	}
}

// TestTicketsBoundedPerKey: a tag holds at most store.MaxOpenTickets
// open tickets, on both stores: one more is refused with
// store.ErrTooManyTickets, while another tag's is kept; one settled (or
// expired) makes room again. (Before, the memory store kept one table of
// 1,048,576 for every caller, which one caller could fill, and Redis none.)
func TestTicketsBoundedPerKey(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := st.(store.Settler)
			full, other := "bound:"+name+":full", "bound:"+name+":other"
			tk := func(tag string, i int) store.Request {
				return store.Request{Key: tag + "#t" + strconv.Itoa(i), Tag: tag, Time: conformance.T0}
			}
			for i := range store.MaxOpenTickets {
				if err := s.Issue(ctx, tk(full, i), time.Hour); err != nil {
					t.Fatalf("ticket %d: %v", i, err)
				}
			}
			if err := s.Issue(ctx, tk(full, -1), time.Hour); !errors.Is(err, store.ErrTooManyTickets) || !errors.Is(err, store.ErrBadRequest) {
				t.Fatalf("ticket %d of one tag: %v, want ErrTooManyTickets", store.MaxOpenTickets+1, err)
			}
			if err := s.Issue(ctx, tk(full, 0), time.Hour); err != nil {
				t.Fatalf("a ticket held, issued again: %v", err)
			}
			if err := s.Issue(ctx, tk(other, 0), time.Hour); err != nil {
				t.Fatalf("another tag's ticket: %v", err)
			}
			if ok, err := s.Settle(ctx, tk(full, 7), nil, algo.Reward); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if err := s.Issue(ctx, tk(full, -1), time.Hour); err != nil {
				t.Fatalf("after a settle: %v", err)
			}
			// Expired tickets make room: at a time past them all.
			late := tk(full, -2)
			late.Time = conformance.T0.Add(2 * time.Hour)
			if err := s.Issue(ctx, late, time.Hour); err != nil {
				t.Fatalf("after the tickets expired: %v", err)
			}
		})
	}
}

// TestTicketQueue: a ticket queue (store.TicketQueue) gives its entries
// back oldest first, each once however many race for it, none whose
// ticket's life has ended, and none to another queue; an entry's ticket
// counts among its tag's, bounded as Issue's are.
func TestTicketQueue(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := st.(store.TicketQueue)
			tag := "queue:" + name
			q := store.Request{Key: tag + "#q", Tag: tag, Time: conformance.T0}
			tk := func(i int) store.Request {
				return store.Request{Key: tag + "#t" + strconv.Itoa(i), Tag: tag, Time: conformance.T0}
			}
			at := func(r store.Request, d time.Duration) store.Request { r.Time = r.Time.Add(d); return r }
			// Three entries of 1 h, then one of 10 s: it expires first.
			for i := range 3 {
				if err := s.Enqueue(ctx, at(tk(i), time.Duration(i)*time.Second), at(q, time.Duration(i)*time.Second), "e"+strconv.Itoa(i), time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Enqueue(ctx, at(tk(3), 3*time.Second), at(q, 3*time.Second), "short", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			other := store.Request{Key: tag + "#other", Tag: tag, Time: conformance.T0}
			if e, err := s.Dequeue(ctx, at(other, 20*time.Second)); e != "" || err != nil {
				t.Fatalf("another queue: %q %v", e, err)
			}
			// At 20 s the short one has expired: the three in order.
			var wg sync.WaitGroup
			got := make([]string, 8)
			for i := range got {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if got[i], err = s.Dequeue(ctx, at(q, 20*time.Second)); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			slices.Sort(got)
			if want := []string{"", "", "", "", "", "e0", "e1", "e2"}; !slices.Equal(got, want) {
				t.Fatalf("8 dequeues racing for 3 entries: %q, want %q", got, want)
			}
			// Oldest first, and an entry past its life is not given.
			for i := range 2 {
				if err := s.Enqueue(ctx, at(tk(10+i), time.Duration(i)*time.Second), at(q, time.Duration(i)*time.Second), "o"+strconv.Itoa(i), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			if e, _ := s.Dequeue(ctx, at(q, 30*time.Second)); e != "o0" {
				t.Fatalf("oldest first: %q", e)
			}
			if e, _ := s.Dequeue(ctx, at(q, 2*time.Minute)); e != "" {
				t.Fatalf("an entry past its life: %q", e)
			}
			// The entries' tickets count among the tag's.
			for i := range store.MaxOpenTickets {
				if err := s.Issue(ctx, at(tk(100+i), 30*time.Minute), time.Hour); err != nil {
					if !errors.Is(err, store.ErrTooManyTickets) || i != store.MaxOpenTickets-3 {
						t.Fatalf("ticket %d: %v", i, err)
					}
					break
				}
			}
			if err := s.Enqueue(ctx, at(tk(-1), 30*time.Minute), at(q, 30*time.Minute), "x", time.Hour); !errors.Is(err, store.ErrTooManyTickets) {
				t.Fatalf("an entry past the tag's bound: %v", err)
			}
			if err := s.Enqueue(ctx, tk(-2), q, "", time.Hour); !errors.Is(err, store.ErrBadRequest) {
				t.Fatalf("an empty entry: %v", err)
			}
		})
	}
}
