// Package store is the storage contract: a Store decides Requests, each
// carrying a compiled algo.Plan (contract.go, request.go); DecideSlots
// applies the verbs of concurrency slots on any store (slots.go).
// Stores register for a URL scheme, as database/sql drivers do: import
// store/memory for "memory" (also the empty URL), store/redis for redis://
// and rediss://, and Open a URL.
//
// What only some stores can do is behind small interfaces that a caller
// asks for with a type assertion: Pinger (is the server reachable),
// Resetter (forget keys), Clock (the store's
// time), ConsumerLog (who consumed a key), DenialCache and Leaser and
// Granter (answers without a round trip), Sharer (a region's shares of
// global limits), HolderLister (who holds slots),
// Adjuster (penalty, reward, block, unblock) and Script (a user's
// limiter). Admission queues are package queue's (its backend,
// queue/backend), not a store capability. A store's insides stay in its
// package: nothing else asserts a concrete store type.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// Options configure Open. The embedded store ignores them.
type Options struct {
	// Prefix is put before every key of a shared store (the store's
	// default when empty).
	Prefix string
	// Timeout bounds an operation whose context has no deadline (the
	// store's default when zero).
	Timeout time.Duration
	// Username and Password, when set, override the URL's.
	Username, Password string
	// TLS, when set, configures TLS (for rediss://).
	TLS *tls.Config
	// MaxFlushDelay is how long a client may wait to gather concurrent
	// commands into one write (the store's default when zero; negative
	// disables it).
	MaxFlushDelay time.Duration
	// Background makes Open return a store even when its server cannot be
	// reached yet (refused, unreachable, timed out): it connects in the
	// background, and until then every operation fails with
	// ErrNotConnected. Other errors (a bad URL, password or certificate)
	// are still returned.
	Background bool
	// Log receives connection events (nil: slog.Default()).
	Log *slog.Logger
	// OverLimitCache, when positive, makes a shared store keep an exact
	// over-limit cache of about that many keys (see store/redis/overlimit.go); 0
	// turns it off.
	OverLimitCache int
	// LeaseFor, when positive, lets a shared store admit requests with
	// Lease set from leased quota that lives at most this long; MaxLease
	// bounds a lease (the store's default when zero). See store/redis.
	LeaseFor time.Duration
	MaxLease int64
	// Home, when set, is the URL of the home of global limits
	// (store.Request.Global): the store opened is a region's, and opens
	// Home too; GlobalAllowance and HomeReplicas as store/redis's
	// Options. See docs/multi-region.md.
	Home            string
	GlobalAllowance int64
	HomeReplicas    int
}

// opener opens a store of one scheme.
type opener func(ctx context.Context, url string, opts Options) (Store, error)

var (
	mu      sync.RWMutex
	openers = map[string]opener{}
)

// Register makes a store available under scheme ("memory", "redis"): open
// opens a store of it, as Open does a URL of the scheme. It panics if the
// scheme is taken.
func Register(scheme string, open func(ctx context.Context, url string, opts Options) (Store, error)) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Scheme returns the scheme of a store URL: the part before "://", or the
// whole URL when it has none ("memory"); "memory" for the empty URL.
func Scheme(url string) string {
	if url == "" {
		return "memory"
	}
	if i := strings.Index(url, "://"); i >= 0 {
		return url[:i]
	}
	return url
}

// Open returns the store the URL names: "memory" (or "" or "memory://")
// for the embedded store, or redis://... (see store/redis.Open).
func Open(ctx context.Context, url string, opts Options) (Store, error) {
	scheme := Scheme(url)
	mu.RLock()
	open := openers[scheme]
	if open == nil && scheme == "rediss" {
		open = openers["redis"]
	}
	mu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("store: unknown store URL %q (want %s)", Redact(url), known())
	}
	return open(ctx, url, opts)
}

