package server

import (
	"github.com/sluicehq/sluice/store"
	_ "github.com/sluicehq/sluice/store/memory" // the memory:// store
	_ "github.com/sluicehq/sluice/store/redis"  // the redis:// store

	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// OpenStore opens the store cfg names, with its Redis settings, as serve
// opens it; a store that cannot be reached is an error. The CLI's commands
// that change a running service's state open theirs so.
func OpenStore(ctx context.Context, cfg Config) (store.Store, error) {
	return openStore(ctx, cfg, slog.Default(), false)
}

// openStore opens the store the config names. With background, a Redis
// that cannot be dialled (refused, unreachable, timed out) is not an
// error: the store connects in the background, and meanwhile every
// decision fails with store.ErrNotConnected. Anything else (a bad URL, a
// bad password, a TLS certificate that does not verify) is.
func openStore(ctx context.Context, c Config, log *slog.Logger, background bool) (store.Store, error) {
	opts := store.Options{
		Prefix:          c.Redis.Prefix,
		Timeout:         time.Duration(c.Timeout),
		Username:        c.Redis.Username,
		Password:        c.Redis.Password,
		MaxFlushDelay:   time.Duration(c.Redis.MaxFlushDelay),
		OverLimitCache:  max(c.Redis.OverLimitCache, 0),
		LeaseFor:        max(time.Duration(c.Redis.LeaseFor), 0),
		MaxLease:        c.Redis.MaxLease,
		Home:            c.Redis.Home,
		GlobalAllowance: c.Redis.GlobalAllowance,
		HomeReplicas:    c.Redis.HomeReplicas,
		Background:      background,
		Log:             log,
	}
	if c.Redis.TLS.enabled() {
		tc, err := tlsConfig(c.Redis.TLS)
		if err != nil {
			return nil, fmt.Errorf("store: redis tls %w", err)
		}
		opts.TLS = tc
	}
	return store.Open(ctx, c.Store, opts)
}

// tlsConfig is a client's tls.Config of t (Redis's, the xDS server's);
// an error names the field that is wrong.
func tlsConfig(t TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file, key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if t.ServerName != "" {
		tc.ServerName = t.ServerName
	}
	tc.InsecureSkipVerify = t.InsecureSkipVerify
	return tc, nil
}
