package envoydiff

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/redistest"
)

// binaries are the two services, built once per test binary.
type binaries struct {
	sluice, envoy string // paths
	readme        string // envoyproxy/ratelimit's README.md, from its module
}

var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

// build builds sluice from this checkout (its own module, ..) and
// envoyproxy/ratelimit from bench/cmd/envoyrl (the module that pins its
// version, with upstream's own dependency versions), and finds the
// README of the pinned version in the module cache.
func build(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "envoydiff-bin-")
		if err != nil {
			buildErr = err
			return
		}
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		envoyMod := filepath.Join(root, "bench", "cmd", "envoyrl")
		built = binaries{sluice: filepath.Join(dir, "sluice"), envoy: filepath.Join(dir, "envoyrl")}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		run := func(i int, wd string, out *string, args ...string) {
			defer wg.Done()
			cmd := exec.Command("go", args...)
			cmd.Dir = wd
			b, err := cmd.CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), wd, err, b)
			}
			if out != nil {
				*out = strings.TrimSpace(string(b))
			}
		}
		var modDir string
		wg.Add(3)
		go run(0, root, nil, "build", "-o", built.sluice, "./cmd/sluice")
		go run(1, envoyMod, nil, "build", "-o", built.envoy, ".")
		go run(2, envoyMod, &modDir, "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit")
		wg.Wait()
		for _, e := range errs {
			if e != nil {
				buildErr = e
				return
			}
		}
		built.readme = filepath.Join(modDir, "README.md")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// service is one running rate limit service and the client to it.
type service struct {
	name   string
	http   string // host:port of PORT
	debug  string // host:port of DEBUG_PORT
	client rlv3.RateLimitServiceClient
}

// pair is envoyproxy/ratelimit and Sluice started as it, with the same
// variables (env) and configuration directory, each on its own Redis.
type pair struct {
	name          string
	env           []string
	envoy, sluice *service
}

// startPairs starts a pair of services for each entry of configs (the
// pair's name: its files, name -> YAML), with the variables pairs gives
// it, each on a runtime directory of its own; every service at once.
func startPairs(t *testing.T, bin binaries, configs map[string]map[string]string) map[string]*pair {
	t.Helper()
	out := map[string]*pair{}
	var wg sync.WaitGroup
	// A port free a moment ago may be taken before the service binds it
	// (a busy machine's outgoing connections take them too): the service
	// then exits, and starts again on other ports.
	start := func(which, root string, rd *redistest.Server, env []string, out **service) {
		defer wg.Done()
		var why string
		for range 3 {
			var s *service
			if s, why = startService(t, bin, which, rd.Addr, root, env); s != nil {
				*out = s
				return
			}
		}
		t.Errorf("%s did not start: %s", which, why)
	}
	for name, files := range configs {
		root := t.TempDir()
		cfgDir := filepath.Join(root, "ratelimit", "config")
		if err := os.MkdirAll(cfgDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, y := range files {
			if err := os.WriteFile(filepath.Join(cfgDir, f), []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p := &pair{name: name, env: pairs[name]}
		out[name] = p
		wg.Add(2)
		go start("envoy", root, redistest.Start(t), p.env, &p.envoy)
		go start("sluice", root, redistest.Start(t), p.env, &p.sluice)
	}
	wg.Wait()
	for _, p := range out {
		if p.envoy == nil || p.sluice == nil {
			t.FailNow()
		}
	}
	return out
}

// startService starts one service of a pair on free ports and returns it
// once its gRPC port accepts and /healthcheck answers 200, or nil and
// why, with its output, if it exited first. It is stopped by its PID
// when the test ends.
func startService(t *testing.T, bin binaries, which, redisAddr, root string, env []string) (*service, string) {
	dir := t.TempDir()
	httpAddr, grpcAddr, debugAddr := freeAddr(), freeAddr(), freeAddr()
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
	e := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + port(httpAddr), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(debugAddr),
	}
	e = append(e, env...)
	argv0 := bin.envoy
	if which == "sluice" {
		// Started as envoyproxy/ratelimit's /bin/ratelimit. Not one of
		// its variables: Sluice's store timeout at a minute, so that a
		// busy machine does not turn a slow decision into
		// on_store_error's answer (REDIS_TIMEOUT is not honoured).
		argv0 = filepath.Join(dir, "ratelimit")
		if err := os.Symlink(bin.sluice, argv0); err != nil {
			return nil, err.Error()
		}
		e = append(e, "SLUICE_TIMEOUT=1m")
	}
	if *cacheFlag {
		// Both local caches on: Sluice's over-limit cache as
		// envoyproxy/ratelimit's (off by default, as its own is).
		e = append(e, "LOCAL_CACHE_SIZE_IN_BYTES=1048576")
	}
	logPath := filepath.Join(dir, "output.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err.Error()
	}
	defer log.Close()
	cmd := exec.Command(argv0)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, e, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err.Error()
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	// The deadline is a hang detector, not a speed bound.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return nil, fmt.Sprintf("%s exited: %s", which, output())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Sprintf("%s not healthy after 3 minutes: %s", which, output())
		}
		if healthy("http://"+httpAddr+"/healthcheck") && accepts(grpcAddr) {
			break
		}
	}
	t.Cleanup(stop)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err.Error()
	}
	t.Cleanup(func() { conn.Close() })
	return &service{name: which, http: httpAddr, debug: debugAddr, client: rlv3.NewRateLimitServiceClient(conn)}, ""
}

func healthy(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func accepts(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// answer is one service's answer to one request: over gRPC, resp or
// err; over POST /json, also the HTTP status (resp when the body is one).
type answer struct {
	resp   *rlv3.RateLimitResponse
	err    error
	status int
}

// askJSON sends req to both services' POST /json at once, as ask does.
func (p *pair) askJSON(req *rlv3.RateLimitRequest) (envoy, sluice answer, t0, t1 time.Time) {
	body, err := protojson.Marshal(req)
	if err != nil {
		panic(err)
	}
	return p.both(func(s *service, a *answer) {
		c := http.Client{Timeout: 2 * time.Minute} // a hang detector, not a speed bound
		resp, err := c.Post("http://"+s.http+"/json", "application/json", bytes.NewReader(body))
		if err != nil {
			a.err = err
			return
		}
		defer resp.Body.Close()
		a.status = resp.StatusCode
		b, err := io.ReadAll(resp.Body)
		var r rlv3.RateLimitResponse
		if err == nil && protojson.Unmarshal(b, &r) == nil {
			a.resp = &r
		}
	})
}

// ask sends req to both services at once over gRPC.
func (p *pair) ask(req *rlv3.RateLimitRequest) (envoy, sluice answer, t0, t1 time.Time) {
	return p.both(func(s *service, a *answer) {
		// A hang detector, not a speed bound.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a.resp, a.err = s.client.ShouldRateLimit(ctx, req)
	})
}

// both calls call on both services at once and returns their answers,
// with the wall-clock times before the calls and after both answers.
func (p *pair) both(call func(*service, *answer)) (envoy, sluice answer, t0, t1 time.Time) {
	var wg sync.WaitGroup
	wg.Add(2)
	t0 = time.Now()
	go func() { defer wg.Done(); call(p.envoy, &envoy) }()
	go func() { defer wg.Done(); call(p.sluice, &sluice) }()
	wg.Wait()
	t1 = time.Now()
	return envoy, sluice, t0, t1
}

// freeAddr is 127.0.0.1 and a port free a moment ago (port 0, which
// the service refuses, if none could be found: it then starts again).
func freeAddr() string {
	p, _ := redistest.FreePort()
	return fmt.Sprintf("127.0.0.1:%d", p)
}