func known() string {
	mu.RLock()
	defer mu.RUnlock()
	var names []string
	for s := range openers {
		switch s {
		case "memory":
			names = append(names, "memory")
		default:
			names = append(names, s+"://...")
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "a registered store: import store/memory or store/redis"
	}
	return strings.Join(names, " or ")
}

// ErrNotConnected is the error of every operation of a store opened with
// Options.Background while it has not reached its server yet.
var ErrNotConnected = errors.New("store: not connected yet")

// Redact hides the password of a store URL, for logs and errors.
func Redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	return url[:scheme+3] + "…" + url[at:]
}

// Pinger is a store that can tell whether its server answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Resetter is a store that can forget keys: Reset forgets the state of
// each request's Key (placed, for Redis Cluster, by its Tag, and for its
// Plan's state layout), as if the key had never been seen; Cost and Time
// are ignored. Unknown keys are no error.
type Resetter interface {
	Reset(ctx context.Context, reqs []Request) error
}

// DenialCache is a store with an over-limit cache (Options.OverLimitCache):
// OverLimitStats returns its counters, and ClearOverLimit forgets every
// cached denial (a policy reload).
type DenialCache interface {
	OverLimitStats() OverLimitStats
	ClearOverLimit()
}

// OverLimitStats are a DenialCache's counters.
type OverLimitStats struct {
	// Entries is how many denials the cache holds (some may have expired).
	Entries int64
	// Hits is how many decisions the cache answered.
	Hits int64
}

// Leaser is a store that leases quota ahead of decisions (the Redis
// store with Options.LeaseFor): LeaseStats returns what its leases hold.
type Leaser interface {
	LeaseStats() LeaseStats
}

// LeaseStats are a Leaser's counters.
type LeaseStats struct {
	// Keys is how many keys the store follows; Leased how many units its
	// live leases hold unused: counted in the store's windows, not yet
	// admitted, and given back if no request uses them.
	Keys, Leased int64
}

// Sharer is a store that decides global limits from its region's shares,
// charged at a home (the Redis store with Options.Home): ShareStats
// returns what its refills did, for an operator to watch.
type Sharer interface {
	ShareStats() ShareStats
}

// ShareStats are a Sharer's counters since it opened, over the refills
// this store ran (one store a region refills a key at a time).
type ShareStats struct {
	// Keys is how many global keys the store follows.
	Keys int64
	// Credited is the units charged at home and credited to the
	// region's shares (a window's and those charged ahead); GivenBack the
	// unused units taken from the shares and given back to home.
	Credited, GivenBack int64
	// HomeFailures is how many calls to home failed (cut off, home
	// failing over, or not on HomeReplicas replicas in time).
	HomeFailures int64
}

// Granter is a store that can grant quota to a client that admits
// requests on its own, such as an Envoy proxy given quota in the rate
// limit protocol's RateLimitResponse.Quota: Grant counts units more of the
// requests (each with its Cost, all of them together) in the store at
// once and returns how many the client may admit, until when. It grants
// nothing (a zero Grant) for requests it cannot grant for, or near their
// limits, and at most the store's own bound (store/redis: MaxLease).
type Granter interface {
	Grant(ctx context.Context, reqs []Request, units int64) (Grant, error)
}

// Grant is quota granted to a client: it may admit Units requests until
// Until, and never after.
type Grant struct {
	Units int64
	Until time.Time
}

// Clock is a store that tells the time of its clock: the time a decision
// without Request.Time is taken at (Redis TIME for the Redis store). A
// limiter handle's Reserve and Cancel read it, so that a reservation's
// time to act and its cancellation are judged by one clock.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// Consumed is one entry for a consumers list: the list of the level whose
// state is Key (placed by Tag, as the level's state is), and the entry.
type Consumed struct {
	Key, Tag string
	Entry    []byte
}

// DroppedError is a ConsumerLog's error when it kept some entries and
// dropped others to stay within its bounds.
type DroppedError struct {
	Dropped int
	Reason  string
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("store: %d consumers entries dropped: %s", e.Dropped, e.Reason)
}

