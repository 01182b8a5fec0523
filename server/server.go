package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/server/envoyimport"

	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/store"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
)

// Server is the Sluice service: the HTTP/JSON API, the Envoy rate limit
// service over gRPC, metrics, health and admin endpoints, over one store and
// one policy that reloads.
type Server struct {
	cfg        Config
	log        *slog.Logger
	current    *policy.Current
	checker    *policy.Checker
	store      store.Store
	m          *metrics
	consumers  *consumerRecorder
	adminToken string
	failOpen   bool
	timeout    time.Duration

	reloadMu  sync.Mutex
	fileState fileStamp // of the policy file when last read
	fileSeen  fileStamp // of the policy file at the last poll

	ready atomic.Bool
	// xdsWait says why there is no xDS configuration yet (nil once the
	// first valid one is in force): ShouldRateLimit answers UNAVAILABLE
	// and /readyz 503 meanwhile, as envoyproxy/ratelimit does.
	xdsWait   atomic.Pointer[string]
	rlconfig  atomic.Pointer[rlconfig] // GET /rlconfig's text and Envoy's unlimited descriptors, for the policy they were converted to
	storeDown atomic.Bool              // the last ping failed (noteStore)
	errLog    ratelog.Every            // store failures: one line a second
	unmatched unmatchedLog             // where unmatched paths were logged
	httpLn    net.Listener
	grpcLn    net.Listener
	adminLn   net.Listener // nil: admin on httpLn
	httpSrv   drainable
	adminSrv  drainable
	grpcSrv   *grpc.Server
	health    *health.Server
	inflight  sync.WaitGroup
	queues    map[string]*lazyQueue
	// grpcTLS and httpTLS serve the listeners over TLS (nil: plain).
	grpcTLS, httpTLS *tlsFiles
	// queueStats guards each lazyQueue's stats; reading is closed when
	// the read in flight ends (nil when none is).
	queueStats struct {
		sync.Mutex
		reading chan struct{}
	}
	// forwardAuth is forward_auth compiled; nil when it has no routes.
	forwardAuth *forwardAuth
	// pipe answers every check, whichever API decoded it.
	pipe *answer.Pipeline
}

// defaultMaxWaiting is max_waiting's default: the requests held at once
// for a policy's delay (answer.Pipeline.MaxWaiting).
const defaultMaxWaiting = 10_000

// maxHeaderBytes bounds a request's line and header fields on the HTTP
// listeners: a request past it gets 431 from net/http. It matches what
// nginx accepts by default (4 buffers of 8 KiB), so that what nginx
// forwards Sluice reads, and a proxy that forwards more (Caddy, Traefik)
// hands its client the 431.
const maxHeaderBytes = 32 << 10

