package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// DefaultPrefix is the prefix of every key the store writes, unless
// Options.Prefix says otherwise.
const DefaultPrefix = "sluice:"

// defaultMaxFlushDelay is Open's Options.MaxFlushDelay when zero.
const defaultMaxFlushDelay = 20 * time.Microsecond

// defaultTimeout bounds a decision whose context has no deadline.
const defaultTimeout = time.Second

// Options configure a Store.
type Options struct {
	// Prefix is put before every key (DefaultPrefix when empty). It may not
	// contain '{' or '}', which would pick a Redis Cluster hash tag.
	Prefix string
	// MaxFlushDelay is how long the client may wait to gather concurrent
	// commands into one write (rueidis' MaxFlushDelay): under load it cuts
	// the client's and Redis's CPU per decision, at the cost of up to that
	// much latency. Open uses 20µs when zero; a negative value disables
	// it. New leaves the client as it is.
	MaxFlushDelay time.Duration
	// Timeout bounds a decision whose context has no deadline
	// (1s when zero).
	Timeout time.Duration
	// Username and Password, when set, override the URL's (Open only).
	Username, Password string
	// TLS, when set, is the client's TLS configuration (Open only).
	TLS *tls.Config
	// Background makes Open return a store even when Redis cannot be
	// dialled (refused, unreachable, timed out): it connects in the
	// background, every second, and until then every operation fails with
	// store.ErrNotConnected. Other errors (a bad URL, password or
	// certificate) are still returned.
	Background bool
	// Log receives the background connection's events (nil:
	// slog.Default()).
	Log *slog.Logger
	// MaxInFlight bounds the decisions sent to Redis and not yet answered
	// (DefaultMaxInFlight when zero). A decision past it waits for room
	// until its context is done: however many callers there are, the
	// client's pipeline never holds more than Redis answers in time, and
	// every call returns by its deadline.
	MaxInFlight int
	// OverLimitCache, when positive, keeps an exact over-limit cache of
	// about that many keys (overlimit.go): a denial is repeated
	// without a round trip while it must still hold. Resets and refunds
	// made through any store on the same Redis and prefix forget their
	// keys: this store's at once, another's within ForgetPoll plus a
	// round trip (forget.go: pub/sub, and a generation counter that
	// catches lost messages). Other changes to the state (a key deleted by
	// hand) are seen when the cached denial expires, at the latest its
	// RetryAfter: the cache never admits more, but may deny that long.
	OverLimitCache int
	// LeaseFor, when positive, turns on leased quota for requests with
	// Lease set (see lease.go's bounds): a lease lives at most this long
	// (and never past its window), and what it has left is given back
	// within LeaseFor/2 after. MaxLease bounds a lease's units
	// (DefaultMaxLease when zero).
	LeaseFor time.Duration
	MaxLease int64
	// Home, when set, is the home of global limits (global.go,
	// docs/multi-region.md): this store is a region's, and a request with
	// Global set is admitted from the region's share of its window, charged
	// at Home first and refilled every GlobalEvery (100ms when zero), sized
	// by the region's demand. Once its share is spent, a region cut off
	// from Home denies, or admits GlobalAllowance more units a window.
	// HomeReplicas, when positive, spends units only once that many of
	// Home's replicas have their charge (WAIT), so that a failover of Home
	// loses no charge. The caller keeps owning Home.
	Home            *Store
	GlobalEvery     time.Duration
	GlobalAllowance int64
	HomeReplicas    int

	// manualRefill (tests) starts no background refill: the test refills
	// at its own times (refillAt).
	manualRefill bool
	// ownsHome makes Close close Home (a store opened by URL).
	ownsHome bool
}

// defaultMaxInFlight is Options.MaxInFlight when zero.
const defaultMaxInFlight = 4096