// ConsumerLog is a store that keeps, next to a key's state, a capped list
// of its recent consumers (the service's "who consumed this key").
type ConsumerLog interface {
	// PushConsumers puts each entry at the head of its key's list, keeps
	// the newest max entries of the list and forgets the list ttl after its
	// last push.
	PushConsumers(ctx context.Context, entries []Consumed, max int, ttl time.Duration) error
	// Consumers returns a key's list, newest first (empty when none).
	Consumers(ctx context.Context, key, tag string) ([][]byte, error)
	// ResetConsumers forgets the lists of the requests' Key (placed by
	// Tag); the other fields are ignored.
	ResetConsumers(ctx context.Context, reqs []Request) error
}

// HolderLister is a store that lists who holds the slots of a
// concurrency limit's key (the service's admin view): Holders returns the
// holders of req.Key under req.Plan (placed by req.Tag) whose hold ends
// after req.Time (the zero Time: the store's clock), the earliest hold
// first; none for a key never seen. req.Plan must be of an
// algo.Concurrency (others: an error wrapping algo.ErrUnsupported).
type HolderLister interface {
	Holders(ctx context.Context, req Request) ([]algo.Holder, error)
}

// Adjuster is a store that changes a key outside a request, for
// req.Key under req.Plan (placed by req.Tag) at req.Time (the zero Time:
// the store's clock): Adjust applies a penalty or a reward of req.Cost
// units (algo.Plan.Adjust), Block blocks the key for d and Unblock ends
// its block (algo.Plan.BlockFor, Unblock; for a limit with a block). A
// store with an over-limit cache forgets the key's cached denials.
type Adjuster interface {
	Adjust(ctx context.Context, req Request, op algo.Adjust) error
	Block(ctx context.Context, req Request, d time.Duration) error
	Unblock(ctx context.Context, req Request) error
}

// Settler is a store that keeps the tickets of estimates to be settled
// (policy.Estimate, policy.Settle): Issue keeps a ticket named t.Key
// (placed by t.Tag) for ttl (MinTicket to MaxTicket) from t.Time (the
// zero Time: the store's clock); Settle, if the ticket is still kept,
// deletes it and applies op of each request's Cost to its key, and
// reports whether it did: the ticket is taken once, whoever races for it,
// so that the changes are made once. A penalty is Adjust's, at t.Time; a
// reward gives back what the estimate took at the request's Time
// (algo.Plan.GiveBack), only where it still counts at t.Time. A ticket
// settled, expired or never issued changes nothing. A tag holds at most
// MaxOpenTickets tickets: Issue refuses one more with ErrTooManyTickets,
// so that the tickets of one key never stop another's.
type Settler interface {
	Issue(ctx context.Context, t Request, ttl time.Duration) error
	Settle(ctx context.Context, t Request, reqs []Request, op algo.Adjust) (bool, error)
}

// A TicketQueue is a Settler that also queues tickets, for estimates whose
// holder keeps no id (Envoy's protocol: a stream's start and its end are
// paired by their descriptor and cost). Enqueue issues t as Issue does
// and, in the same step, queues entry (1 to 16 KiB) as the
// newest of the queue q.Key (placed by q.Tag, which is t's), for as long
// as the ticket lives; Dequeue takes the oldest entry of q whose life has
// not ended, once, whoever races for it, and returns it ("" when there is
// none). A queue holds no more entries than its tag holds tickets.
type TicketQueue interface {
	Settler
	Enqueue(ctx context.Context, t, q Request, entry string, ttl time.Duration) error
	Dequeue(ctx context.Context, q Request) (string, error)
}

// maxQueueEntry bounds a TicketQueue entry's length (a ticket's id: a
// settle_id, at most policy's MaxEstimateID).
const maxQueueEntry = 16 << 10