// New loads the policy and opens the store the config names. An invalid
// policy file returns its yamlfile.ErrorList (every error, positioned).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	token, err := cfg.adminToken()
	if err != nil {
		return nil, err
	}
	var grpcTLS, httpTLS *tlsFiles
	if cfg.GRPCTLS != (TLSConfig{}) {
		if grpcTLS, err = newTLSFiles(cfg.GRPCTLS); err != nil {
			return nil, fmt.Errorf("config: grpc_tls: %w", err)
		}
	}
	if cfg.HTTPTLS != (TLSConfig{}) {
		if httpTLS, err = newTLSFiles(cfg.HTTPTLS); err != nil {
			return nil, fmt.Errorf("config: http_tls: %w", err)
		}
	}
	if cfg.XDSTLS.enabled() { // read at each connection; refused now if wrong
		if _, err := tlsConfig(cfg.XDSTLS); err != nil {
			return nil, fmt.Errorf("config: xds_tls %w", err)
		}
	}
	fa, err := newForwardAuth(cfg.ForwardAuth)
	if err != nil {
		return nil, fmt.Errorf("config: forward_auth: %w", err)
	}
	if len(fa.routes) == 0 {
		fa = nil
	} else if u := cfg.ForwardAuth.Uncaught(); u != "" && cfg.ForwardAuth.Unmatched == "" {
		log.Warn("forward_auth: "+u+" is allowed and counted nowhere; add a last route that catches it (match: /), or say unmatched: allow (or deny)", "check", "sluice validate --config")
	}
	s := &Server{
		forwardAuth: fa, grpcTLS: grpcTLS, httpTLS: httpTLS,
		cfg: cfg, log: log, adminToken: token,
		failOpen: cfg.OnStoreError == "allow", timeout: time.Duration(cfg.Timeout),
		current: new(policy.Current),
	}
	if cfg.XDSServer != "" {
		s.waitXDS("waiting for the xDS server's first configuration")
	}
	s.m = newMetrics(s.PingStore, s.timeout) // reads s.store when scraped
	s.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_delay_waiting", Help: "Requests held now for a policy's delay (gRPC and forward-auth).",
	}, func() float64 { return float64(s.pipe.Waiting.Load()) }))
	p, stamp, err := s.loadPolicy()
	if err != nil {
		return nil, err
	}
	s.current.Store(p)
	s.fileState = stamp
	s.m.loadedAt.SetToCurrentTime()
	if s.store, err = openStore(ctx, cfg, log, !cfg.RequireStore); err != nil {
		if cfg.RequireStore {
			err = fmt.Errorf("the store cannot be reached and require_store is set: %w", err)
		}
		return nil, err
	}
	s.checker = &policy.Checker{Policy: s.current, Store: s.store}
	s.pipe = &answer.Pipeline{Checker: s.checker, Timeout: s.timeout, Timed: true, FailOpen: s.failOpen, MaxWaiting: int64(cfg.MaxWaiting), Log: log,
		StoreFailed: func(*answer.Call, error) { s.m.storeErrors.Inc() },
		Delayed: func(c *answer.Call, refused bool) {
			if refused {
				s.m.delayRefused.WithLabelValues(c.API).Inc()
			} else {
				s.m.delayed.WithLabelValues(c.API).Inc()
			}
		}}
	s.consumers = newConsumerRecorder(s.store, cfg.Consumers, s.m.dropped, log)
	if len(cfg.Queues) > 0 && !queue.Shared(s.store) {
		s.store.Close()
		return nil, errors.New("config: queues need a Redis store (--store redis://...): on the memory store no worker process could drain them")
	}
	s.queues = make(map[string]*lazyQueue, len(cfg.Queues))
	for name, qc := range cfg.Queues {
		s.queues[name] = newLazyQueue(name, qc)
	}
	if len(s.queues) > 0 {
		s.m.reg.MustRegister(queueCollector{s})
	}
	if dc, ok := s.store.(store.DenialCache); ok && cfg.Redis.OverLimitCache > 0 {
		s.m.registerOverLimit(dc)
	}
	if l, ok := s.store.(store.Leaser); ok && cfg.Redis.LeaseFor > 0 {
		s.m.registerLeases(l)
	}
	if sh, ok := s.store.(store.Sharer); ok && cfg.Redis.Home != "" {
		s.m.registerShares(sh)
	}
	return s, nil
}

// loadPolicy reads the policy file, or parses the bundled policy.
func (s *Server) loadPolicy() (*policy.Policy, fileStamp, error) {
	if s.cfg.XDSServer != "" { // the xDS server's, until its first: none (watchXDS)
		if p := s.current.Load(); p != nil {
			return p, fileStamp{}, nil
		}
		p, err := policy.Parse("xds:"+s.cfg.XDSServer, []byte(xdsWaiting))
		return p, fileStamp{}, err
	}
	if dir := s.cfg.EnvoyConfigDir; dir != "" {
		stamp := statDir(dir)
		names, err := envoyFiles(dir)
		if err == nil && len(names) == 0 {
			err = fmt.Errorf("envoy_config_dir %s holds no *.yaml file", dir)
		}
		if err != nil {
			return nil, stamp, err
		}
		files := make([]envoyimport.File, len(names))
		for i, n := range names {
			if files[i].Data, err = yamlfile.ReadFile(n); err != nil {
				return nil, stamp, err
			}
			files[i].Name = n
		}
		out, warnings, err := envoyimport.Convert(files, s.cfg.Envoy.Counts)
		if err != nil {
			return nil, stamp, err
		}
		for _, w := range warnings {
			s.log.Warn("envoy config: "+w, "dir", dir)
		}
		p, err := policy.Parse(dir, out)
		if err == nil {
			text, unlimited, quota := envoyimport.Dump(files)
			s.rlconfig.Store(&rlconfig{p, text, unlimited, quota})
		}
		return p, stamp, err
	}
	if s.cfg.Policy == "" {
		name := s.cfg.PolicyName
		if name == "" {
			name = "limits.yaml"
		}
		p, err := policy.Parse(name, s.cfg.PolicyData)
		return p, fileStamp{}, err
	}
	stamp := statFile(s.cfg.Policy)
	p, err := policy.Load(s.cfg.Policy)
	return p, stamp, err
}

