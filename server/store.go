package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// Resetter is a store that can forget keys: the admin reset endpoint needs
// it. Reset forgets the state of each request's Key (placed, for Redis
// Cluster, by its Tag), as if the key had never been seen; the other
// fields of the requests are ignored. The memory and Redis stores
// implement it.
type Resetter interface {
	Reset(ctx context.Context, reqs []sluice.Request) error
}

// backend is an open store and what the server needs beside decisions.
type backend struct {
	store  sluice.Store
	kind   string // "memory" or "redis"
	prefix string
	redis  *lazyRedis // nil for the memory store
}

// ErrNotConnected is the error of every decision while the service has
// not yet reached Redis (see openStore).
var ErrNotConnected = errors.New("store: not connected to Redis yet")

// lazyRedis is the Redis store once connected. A service started while
// Redis is unreachable serves anyway, answering by on_store_error and not
// ready, and connects in the background (every second) until it can.
type lazyRedis struct {
	conn atomic.Pointer[redisConn]
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type redisConn struct {
	client rueidis.Client
	st     *redis.Store
}

func (l *lazyRedis) get() *redisConn { return l.conn.Load() }

// client returns the connected client, or nil.
func (l *lazyRedis) client() rueidis.Client {
	if c := l.get(); c != nil {
		return c.client
	}
	return nil
}

// DecideAll implements sluice.Store.
func (l *lazyRedis) DecideAll(ctx context.Context, reqs []sluice.Request, results []algo.Result) (bool, error) {
	c := l.get()
	if c == nil {
		return false, ErrNotConnected
	}
	return c.st.DecideAll(ctx, reqs, results)
}

// Decide implements sluice.Store.
func (l *lazyRedis) Decide(ctx context.Context, req sluice.Request) (algo.Result, error) {
	c := l.get()
	if c == nil {
		return algo.Result{}, ErrNotConnected
	}
	return c.st.Decide(ctx, req)
}

// Reset implements Resetter.
func (l *lazyRedis) Reset(ctx context.Context, reqs []sluice.Request) error {
	c := l.get()
	if c == nil {
		return ErrNotConnected
	}
	return c.st.Reset(ctx, reqs)
}

// Close implements sluice.Store: it stops connecting and closes the client.
func (l *lazyRedis) Close() error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	if c := l.get(); c != nil {
		c.client.Close()
	}
	return nil
}

// openStore opens the store the config names. A Redis that cannot be
// dialled (refused, unreachable, timed out) is not an error: the backend
// connects in the background, and meanwhile every decision fails with
// ErrNotConnected. Anything else (a bad URL, a bad password, a TLS
// certificate that does not verify) is.
func openStore(ctx context.Context, c Config, log *slog.Logger) (*backend, error) {
	u := c.Store
	switch {
	case u == "memory" || u == "memory://":
		return &backend{store: memory.New(), kind: "memory"}, nil
	case strings.HasPrefix(u, "redis://") || strings.HasPrefix(u, "rediss://"):
	default:
		return nil, fmt.Errorf("store: unknown store URL %q (want memory, redis://host:port/db or rediss://...)", u)
	}
	co, err := rueidis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	co.DisableCache = true
	co.Dialer.Timeout = 5 * time.Second
	if d := time.Duration(c.Redis.MaxFlushDelay); d > 0 {
		co.MaxFlushDelay = d
	}
	if c.Redis.Username != "" {
		co.Username = c.Redis.Username
	}
	if c.Redis.Password != "" {
		co.Password = c.Redis.Password
	}
	if c.Redis.TLS.enabled() {
		tc, err := tlsConfig(c.Redis.TLS, co.TLSConfig)
		if err != nil {
			return nil, err
		}
		co.TLSConfig = tc
	}
	prefix := c.Redis.Prefix
	if prefix == "" {
		prefix = redis.DefaultPrefix
	}
	opts := redis.Options{Prefix: prefix, Timeout: time.Duration(c.Timeout)}
	connect := func() (*redisConn, error) {
		client, err := rueidis.NewClient(co)
		if err != nil {
			return nil, err
		}
		st, err := redis.New(client, opts)
		if err != nil {
			client.Close()
			return nil, err
		}
		return &redisConn{client: client, st: st}, nil
	}
	l := &lazyRedis{stop: make(chan struct{}), done: make(chan struct{})}
	be := &backend{store: l, kind: "redis", prefix: prefix, redis: l}
	conn, err := connect()
	if err == nil {
		l.conn.Store(conn)
		close(l.done)
		return be, nil
	}
	if !isDialError(err) {
		return nil, fmt.Errorf("store: connect to %s: %w", redactURL(u), err)
	}
	log.Warn("store unreachable; serving by on_store_error and connecting in the background",
		"store", redactURL(u), "err", err)
	go func() {
		defer close(l.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			conn, err := connect()
			if err != nil {
				log.Debug("store still unreachable", "err", err)
				continue
			}
			l.conn.Store(conn)
			log.Info("store connected", "store", redactURL(u))
			return
		}
	}()
	return be, nil
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

func tlsConfig(t TLSConfig, base *tls.Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		tc = base.Clone()
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store: redis tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store: redis tls ca_file %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store: redis tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if t.ServerName != "" {
		tc.ServerName = t.ServerName
	}
	tc.InsecureSkipVerify = t.InsecureSkipVerify
	return tc, nil
}

// ping checks that the store answers.
func (b *backend) ping(ctx context.Context) error {
	if b.redis == nil {
		return nil
	}
	c := b.redis.client()
	if c == nil {
		return ErrNotConnected
	}
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

func (b *backend) close() { b.store.Close() }

// redactURL hides a URL's password.
func redactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "…" + u[at:]
}
