package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
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
	client rueidis.Client // nil for the memory store
	prefix string
	kind   string // "memory" or "redis"
}

// openStore opens the store the config names.
func openStore(ctx context.Context, c Config) (*backend, error) {
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
	client, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("store: connect to %s: %w", redactURL(u), err)
	}
	prefix := c.Redis.Prefix
	if prefix == "" {
		prefix = redis.DefaultPrefix
	}
	st, err := redis.New(client, redis.Options{Prefix: prefix, Timeout: time.Duration(c.Timeout)})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &backend{store: st, client: client, prefix: prefix, kind: "redis"}, nil
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
	if b.client == nil {
		return nil
	}
	return b.client.Do(ctx, b.client.B().Ping().Build()).Error()
}

func (b *backend) close() {
	b.store.Close()
	if b.client != nil {
		b.client.Close()
	}
}

// redactURL hides a URL's password.
func redactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "…" + u[at:]
}