// Policy returns the policy in force.
func (s *Server) Policy() *policy.Policy { return s.current.Load() }

// Listen binds the configured addresses ("off" skips one). Port 0 picks a
// free port; HTTPAddr and GRPCAddr tell which.
func (s *Server) Listen() error {
	var err error
	if s.cfg.HTTP != "off" {
		if s.httpLn, err = net.Listen("tcp", s.cfg.HTTP); err != nil {
			return fmt.Errorf("listen http: %w", err)
		}
	}
	if s.cfg.GRPC != "off" {
		if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPC); err != nil {
			if s.httpLn != nil {
				s.httpLn.Close()
			}
			return fmt.Errorf("listen grpc: %w", err)
		}
	}
	if s.cfg.AdminHTTP != "" {
		if s.adminLn, err = net.Listen("tcp", s.cfg.AdminHTTP); err != nil {
			for _, l := range []net.Listener{s.httpLn, s.grpcLn} {
				if l != nil {
					l.Close()
				}
			}
			return fmt.Errorf("listen admin: %w", err)
		}
	}
	return nil
}

// HTTPAddr is the HTTP listener's address, "" when off or not listening.
func (s *Server) HTTPAddr() string { return addrOf(s.httpLn) }

// GRPCAddr is the gRPC listener's address, "" when off or not listening.
func (s *Server) GRPCAddr() string { return addrOf(s.grpcLn) }

// AdminAddr is the admin listener's address, "" when admin is served on
// the HTTP listener.
func (s *Server) AdminAddr() string { return addrOf(s.adminLn) }

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// Serve serves on the listeners of Listen until ctx is done, then shuts
// down gracefully: it stops being ready, stops accepting, lets in-flight
// requests finish (within ShutdownTimeout), flushes the consumers lists and
// closes the store. reload receives a value for each reload asked for
// (SIGHUP); the policy file is also polled every WatchInterval.
func (s *Server) Serve(ctx context.Context, reload <-chan struct{}) error {
	if s.httpLn == nil && s.grpcLn == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	// Ready from the start: the listeners are bound, so a request that
	// comes before its server runs waits for it rather than failing.
	s.ready.Store(true)
	errc := make(chan error, 3)
	serveHTTP := func(ln net.Listener, h http.Handler, tlsFiles *tlsFiles, name string) drainable {
		conns := newConnTracker(ln)
		srv := &http.Server{
			Handler:           conns.handler(h),
			ReadHeaderTimeout: 10 * time.Second,
			MaxHeaderBytes:    maxHeaderBytes,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			ConnState:         conns.connState,
			ConnContext:       conns.connContext,
		}
		var l net.Listener = conns // TLS over the tracker: it sees the bytes as they arrive
		if tlsFiles != nil {
			l = tls.NewListener(l, tlsFiles.config())
		}
		go func() {
			defer close(conns.served)
			err := srv.Serve(l)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) { // the drain closes the listener
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
		return drainable{srv, conns}
	}
	if s.httpLn != nil {
		s.httpSrv = serveHTTP(s.httpLn, s.handler(s.adminLn == nil, true), s.httpTLS, "http")
	}
	if s.adminLn != nil {
		s.adminSrv = serveHTTP(s.adminLn, s.handler(true, false), nil, "admin")
	}
	if s.grpcLn != nil {
		// Stream workers: each call runs on a worker goroutine whose stack
		// has already grown, not on a new goroutine per call whose stack
		// grows again (copystack was a fifth of the service's CPU).
		opts := []grpc.ServerOption{grpc.NumStreamWorkers(256)}
		if s.grpcTLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(s.grpcTLS.config())))
		}
		s.grpcSrv = grpc.NewServer(opts...)
		rlv3.RegisterRateLimitServiceServer(s.grpcSrv, &rateLimitService{s: s})
		s.health = health.NewServer()
		healthpb.RegisterHealthServer(s.grpcSrv, s.health)
		if s.cfg.GRPCReflection != "off" {
			reflection.Register(s.grpcSrv)
		}
		s.setHealth(healthpb.HealthCheckResponse_SERVING)
		go func() {
			if err := s.grpcSrv.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("grpc: %w", err)
			}
		}()
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		var xds sync.WaitGroup
		if s.cfg.XDSServer != "" {
			xds.Add(1)
			go func() {
				defer xds.Done()
				s.watchXDS(watchCtx)
			}()
		}
		s.watch(watchCtx, reload)
		xds.Wait()
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining in-flight requests", "timeout", time.Duration(s.cfg.ShutdownTimeout))
	case serveErr = <-errc:
		s.log.Error("serve failed, shutting down", "err", serveErr)
	}
	stopWatch()
	<-watchDone
	s.shutdown()
	return serveErr
}