// ValidateQueue checks a TicketQueue's queue (a key as Validate takes one,
// with the tag of its tickets) and, for Enqueue, its entry (1 to 16 KiB).
// Its errors wrap ErrBadRequest.
func ValidateQueue(q Request, entry string, enqueue bool) error {
	switch {
	case q.Tag == "":
		return fmt.Errorf("%w: a ticket queue without a tag", ErrBadRequest)
	case enqueue && (entry == "" || len(entry) > maxQueueEntry):
		return fmt.Errorf("%w: a queue entry of %d bytes: want 1 to %d", ErrBadRequest, len(entry), maxQueueEntry)
	}
	return Validate(q.Key, q.Tag, ticketPlan, 0, q.Time)
}

// A Board is a store that keeps a small table that every instance of a
// service reads (the overrides of limits, package policy): Post sets the
// named entry (a nil value removes it) and moves the board's generation
// on; Read returns the generation and, with all, every entry, both as of
// one moment, with the store's time then. An instance that polls the
// generation sees every Post within its poll.
type Board interface {
	Post(ctx context.Context, name string, value []byte) error
	Read(ctx context.Context, all bool) (BoardState, error)
}

// BoardState is a Board as Read saw it.
type BoardState struct {
	Gen     int64
	Entries map[string][]byte // nil unless all
	Time    time.Time         // the store's clock
}

// The bounds of a Board: entries, and bytes of a name and of a value.
const (
	MaxBoardEntries = 10000
	MaxBoardName    = 1024
	MaxBoardValue   = 4096
)

// ValidatePost checks a Post's name and value against the bounds; its
// errors wrap ErrBadRequest.
func ValidatePost(name string, value []byte) error {
	switch {
	case name == "" || len(name) > MaxBoardName:
		return fmt.Errorf("%w: a board entry's name of %d bytes: want 1 to %d", ErrBadRequest, len(name), MaxBoardName)
	case len(value) > MaxBoardValue:
		return fmt.Errorf("%w: a board entry of %d bytes, more than %d", ErrBadRequest, len(value), MaxBoardValue)
	}
	return nil
}

// The bounds of a ticket's life (Settler.Issue), and of the tickets one
// tag (one caller's key) holds open at once.
const (
	MinTicket      = time.Millisecond
	MaxTicket      = 24 * time.Hour
	MaxOpenTickets = 10000
)

// ErrTooManyTickets is Issue's error when the ticket's tag holds
// MaxOpenTickets tickets not settled and not expired; it wraps
// ErrBadRequest.
var ErrTooManyTickets = fmt.Errorf("%w: the key holds %d open tickets (estimates not settled and not expired), the most one key may", ErrBadRequest, MaxOpenTickets)

// ValidateTicket checks a ticket and its life for Settler.Issue: a key as
// Validate takes one, with a tag (the key whose bound it counts against),
// and a ttl of MinTicket to MaxTicket. Its errors wrap ErrBadRequest.
func ValidateTicket(t Request, ttl time.Duration) error {
	switch {
	case ttl < MinTicket || ttl > MaxTicket:
		return fmt.Errorf("%w: a ticket for %v: want %v to %v", ErrBadRequest, ttl, MinTicket, MaxTicket)
	case t.Tag == "":
		return fmt.Errorf("%w: a ticket without a tag (the key whose open tickets it counts among)", ErrBadRequest)
	}
	return Validate(t.Key, t.Tag, ticketPlan, 0, t.Time)
}

// ticketPlan stands for the plan a ticket has not, in Validate.
var ticketPlan = algo.MustCompile(algo.Gate{Interval: time.Second})

// Script is a user-supplied limiter that a store runs in place of the
// algorithms: the httplimit middleware's script limiter
// (httplimit.NewScript), which reads its reply by its contract. The Redis
// store runs Lua scripts (store/redis: Store.LoadScript).
type Script interface {
	// Name names the script in decisions: its file's base name.
	Name() string
	// Run runs the script once: keys and args are its KEYS and ARGV. The
	// reply is as the script gave it, in Go values: nil, int64, float64,
	// bool, string, []any or map[string]any. A store failure, or the
	// script's own error, is an error naming the script.
	Run(ctx context.Context, keys, args []string) (any, error)
}
