package algo

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestPlansCompile: a cached plan is the plan Compile makes, for every
// kind by value and by pointer, an invalid limit is refused every time
// (never cached), a *Plan is returned itself, and more limits than the
// cache holds still compile right, concurrently.
func TestPlansCompile(t *testing.T) {
	var c Plans
	for _, k := range Kinds() {
		l := k.Example()
		for _, in := range []Limit{l, pointer(l)} {
			want, _ := Compile(in)
			for range 3 {
				var scratch Plan
				got, err := c.Compile(in, &scratch)
				if err != nil || !reflect.DeepEqual(*got, want) {
					t.Fatalf("%v: %+v, %v; want %+v", k, *got, err, want)
				}
			}
		}
	}
	bad := GCRA{Burst: 1, Count: 0, Period: time.Second}
	for range 3 {
		var scratch Plan
		if _, err := c.Compile(bad, &scratch); !errors.Is(err, ErrInvalid) {
			t.Fatalf("invalid limit: %v", err)
		}
	}
	p, _ := Compile(GCRA{Burst: 1, Count: 1, Period: time.Second})
	if got, _ := c.Compile(&p, new(Plan)); got != &p {
		t.Fatal("a *Plan is not returned itself")
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * plansFlush {
				l := FixedWindow{Limit: int64(i%1000 + g), Window: time.Duration(i%7+1) * time.Second}
				var scratch Plan
				got, err := c.Compile(l, &scratch)
				if err != nil || got.Limit() != l {
					t.Errorf("%+v: plan of %+v, %v", l, got.Limit(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestPlansCacheEveryNumericKind: every kind whose parameters are all
// numbers (its Spec has no list of limits) is cached by Plans, so a limit
// passed by value decides as fast as a limiter handle's (algo's checklist
// for a new algorithm: paramsOf).
func TestPlansCacheEveryNumericKind(t *testing.T) {
	for _, k := range Kinds() {
		l := k.Example()
		if len(l.Spec().Limits) > 0 {
			continue
		}
		var c Plans
		var scratch Plan
		if _, err := c.Compile(l, &scratch); err != nil {
			t.Fatal(err)
		}
		if c.Lookup(l) == nil {
			t.Errorf("%v: Plans does not cache it (paramsOf)", k)
		}
	}
}