// shutdown stops the listeners, waits for in-flight requests and releases
// everything.
func (s *Server) shutdown() {
	s.ready.Store(false)
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	if d := time.Duration(s.cfg.ShutdownDelay); d > 0 {
		s.log.Info("not ready; serving on before closing the listeners", "shutdown_delay", d)
		time.Sleep(d)
	}
	timeout := time.Duration(s.cfg.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range []drainable{s.httpSrv, s.adminSrv} {
		if srv.Server == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.conns.drain(ctx) // every request begun reaches its handler, then Shutdown waits for the handlers
			if err := srv.Shutdown(ctx); err != nil {
				s.log.Warn("http shutdown: in-flight requests cut short", "err", err)
				srv.Close()
			}
		}()
	}
	if s.grpcSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { s.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.log.Warn("grpc shutdown: in-flight calls cut short")
				s.grpcSrv.Stop()
			}
		}()
	}
	wg.Wait()
	s.inflight.Wait()
	s.consumers.close()
	s.store.Close()
	s.log.Info("stopped")
}

// Close releases the store of a server that was never served.
func (s *Server) Close() {
	if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.grpcLn != nil {
		s.grpcLn.Close()
	}
	if s.adminLn != nil {
		s.adminLn.Close()
	}
	s.consumers.close()
	s.store.Close()
}

func (s *Server) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	if s.health == nil {
		return
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlv3.RateLimitService_ServiceDesc.ServiceName, st)
}

// --- deciding ---

// isBadRequest reports whether a store error is the request's fault.
func isBadRequest(err error) bool {
	return errors.Is(err, store.ErrBadRequest) || errors.Is(err, algo.ErrInvalid)
}

// storeFailed logs (at most once a second) and counts a store failure.
func (s *Server) storeFailed(api string, err error) {
	s.m.storeErrors.Inc()
	if n, ok := s.errLog.Allow(time.Now()); ok {
		s.log.Error("store failed; answering with on_store_error", "api", api, "err", err,
			"on_store_error", s.cfg.OnStoreError, "suppressed", n)
	}
}

// --- logging ---

// NewLogger returns the slog logger the config asks for, writing to w.
func NewLogger(c Config, w *os.File) (*slog.Logger, error) {
	c = c.Defaults()
	lvl, err := parseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("config: log_level must be debug, info, warn or error, got %q", s)
}