// Store is the Redis store.
type Store struct {
	conn     atomic.Pointer[conn] // nil until connected
	inflight chan struct{}        // a place per decision in flight
	owned    bool
	prefix   string
	timeout  time.Duration
	coalesce coalescer
	denials  *denialCache // nil when off
	leases   *leaser      // nil when off
	globals  *globals     // nil without a home
	forgets  forgets      // followed when denials is not nil

	stop chan struct{} // ends background connecting
	done chan struct{} // closed when background connecting has ended
	once sync.Once
}

type conn struct{ client rueidis.Client }

var (
	_ store.Store       = (*Store)(nil)
	_ store.Pinger      = (*Store)(nil)
	_ store.Resetter    = (*Store)(nil)
	_ store.ConsumerLog = (*Store)(nil)
)

func init() {
	store.Register("redis", func(ctx context.Context, url string, o store.Options) (store.Store, error) {
		opts := Options{
			Prefix: o.Prefix, Timeout: o.Timeout, MaxFlushDelay: o.MaxFlushDelay,
			Username: o.Username, Password: o.Password, TLS: o.TLS,
			Background: o.Background, Log: o.Log, OverLimitCache: o.OverLimitCache,
			LeaseFor: o.LeaseFor, MaxLease: o.MaxLease,
			GlobalAllowance: o.GlobalAllowance, HomeReplicas: o.HomeReplicas,
		}
		if o.Home == "" {
			return Open(ctx, url, opts)
		}
		// Home has its own URL (and credentials in it); it may be
		// unreachable at start, as a region cut off is.
		home, err := Open(ctx, o.Home, Options{Prefix: o.Prefix, Timeout: o.Timeout, TLS: o.TLS, Background: true, Log: o.Log})
		if err != nil {
			return nil, fmt.Errorf("home: %w", err)
		}
		opts.Home, opts.ownsHome = home, true
		s, err := Open(ctx, url, opts)
		if err != nil {
			home.Close()
		}
		return s, err
	})
}

// Open connects to Redis by URL and returns a store that owns the
// connection. The forms are:
//
//	redis://[user:password@]host:port[/db]     one server (rediss:// for TLS)
//	redis://host:port?addr=host2:port2&...      a Redis Cluster seed list
//	redis://host:26379?master_set=mymaster      Sentinel
//
// Cluster is detected from the server itself.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	co, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	co.DisableCache = true
	switch {
	case opts.MaxFlushDelay == 0:
		co.MaxFlushDelay = defaultMaxFlushDelay
	case opts.MaxFlushDelay > 0:
		co.MaxFlushDelay = opts.MaxFlushDelay
	}
	if d, ok := ctx.Deadline(); ok {
		co.Dialer.Timeout = time.Until(d)
	} else if co.Dialer.Timeout == 0 {
		co.Dialer.Timeout = 5 * time.Second
	}
	if opts.Username != "" {
		co.Username = opts.Username
	}
	if opts.Password != "" {
		co.Password = opts.Password
	}
	if opts.TLS != nil {
		co.TLSConfig = opts.TLS
	}
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.owned = true
	c, err := rueidis.NewClient(co)
	if err == nil {
		s.conn.Store(&conn{c})
		close(s.done)
		return s, nil
	}
	if co.TLSConfig != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		// A plaintext Redis never answers a TLS handshake: the dial waits
		// for its timeout and says only that.
		err = fmt.Errorf("%w (the TLS handshake went unanswered: a plaintext Redis never answers one; if the server does not speak TLS, use redis:// without TLS options)", err)
	}
	if !opts.Background || !isDialError(err) {
		return nil, fmt.Errorf("redis store: connect %s: %w", store.Redact(url), err)
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("store unreachable; connecting in the background", "store", store.Redact(url), "err", err)
	go s.connect(co, url, log)
	return s, nil
}

// connect dials every second until it succeeds or the store is closed.
func (s *Store) connect(co rueidis.ClientOption, url string, log *slog.Logger) {
	defer close(s.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		c, err := rueidis.NewClient(co)
		if err != nil {
			log.Debug("store still unreachable", "err", err)
			continue
		}
		s.conn.Store(&conn{c})
		log.Info("store connected", "store", store.Redact(url))
		return
	}
}

