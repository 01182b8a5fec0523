package redis_test

import (
	"context"
	"flag"
	"fmt"
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

// region is one region of TestGlobalAcrossRegions: its Redis, its link to
// home, its instances (stores), and its clock's skew.
type region struct {
	name      string
	srv       *redistest.Server
	link      *redistest.Relay
	instances []*redis.Store
	homes     []*redis.Store // each instance's home
	skew      time.Duration
	active    bool // sprays this tick
	per       int  // requests a tick from each instance (0: the rig's)
}

// globalPlans are the two levels every request of the test passes: a
// regional one per caller (fixed window), and the global limit.
type globalPlans struct {
	caller, mallory, global *algo.Plan
}

const (
	globalLimit  = 1000
	globalWindow = 20 * time.Second
	globalTick   = time.Second // the test's clock moves a tick at a time
)

// rig is the regions of a global limit's test, and what they admitted,
// by window end (on each region's clock).
type rig struct {
	t       *testing.T
	plans   globalPlans
	regions []*region
	base    time.Time // the test's clock at window 0, tick 0
	per     int       // requests a tick from each instance
	limit   int64     // the global limit

	mu       sync.Mutex
	asked    map[int64]int64
	admitted map[int64]int64
	byRegion map[string]int64 // region name + window end
}

func newRig(t *testing.T, per int, limit int64) *rig {
	w := globalWindow.Microseconds()
	return &rig{t: t, per: per, limit: limit,
		plans: globalPlans{
			caller:  algo.MustCompile(algo.FixedWindow{Count: algo.MaxCount, Window: globalWindow}),
			mallory: algo.MustCompile(algo.FixedWindow{Count: 1, Window: globalWindow}),
			global:  algo.MustCompile(algo.FixedWindow{Count: limit, Window: globalWindow}),
		},
		// An hour ahead of the machine's clock: home's counts live until a
		// window past their end on home's clock, so none expires during
		// the test however slowly it runs.
		base:  time.UnixMicro((time.Now().Add(time.Hour).UnixMicro()/w + 1) * w),
		asked: map[int64]int64{}, admitted: map[int64]int64{}, byRegion: map[string]int64{}}
}

// label is the end of the window holding t (µs).
func label(t time.Time) int64 {
	w, us := globalWindow.Microseconds(), t.UnixMicro()
	return us - us%w + w
}

// at is the test's clock at a window's tick.
func (g *rig) at(window, tick int) time.Time {
	return g.base.Add(time.Duration(window)*globalWindow + time.Duration(tick)*globalTick)
}

// end is the end of a window (µs).
func (g *rig) end(window int) int64 { return label(g.at(window, 0)) }

// tick sprays the global key from every instance of the active regions at
// once, at the tick's time on each region's clock (per requests each, a
// goroutine each; one in 25 is mallory's, whom a regional level denies
// after one a window), then refills every instance's shares at that time.
func (g *rig) tick(window, tick int) {
	ctx := context.Background()
	at := g.at(window, tick)
	var wg sync.WaitGroup
	for _, r := range g.regions {
		if !r.active {
			continue
		}
		now := at.Add(r.skew)
		per := g.per
		if r.per > 0 {
			per = r.per
		}
		for i, s := range r.instances {
			for j := range per {
				wg.Add(1)
				go func() {
					defer wg.Done()
					caller, plan := "ok", g.plans.caller
					if j%25 == 24 {
						caller, plan = "mallory:"+r.name, g.plans.mallory
					}
					reqs := []store.Request{
						{Key: "caller:" + caller, Plan: plan, Cost: 1, Time: now},
						{Key: "api", Plan: g.plans.global, Cost: 1, Time: now, Global: true},
					}
					res := make([]algo.Result, 2)
					ok, err := s.DecideAll(ctx, reqs, res)
					if err != nil {
						g.t.Errorf("region %s instance %d: %v", r.name, i, err)
						return
					}
					g.mu.Lock()
					g.asked[label(now)]++
					if ok {
						g.admitted[label(now)]++
						g.byRegion[r.name+strconv.FormatInt(label(now), 10)]++
					}
					g.mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	for _, r := range g.regions {
		for _, s := range r.instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.RefillAt(ctx, at.Add(r.skew), 2*globalTick)
			}()
		}
	}
	wg.Wait()
}

// checkShares checks that each region's share counts exactly what the
// region admitted in the window ending at e (read before the next window
// starts): a request its regional level denied spent nothing of it.
func (g *rig) checkShares(e int64) {
	key := redis.StateKey(redis.DefaultPrefix, store.Request{Key: "api", Plan: g.plans.global})
	for _, r := range g.regions {
		g.mu.Lock()
		want := g.byRegion[r.name+strconv.FormatInt(e, 10)]
		g.mu.Unlock()
		end, n := r.share(g.t, key, "e"), r.share(g.t, key, "n")
		if end != e || n != want {
			g.t.Errorf("region %s, window ending %d: the share holds window %d, count %d; the instances admitted %d", r.name, e, end, n, want)
		}
	}
}

// share reads a field of the region's share.
func (r *region) share(t *testing.T, key, field string) int64 {
	v, err := r.srv.Do("HGET", key, field)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// addRegion starts a region: its redis-server, and instances stores on it
// whose home (one Store each) is opened by homeURL(region).
func (g *rig) addRegion(name string, instances int, homeURL func(*region) string, opts redis.Options) *region {
	ctx := context.Background()
	r := &region{name: name, srv: redistest.Start(g.t), active: true}
	g.regions = append(g.regions, r)
	url := homeURL(r)
	for range instances {
		h, err := redis.Open(ctx, url, redis.Options{Timeout: time.Minute})
		if err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { h.Close() })
		o := opts
		o.Home, o.Timeout = h, time.Minute
		s, err := redis.OpenRegion(ctx, r.srv.URL(), o)
		if err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { s.Close() })
		r.instances, r.homes = append(r.instances, s), append(r.homes, h)
	}
	return r
}

// TestGlobalAcrossRegions: three regions, two instances each, each region
// on its own redis-server, and a home redis-server reached from each
// region through a relay that adds 40ms each way and can be cut. Every
// instance sprays one global key (limit 1000 a 20s window) at three times
// the limit, through a regional level in the same DecideAll; the test's
// clock is explicit (requests and refills carry it, a tick of 1s at a
// time), so no window depends on the machine's speed. Window by window:
// all links up; all traffic moved to one region while the others hold
// shares; two regions cut off from home and healed (one denies once its
// share is spent, one has an allowance of 50 a window); one region's
// clock 7s ahead. In every window (by each region's own clock) the
// regions together admit at most the limit plus the allowances of the
// regions cut off, and at least 95% of the limit where every link was up;
// a region's share counts exactly what it admitted (a request denied by
// its regional level spends none); a window's first tick admits, from
// units charged ahead at the end of the window before.
func TestGlobalAcrossRegions(t *testing.T) {
	home := redistest.Start(t)
	g := newRig(t, 25, globalLimit)
	allowance := map[string]int64{"c": 50}
	links := map[string]*redistest.Relay{}
	for _, name := range []string{"a", "b", "c"} {
		g.addRegion(name, 2, func(r *region) string {
			links[name] = redistest.NewDelayRelay(t, home.Addr, 40*time.Millisecond)
			return "redis://" + links[name].Addr + "/0"
		}, redis.Options{GlobalAllowance: allowance[name]})
	}
	a, c := g.regions[0], g.regions[2]
	bound := map[int64]int64{} // by window end: the limit plus allowances
	full := map[int64]bool{}   // windows whose every link was up
	run := func(window int, each func(tick int)) {
		for tick := range int(globalWindow / globalTick) {
			each(tick)
			g.tick(window, tick)
			// The window was charged ahead during the last one: its first
			// tick admits (without, every share starts it empty).
			if tick == 0 && window > 0 && window < 3 && g.admitted[g.end(window)] == 0 {
				t.Errorf("window %d: its first tick admitted nothing", window)
			}
		}
	}

	// 0: every link up, every region spraying.
	bound[g.end(0)], full[g.end(0)] = globalLimit, true
	run(0, func(int) {})
	g.checkShares(g.end(0))
	// 1: all traffic moves to region b at tick 4, while a and c hold
	// shares, which they give back.
	bound[g.end(1)], full[g.end(1)] = globalLimit, true
	run(1, func(tick int) { a.active, c.active = tick < 4, tick < 4 })
	g.checkShares(g.end(1))
	a.active, c.active = true, true
	// 2: regions a (deny once spent) and c (an allowance of 50) cut off
	// from home at tick 5, healed at tick 12.
	bound[g.end(2)] = globalLimit + allowance["c"]
	run(2, func(tick int) {
		switch tick {
		case 5:
			links["a"].Down()
			links["c"].Down()
		case 12:
			links["a"].Up()
			links["c"].Up()
		}
	})
	g.checkShares(g.end(2))
	// 3, 4: region a's clock 7s ahead: it counts in the window of its
	// clock, and reaches window 5 first.
	bound[g.end(3)], bound[g.end(4)], bound[g.end(5)] = globalLimit, globalLimit, globalLimit
	a.skew = 7 * time.Second
	run(3, func(int) {})
	run(4, func(int) {})

	for _, e := range []int64{g.end(0), g.end(1), g.end(2), g.end(3), g.end(4), g.end(5)} {
		got := g.admitted[e]
		t.Logf("window ending %s: asked %d, admitted %d of %d (bound %d)", time.UnixMicro(e).UTC().Format(time.TimeOnly), g.asked[e], got, globalLimit, bound[e])
		if got > bound[e] {
			t.Errorf("window ending %d: admitted %d, over its bound %d", e, got, bound[e])
		}
		if full[e] && got < globalLimit*95/100 {
			t.Errorf("window ending %d: admitted %d, under 95%% of %d with every link up and %d asked", e, got, globalLimit, g.asked[e])
		}
	}
	g.checkStats(home, map[string]bool{"a": true, "c": true}, allowance["c"])
}

// checkStats checks the instances' ShareStats against what the regions
// admitted and home counted: every unit admitted beyond the allowances
// was credited and not given back, every unit credited and not given
// back is counted at home, each instance follows the one global key, and
// only the regions cut off failed to reach home; a region that lost its
// demand gave units back.
func (g *rig) checkStats(home *redistest.Server, cut map[string]bool, allowances int64) {
	var admitted, credited, back, counted int64
	for _, n := range g.admitted {
		admitted += n
	}
	for _, r := range g.regions {
		var failures int64
		for i, s := range r.instances {
			st := s.ShareStats()
			credited, back, failures = credited+st.Credited, back+st.GivenBack, failures+st.HomeFailures
			if st.Keys != 1 {
				g.t.Errorf("region %s instance %d follows %d global keys, want 1", r.name, i, st.Keys)
			}
		}
		if (failures > 0) != cut[r.name] {
			g.t.Errorf("region %s: %d failures to reach home (cut off: %v)", r.name, failures, cut[r.name])
		}
	}
	for w := range 8 {
		v, err := home.Do("GET", redis.KeyName(redis.DefaultPrefix, "api", "")+"%:global:"+strconv.FormatInt(g.end(w), 10))
		if err != nil {
			g.t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		counted += n
	}
	g.t.Logf("ShareStats: credited %d, given back %d; admitted %d, home counted %d", credited, back, admitted, counted)
	if admitted > credited-back+allowances || credited-back > counted || back == 0 {
		g.t.Errorf("the regions admitted %d, were credited %d and gave back %d (allowances %d), home counted %d", admitted, credited, back, allowances, counted)
	}
}

// TestGlobalHomeFailover: home is a master and its replica under three
// sentinels; two regions of an instance each charge home with
// HomeReplicas 1, together at twice the limit. Mid-window the replica stops (SIGSTOP) and the
// master drops its link (CLIENT KILL), so that home's charges from then
// on are on the master alone; then the master dies, the replica goes on,
// and the sentinels promote it, though it never had them. A
// store that spent those charges would admit them twice (the new master
// grants them again); with WAIT, units no replica acknowledged are never
// spent, and the window admits at most the limit. Once the new master has
// a replica again (one is started), home grants again, and the region
// admits beyond what it held when home failed.
func TestGlobalHomeFailover(t *testing.T) {
	ctx := context.Background()
	ss := redistest.StartSentinels(t)
	g := newRig(t, 50, globalLimit)
	for _, name := range []string{"a", "b"} {
		g.addRegion(name, 1, func(*region) string { return ss.URL() }, redis.Options{HomeReplicas: 1})
	}
	for tick := range 2 {
		g.tick(0, tick)
	}
	resume := ss.Replica.Pause(t)
	if _, err := ss.Master.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	for tick := 2; tick < 5; tick++ {
		g.tick(0, tick)
	}
	old := ss.MasterAddr()
	key := redis.StateKey(redis.DefaultPrefix, store.Request{Key: "api", Plan: g.plans.global})
	var held int64
	for _, r := range g.regions {
		held += r.share(t, key, "s") - r.share(t, key, "n")
	}
	before := g.admitted[g.end(0)]
	ss.Master.Stop()
	resume()
	deadline := time.Now().Add(time.Minute) // waiting for the sentinels, not timing the store
	for ss.MasterAddr() == old && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if ss.MasterAddr() == old {
		t.Fatal("the sentinels promoted no replica within a minute")
	}
	host, port, _ := strings.Cut(ss.MasterAddr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	for !strings.Contains(must(replica.Do("INFO", "replication")), "master_link_status:up") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range g.regions { // the sentinels' news reaches each client
		for r.homes[0].Ping(ctx) != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for tick := 5; tick < 20; tick++ {
		g.tick(0, tick)
	}
	got := g.admitted[g.end(0)]
	t.Logf("asked %d, admitted %d of %d (%d before home failed over, holding %d)", g.asked[g.end(0)], got, globalLimit, before, held)
	if got > globalLimit {
		t.Errorf("admitted %d, over the limit %d through home's failover", got, globalLimit)
	}
	if got <= before+held {
		t.Errorf("admitted %d: home granted nothing after its failover (%d admitted before, %d held)", got, before, held)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestGlobalRefillsInTheBackground: a region's store opened by URL with
// its home's (store.Options.Home) refills on its own, on Redis's clock: a
// global key denied at first (no share yet) is admitted soon after, up
// to exactly its limit and not one more, and home counts what the region
// took. The window is a day's, and the test skips if it ended meanwhile.
func TestGlobalRefillsInTheBackground(t *testing.T) {
	ctx := context.Background()
	home, reg := redistest.Start(t), redistest.Start(t)
	st, err := store.Open(ctx, reg.URL(), store.Options{Home: home.URL(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const limit = 50
	plan := algo.MustCompile(algo.FixedWindow{Count: limit, Window: 24 * time.Hour})
	end := label24(time.Now())
	req := store.Request{Key: "api", Plan: plan, Cost: 1, Global: true}
	admitted, denied := 0, 0
	for deadline := time.Now().Add(time.Minute); admitted < limit && time.Now().Before(deadline); {
		res, err := st.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		} else {
			denied++
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 20 {
		if res, err := st.Decide(ctx, req); err != nil || res.Allowed {
			t.Fatalf("past the limit: %+v, %v", res, err)
		}
	}
	if label24(time.Now()) != end {
		t.Skip("the day's window ended during the test")
	}
	if admitted != limit {
		t.Fatalf("admitted %d of %d within a minute (denied %d)", admitted, limit, denied)
	}
	n, err := home.Do("GET", redis.KeyName(redis.DefaultPrefix, "api", "")+"%:global:"+strconv.FormatInt(end, 10))
	if err != nil || n != strconv.Itoa(limit) {
		t.Errorf("home counts %q (%v), want %d", n, err, limit)
	}
	t.Logf("denied %d before the first refill", denied)
}

// label24 is the end of the day's window (epoch-aligned) holding t (µs).
func label24(t time.Time) int64 {
	w, us := (24 * time.Hour).Microseconds(), t.UnixMicro()
	return us - us%w + w
}

var (
	scaleRegions   = flag.Int("global.regions", 10, "TestGlobalAtScale: regions")
	scaleInstances = flag.Int("global.instances", 50, "TestGlobalAtScale: instances, spread over the regions")
)

// TestGlobalAtScale: many regions and instances on one machine (the table
// of docs/multi-region.md, at -global.regions 50 -global.instances 1000):
// every region a prefix of one regional redis-server, with a link of its
// own to home (a relay, to cut), every instance a store of its own. Each
// instance asks 5 a tick (the limit is 2/5 of all asked in a window); a
// window each: demand even; a fifth of the regions asking 80% of it; half
// the regions stopping at tick 5; a tenth cut off from home at tick 5 and
// healed at tick 12 (they deny once their share is spent); demand 1.5
// times the limit; demand equal to it. Every window admits at most the
// limit, and at least 95% of it where every link was up and demand
// exceeded it.
func TestGlobalAtScale(t *testing.T) {
	nr, ni := *scaleRegions, *scaleInstances
	if nr < 1 || ni < nr {
		t.Fatalf("want at least a region and an instance a region, got %d regions, %d instances", nr, ni)
	}
	ctx := context.Background()
	home, regional := redistest.Start(t), redistest.Start(t)
	const per = 5
	ticks := int(globalWindow / globalTick)
	limit := int64(ni * per * ticks * 2 / 5)
	g := newRig(t, per, limit)
	links := make([]*redistest.Relay, nr)
	for i := range nr {
		links[i] = redistest.NewRelay(t, home.Addr)
		h, err := redis.Open(ctx, "redis://"+links[i].Addr+"/0", redis.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		c := redistest.Client(t, regional.URL())
		r := &region{name: fmt.Sprintf("r%02d", i), srv: regional, active: true}
		for j := range ni {
			if j%nr != i {
				continue
			}
			s, err := redis.NewRegion(c, redis.Options{Prefix: r.name + ":", Timeout: time.Minute, Home: h})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			r.instances = append(r.instances, s)
		}
		g.regions = append(g.regions, r)
	}
	run := func(window int, each func(tick int)) {
		for tick := range ticks {
			each(tick)
			g.tick(window, tick)
		}
	}
	type row struct {
		name string
		full bool
	}
	var rows []row
	// 0: even demand.
	run(0, func(int) {})
	rows = append(rows, row{"even", true})
	// 1: a fifth of the regions ask 80%.
	hot := max(nr/5, 1)
	for i, r := range g.regions {
		if i < hot {
			r.per = per * 4 * nr / hot / 5
		} else {
			r.per = max(per*nr/(nr-hot)/5, 1)
		}
	}
	run(1, func(int) {})
	rows = append(rows, row{"skewed", true})
	for _, r := range g.regions {
		r.per = 0
	}
	// 2: half the regions stop at tick 5.
	run(2, func(tick int) {
		for i, r := range g.regions {
			r.active = tick < 5 || i%2 == 0
		}
	})
	rows = append(rows, row{"half stop", true})
	for _, r := range g.regions {
		r.active = true
	}
	// 3: a tenth cut off from tick 5 to 12.
	cut := max(nr/10, 1)
	run(3, func(tick int) {
		for i := range cut {
			switch tick {
			case 5:
				links[i].Down()
			case 12:
				links[i].Up()
			}
		}
	})
	rows = append(rows, row{fmt.Sprintf("%d cut off", cut), false})
	// 4, 5: demand 1.5 and 1 times the limit, even: the first tick of a
	// window finds every share empty.
	g.per = 3
	run(4, func(int) {})
	rows = append(rows, row{"1.5x the limit", true})
	g.per = 2
	run(5, func(int) {})
	rows = append(rows, row{"1x the limit", false})

	t.Logf("| regions | instances | window | asked | admitted | limit | bound | utilisation |")
	for w, r := range rows {
		e := g.end(w)
		got := g.admitted[e]
		t.Logf("| %d | %d | %s | %d | %d | %d | %d | %.1f%% |", nr, ni, r.name, g.asked[e], got, limit, limit, 100*float64(got)/float64(limit))
		if got > limit {
			t.Errorf("window %s: admitted %d, over the limit %d", r.name, got, limit)
		}
		if r.full && got < limit*95/100 {
			t.Errorf("window %s: admitted %d, under 95%% of %d with every link up and %d asked", r.name, got, limit, g.asked[e])
		}
	}
}

// TestGlobalRegionOnCluster: a region whose store is a Redis Cluster
// (three masters) beside a region on one redis-server, one home reached
// through 40ms relays: a share is one key, decided and refilled by
// scripts of one key each, so a Cluster region keeps the bound. Both
// regions spray the global key at more than the limit for three windows
// (explicit times, as TestGlobalAcrossRegions); each window admits at
// most the limit, and at least 95% of it.
func TestGlobalRegionOnCluster(t *testing.T) {
	ctx := context.Background()
	home := redistest.Start(t)
	g := newRig(t, 20, globalLimit)
	link := func() string {
		return "redis://" + redistest.NewDelayRelay(t, home.Addr, 40*time.Millisecond).Addr + "/0"
	}
	g.addRegion("one", 2, func(*region) string { return link() }, redis.Options{})
	cluster := redistest.StartCluster(t)
	r := &region{name: "cluster", active: true}
	g.regions = append(g.regions, r)
	for range 2 {
		h, err := redis.Open(ctx, link(), redis.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		s, err := redis.OpenRegion(ctx, cluster.URL(), redis.Options{Home: h, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		r.instances, r.homes = append(r.instances, s), append(r.homes, h)
	}
	for window := range 3 {
		for tick := range int(globalWindow / globalTick) {
			g.tick(window, tick)
		}
	}
	for window := range 3 {
		e := g.end(window)
		got := g.admitted[e]
		t.Logf("window %d: asked %d, admitted %d of %d (the cluster region %d)", window, g.asked[e], got, globalLimit, g.byRegion["cluster"+strconv.FormatInt(e, 10)])
		if got > globalLimit || got < globalLimit*95/100 {
			t.Errorf("window %d: admitted %d, want %d to %d (%d asked)", window, got, globalLimit*95/100, globalLimit, g.asked[e])
		}
		if g.byRegion["cluster"+strconv.FormatInt(e, 10)] == 0 {
			t.Errorf("window %d: the cluster region admitted nothing", window)
		}
	}
}
