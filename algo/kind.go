package algo

import (
	"fmt"
	"strings"
	"time"
)

// Kind names an algorithm. Kinds are small integers from 0 to NumKinds-1,
// so that a store or a front end can keep what it knows of each kind in an
// array of NumKinds entries, and a test can check that it has all of them.
type Kind uint8

// The kinds, one per algorithm file.
const (
	KindGCRA Kind = iota
	KindTokenBucket
	KindFixedWindow
	KindGate
	KindSlidingLog
	KindWindowCounter
	KindConcurrency

	// NumKinds is the number of kinds.
	NumKinds = iota
)

// Algorithm names, as used in Spec.Algorithm.
const (
	nameGCRA          = "gcra"
	nameTokenBucket   = "token_bucket"
	nameFixedWindow   = "fixed_window"
	nameGate          = "gate"
	nameSlidingLog    = "sliding_log"
	nameWindowCounter = "window_counter"
	nameConcurrency   = "concurrency"
)

// kindInfo is what the package knows of a kind beside its Limit type.
type kindInfo struct {
	name string
	// fields are the Spec fields the kind reads, by their JSON names.
	fields []string
	// build turns a spec into a limit, before validation.
	build func(Spec) (Limit, error)
	// example is a valid limit of the kind, for documentation and for
	// tests that go over every kind.
	example Limit
	// leasable: see Kind.Leasable.
	leasable bool
	// stepwise: the kind's Result follows from its step's outcome and
	// one number (Plan.DecideUnlock), and Plan's step, numbers and at
	// know it.
	stepwise bool
}

// kinds is the registry; each algorithm's file defines its entry.
var kinds = [NumKinds]kindInfo{
	KindGCRA:          gcraKind,
	KindTokenBucket:   tokenBucketKind,
	KindFixedWindow:   fixedWindowKind,
	KindGate:          gateKind,
	KindSlidingLog:    slidingLogKind,
	KindWindowCounter: windowCounterKind,
	KindConcurrency:   concurrencyKind,
}

// String returns the kind's name, as used in Spec.Algorithm.
func (k Kind) String() string {
	if int(k) < NumKinds {
		return kinds[k].name
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Leasable reports whether limits of the kind can be leased: a store may
// count units of them ahead in one call (a lease) and admit from those
// units locally until the lease ends (store/redis: Options.LeaseFor, and
// quota granted to a proxy). Only a fixed window can: a lease's units
// count in the window when taken and are used before the window ends,
// so the window never admits more than its limit. Every other
// algorithm's capacity moves with time (it refills or slides), so units
// taken ahead could be admitted when the algorithm would deny them. This
// is the one statement of the rule: policy validation and the stores ask
// it.
func (k Kind) Leasable() bool { return int(k) < NumKinds && kinds[k].leasable }

// Example returns a valid limit of the kind.
func (k Kind) Example() Limit { return kinds[k].example }

// Kinds returns every kind, in order.
func Kinds() []Kind {
	out := make([]Kind, NumKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// parseKind returns the kind that name names.
func parseKind(name string) (Kind, error) {
	for i := range kinds {
		if kinds[i].name == name {
			return Kind(i), nil
		}
	}
	names := make([]string, NumKinds)
	for i := range kinds {
		names[i] = kinds[i].name
	}
	if name == "" {
		return 0, fmt.Errorf("%w: no algorithm (want %s)", ErrInvalid, strings.Join(names, ", "))
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want %s)", ErrInvalid, name, strings.Join(names, ", "))
}

// A Limit is one limiter definition, such as GCRA or FixedWindow. Besides
// deciding, it answers for itself whatever a store or a front end needs
// to know of its algorithm, so that none of them switches on the type.
type Limit interface {
	// Kind returns the limit's algorithm.
	Kind() Kind
	// validate reports whether the parameters are usable. The error wraps
	// ErrInvalid.
	validate() error
	// Spec returns the limit's serialized form; Spec().Build() gives the
	// limit back.
	Spec() Spec
	quota() (q int64, w time.Duration)
	steadyRate() (n int64, per time.Duration)
	deniedBy(by int) string
}

// Quota returns the most l admits at once (Result.Quota) and the time in
// which its algorithm grants that much: the q and w of the IETF
// RateLimit-Policy field.
func Quota(l Limit) (q int64, w time.Duration) { return l.quota() }

// SteadyRate returns l's steady rate, n per period: what it admits over a
// long time, as Envoy's requests_per_unit expresses it.
func SteadyRate(l Limit) (n int64, per time.Duration) { return l.steadyRate() }

// DeniedBy names what a decision l denied waits for, given its
// Result.DeniedBy: a limit's name, else its window ("10s"), "min_gap" or
// "block"; "" when there is nothing to name.
func DeniedBy(l Limit, by int) string { return l.deniedBy(by) }