// isDialError reports whether connecting failed for want of a connection,
// which may come later, rather than for a setting that will not change.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrDeadlineExceeded)
}

// New returns a store on an existing client, which the caller keeps
// owning: Close does not close it.
func New(c rueidis.Client, opts Options) (*Store, error) {
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.conn.Store(&conn{c})
	close(s.done)
	return s, nil
}

func newStore(opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	switch {
	case strings.ContainsAny(opts.Prefix, "{}"):
		return nil, fmt.Errorf("redis store: prefix %q may not contain '{' or '}'", opts.Prefix)
	case opts.Timeout < 0 || opts.MaxInFlight < 0 || opts.MaxLease < 0:
		return nil, fmt.Errorf("redis store: a negative option: timeout %v, max in flight %d, max lease %d (zero: the default)", opts.Timeout, opts.MaxInFlight, opts.MaxLease)
	case opts.GlobalEvery < 0 || opts.GlobalAllowance < 0 || opts.HomeReplicas < 0:
		return nil, fmt.Errorf("redis store: a negative option: global every %v, global allowance %d, home replicas %d (zero: the default)", opts.GlobalEvery, opts.GlobalAllowance, opts.HomeReplicas)
	case opts.GlobalAllowance > algo.MaxCount:
		return nil, fmt.Errorf("redis store: global allowance %d exceeds %d (algo.MaxCount)", opts.GlobalAllowance, algo.MaxCount)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = defaultMaxInFlight
	}
	s := &Store{prefix: opts.Prefix, timeout: opts.Timeout, inflight: make(chan struct{}, opts.MaxInFlight),
		stop: make(chan struct{}), done: make(chan struct{})}
	if opts.OverLimitCache > 0 {
		s.denials = newDenialCache(opts.OverLimitCache)
		s.forgets.done = make(chan struct{})
		go s.watchForgets()
	}
	if opts.LeaseFor > 0 {
		if opts.MaxLease <= 0 {
			opts.MaxLease = defaultMaxLease
		}
		s.leases = newLeaser(opts.LeaseFor, opts.MaxLease)
		go s.sweep()
	}
	if opts.Home != nil {
		s.globals = newGlobals(opts.Home, opts.GlobalEvery, opts.GlobalAllowance, opts.HomeReplicas)
		s.globals.ownsHome = opts.ownsHome
		if !opts.manualRefill {
			go s.refill()
		} else {
			close(s.globals.done)
		}
	}
	return s, nil
}

// Client returns the store's Redis client, nil while a store opened with
// Options.Background has not connected.
func (s *Store) Client() rueidis.Client {
	if c := s.conn.Load(); c != nil {
		return c.client
	}
	return nil
}

func (s *Store) client() rueidis.Client { return s.Client() }

// connected returns ctx bounded by the store's timeout when it has no
// deadline, or store.ErrNotConnected.
func (s *Store) connected(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.conn.Load() == nil {
		return ctx, nil, store.ErrNotConnected
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return ctx, cancel, nil
}

// enter takes a place for a decision in flight, or returns ctx's error
// when ctx is done first.
func (s *Store) enter(ctx context.Context) error {
	select {
	case s.inflight <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.inflight <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redis store: waiting for one of %d places in flight: %w", cap(s.inflight), ctx.Err())
	}
}

// leave gives back enter's place.
func (s *Store) leave() { <-s.inflight }

// Ping implements store.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	c, err := s.clientOrErr()
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

// Close stops connecting in the background and closes the connection if
// the store opened it.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		if s.leases != nil {
			close(s.leases.stop) // gives every lease's units back
			<-s.leases.done
		}
		if s.globals != nil {
			close(s.globals.stop)
			<-s.globals.done
			if s.globals.ownsHome {
				s.globals.home.Close()
			}
		}
	})
	<-s.done
	if s.forgets.done != nil {
		<-s.forgets.done
	}
	if c := s.conn.Load(); c != nil && s.owned {
		c.client.Close()
	}
	return nil
}
