package main

// Tests of `sluice serve` and `sluice import-envoy` as a user runs them:
// the binary is built once (TestMain) and started as a process, against a
// real redis-server (internal/redistest), on free ports of 127.0.0.1.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

var sluiceBin string

func TestMain(m *testing.M) {
	// No binary when no test runs: test.sh's FuzzParseEvent (-run '^$'),
	// and the fuzz workers it starts, which run only the fuzz target.
	flag.Parse()
	if flag.Lookup("test.run").Value.String() == "^$" || flag.Lookup("test.fuzzworker").Value.String() == "true" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", sluiceBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for a writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running `sluice serve`.
type proc struct {
	t          *testing.T
	cmd        *exec.Cmd
	http, grpc string // addresses from the banner
	admin      string
	stdout     *syncBuffer
	stderr     *syncBuffer
	exited     chan struct{}
}

var bannerHTTP = regexp.MustCompile(`HTTP/JSON\s+http://(\S+)`)
var bannerGRPC = regexp.MustCompile(`gRPC\s+(\S+)`)
var bannerAdmin = regexp.MustCompile(`admin\s+http://(\S+)`)

// serve starts `sluice serve args...` with env added to the environment
// and waits for its banner. It is killed when the test ends if still
// running.
func serve(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(sluiceBin, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return serveCmd(t, cmd)
}

// serveCmd starts cmd, a `sluice serve`, and waits for its banner.
func serveCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("sluice serve stderr:\n%s", p.stderr.String())
		}
	})
	lines := make(chan string, 100)
	go func() {
		// stdout gets each chunk as it is read, before its lines are
		// scanned: the banner is one write, so when its policy line is
		// seen, the whole banner (its try-it lines too) is in p.stdout.
		sc := bufio.NewScanner(io.TeeReader(out, p.stdout))
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		cmd.Wait()
		close(p.exited)
	}()
	deadline := time.After(waitLimit)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("sluice serve exited before serving: %v\nstderr:\n%s", cmd.ProcessState, p.stderr.String())
			}
			if m := bannerHTTP.FindStringSubmatch(l); m != nil {
				p.http = m[1]
			}
			if m := bannerGRPC.FindStringSubmatch(l); m != nil {
				p.grpc = m[1]
			}
			if m := bannerAdmin.FindStringSubmatch(l); m != nil {
				p.admin = m[1]
			}
			if strings.HasPrefix(l, "  policy") {
				return p
			}
		case <-deadline:
			t.Fatalf("no banner within %v; stderr:\n%s", waitLimit, p.stderr.String())
		}
	}
}

// local are the flags that keep a test's server on free loopback ports,
// with a decision timeout generous enough for a loaded machine (the
// store-down test sets its own).
var local = []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--timeout", "5s"}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code. The
// bound, waitLimit, is a hang detector: no test asserts how soon.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(waitLimit):
		p.t.Fatalf("sluice serve did not exit within %v", waitLimit)
		return -1
	}
}

// waitLog waits until stderr contains s (within waitLimit, a hang
// detector).
func (p *proc) waitLog(s string) {
	p.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(p.stderr.String(), s) {
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q in the log within %v:\n%s", s, waitLimit, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) decision(t *testing.T) decisionJSON {
	t.Helper()
	var d decisionJSON
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decision body %s: %v", a.body, err)
	}
	return d
}

func (a answer) problem(t *testing.T) string {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json (%s)", ct, a.body)
	}
	var pr struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(a.body, &pr); err != nil || pr.Status != a.status || pr.Detail == "" {
		t.Errorf("problem body %s: %v", a.body, err)
	}
	return pr.Detail
}

func do(t *testing.T, method, url, token string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func (p *proc) check(body string) answer {
	p.t.Helper()
	return do(p.t, "POST", "http://"+p.http+"/v1/check", "", body)
}

func (p *proc) rls(t *testing.T) rlv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlv3.NewRateLimitServiceClient(cc)
}

func writeTestFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testPolicy uses limits that refill slowly, so that no window boundary
// or refill can change an answer during a test.
const testPolicy = `
unmatched: allow
schema:
  user:
    children:
      "*":
        limits: {algorithm: token_bucket, burst: 3, rate: 3, per: 24h}
        children:
          trade:
            limits: {algorithm: token_bucket, burst: 2, rate: 2, per: 24h}
  shared:
    limits: {algorithm: token_bucket, burst: 100, rate: 100, per: 24h}
  edge:
    children:
      remote_address:
        children:
          "*":
            limits: {algorithm: token_bucket, burst: 5, rate: 5, per: 24h}
      path:
        children:
          /a:
            limits: {algorithm: token_bucket, burst: 2, rate: 2, per: 24h}
`

func policyFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeTestFile(t, path, text)
	return path
}

func TestServeHTTPOnRedis(t *testing.T) {
	rd := redistest.Start(t)
	p := serve(t, nil, append(local, "--store", rd.URL(), "--policy", policyFile(t, testPolicy))...)

	for i := 1; i <= 3; i++ {
		a := p.check(`{"path": ["user", "alex", "trade"]}`)
		d := a.decision(t)
		switch i {
		case 1, 2:
			if a.status != 200 || !d.Allowed || d.Remaining != int64(2-i) || len(d.Levels) != 2 || !d.Matched {
				t.Fatalf("check %d: %d %s", i, a.status, a.body)
			}
			if a.header.Get("Retry-After") != "" {
				t.Errorf("check %d: Retry-After on an allowed check", i)
			}
		case 3:
			if a.status != 429 || d.Allowed || d.Remaining != 0 || d.RetryAfterNs <= 0 || d.Levels[1].Allowed || !d.Levels[0].Allowed {
				t.Fatalf("check 3: %d %s", a.status, a.body)
			}
			if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Errorf("check 3: Retry-After %q", ra)
			}
		}
		l := d.Levels[1]
		if l.Pattern != "user/*/trade" || l.Key != "user:alex:trade" || l.Spec.Algorithm != "token_bucket" || l.Spec.Burst != 2 {
			t.Errorf("level %+v", l)
		}
		pol, rl := a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit")
		if pol != `"user/*";q=3;w=86400, "user/*/trade";q=2;w=86400` {
			t.Errorf("RateLimit-Policy: %q", pol)
		}
		if !regexp.MustCompile(`^"user/\*";r=\d+;t=\d+, "user/\*/trade";r=\d+;t=\d+$`).MatchString(rl) {
			t.Errorf("RateLimit: %q", rl)
		}
		if ct := a.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	// The denied check consumed nothing on the user level.
	a := p.check(`{"path": ["user", "alex"], "cost": 0}`)
	if d := a.decision(t); a.status != 200 || d.Remaining != 1 {
		t.Errorf("peek: %d %s", a.status, a.body)
	}
	// A cost above the limit can never be admitted: -1, no Retry-After.
	a = p.check(`{"path": ["user", "bo"], "cost": 9}`)
	if d := a.decision(t); a.status != 429 || d.RetryAfterNs != -1 || a.header.Get("Retry-After") != "" {
		t.Errorf("cost 9: %d %v %s", a.status, a.header, a.body)
	}
	// Unmatched paths are allowed, with no levels.
	a = p.check(`{"path": ["nothing", "here"]}`)
	if d := a.decision(t); a.status != 200 || d.Matched || len(d.Levels) != 0 || !strings.Contains(string(a.body), `"levels":[]`) {
		t.Errorf("unmatched: %d %s", a.status, a.body)
	}
	// The state is in Redis, under the prefix.
	if v, err := rd.Do("EXISTS", "sluice:{user:alex}:trade"); err != nil || v != "1" {
		t.Errorf("EXISTS sluice:{user:alex}:trade = %q, %v", v, err)
	}
	// Health and metrics.
	if a := do(t, "GET", "http://"+p.http+"/healthz", "", ""); a.status != 200 {
		t.Errorf("healthz %d", a.status)
	}
	if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 {
		t.Errorf("readyz %d %s", a.status, a.body)
	}
	m := string(do(t, "GET", "http://"+p.http+"/metrics", "", "").body)
	for _, want := range []string{
		`sluice_checks_total{api="http",outcome="allowed"} 4`,
		`sluice_checks_total{api="http",outcome="limited"} 2`,
		`sluice_decisions_total{node="user/*/trade",outcome="limited"} 1`,
		`sluice_decisions_total{node="user/*",outcome="allowed"}`,
		`sluice_check_duration_seconds_count{api="http"} 6`,
		`sluice_store_errors_total 0`,
		`sluice_policy_reloads_total{result="success"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestServeMalformedRequests(t *testing.T) {
	p := serve(t, nil, local...)
	cases := []struct {
		body, want string
		status     int // 400 when 0
	}{
		{`{"path": ["user", "alex"`, "malformed JSON", 0},
		{`{"path": ["user"], "colour": "red"}`, `unknown field "colour"`, 0},
		{`{"path": []}`, `"path" is missing or empty`, 0},
		{`{"cost": 1}`, `"path" is missing or empty`, 0},
		{`{"path": ["user"], "cost": -3}`, `"cost" must not be negative, got -3`, 0},
		{`{"path": ["user"], "cost": "1"}`, `"cost" must be an integer`, 0},
		{strings.Repeat(" ", 64<<10+1), "too large", 413},
		{`{"path": ["user", "` + strings.Repeat("x", 600) + `"]}`, "exceeds 512", 0},
		{`{"path": ["user", "a\u0000b"]}`, "control character", 0},
		{`{"path": ["user"], "cost": 99999999999999999999}`, `"cost" must be an integer`, 0},
		{`{"path": ["user"], "meta": ` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}`, "meta", 0},
	}
	for _, c := range cases {
		a := p.check(c.body)
		if want := max(c.status, 400); a.status != want {
			t.Errorf("%.40q: status %d %s", c.body, a.status, a.body)
			continue
		}
		if d := a.problem(t); !strings.Contains(d, c.want) {
			t.Errorf("%.40q: detail %q, want %q", c.body, d, c.want)
		}
	}
	if a := do(t, "GET", "http://"+p.http+"/v1/check", "", ""); a.status != 405 {
		t.Errorf("GET /v1/check: %d", a.status)
	}
	m := string(do(t, "GET", "http://"+p.http+"/metrics", "", "").body)
	if !strings.Contains(m, fmt.Sprintf(`sluice_bad_requests_total{api="http"} %d`, len(cases))) {
		t.Errorf("bad requests not counted:\n%s", m)
	}
}

func TestServeGRPCOnRedis(t *testing.T) {
	rd := redistest.Start(t)
	p := serve(t, nil, append(local, "--store", rd.URL(), "--policy", policyFile(t, testPolicy))...)
	c := p.rls(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	d := func(kv ...string) *rlcommon.RateLimitDescriptor {
		out := &rlcommon.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			out.Entries = append(out.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	call := func(hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		r, err := c.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ip, pathA, other := d("remote_address", "10.1.2.3"), d("path", "/a"), d("path", "/elsewhere")

	// Three descriptors, request hits_addend 1.
	r := call(1, ip, pathA, other)
	if r.OverallCode != rlv3.RateLimitResponse_OK || len(r.Statuses) != 3 {
		t.Fatalf("first: %v", r)
	}
	if s := r.Statuses[0]; s.LimitRemaining != 4 || s.CurrentLimit.GetRequestsPerUnit() != 5 || s.CurrentLimit.GetUnit() != rlv3.RateLimitResponse_RateLimit_DAY ||
		s.CurrentLimit.GetName() != "edge/remote_address/*" || s.DurationUntilReset.AsDuration() <= 0 {
		t.Errorf("ip status %v", s)
	}
	if s := r.Statuses[1]; s.LimitRemaining != 1 {
		t.Errorf("/a status %v", s)
	}
	if s := r.Statuses[2]; s.Code != rlv3.RateLimitResponse_OK || s.CurrentLimit != nil {
		t.Errorf("unconfigured path status %v", s)
	}
	var headers []string
	for _, h := range r.ResponseHeadersToAdd {
		headers = append(headers, h.Key+": "+h.Value)
	}
	if strings.Join(headers, "\n") != "RateLimit-Policy: \"edge/remote_address/*\";q=5;w=86400, \"edge/path//a\";q=2;w=86400\n"+
		"RateLimit: \"edge/remote_address/*\";r=4;t=17280, \"edge/path//a\";r=1;t=43200" {
		t.Errorf("headers:\n%s", strings.Join(headers, "\n"))
	}
	// Per-descriptor hits_addend: 0 checks only; 2 on /a is over.
	peek := d("remote_address", "10.1.2.3")
	peek.HitsAddend = wrapperspb.UInt64(0)
	two := d("path", "/a")
	two.HitsAddend = wrapperspb.UInt64(2)
	r = call(1, peek, two)
	if r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlv3.RateLimitResponse_OK ||
		r.Statuses[1].Code != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("hits_addend: %v", r)
	}
	// Request-level hits_addend 3 on the address: 4 - 3 = 1 left.
	r = call(3, ip)
	if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits 3: %v", r)
	}
	r = call(2, ip)
	if r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits 2 over 1 left: %v", r)
	}
	// gRPC health.
	cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, h, err)
		}
	}
	// An empty domain is refused.
	if _, err := c.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{ip}}); err == nil {
		t.Error("empty domain accepted")
	}
}

func TestServeAdmin(t *testing.T) {
	rd := redistest.Start(t)
	pol := policyFile(t, testPolicy)

	// Without a token the admin API does not exist.
	p := serve(t, nil, append(local, "--store", rd.URL(), "--policy", pol)...)
	if a := do(t, "GET", "http://"+p.http+"/admin/v1/state?path=shared", "", ""); a.status != 404 || strings.Contains(string(a.body), "admin") {
		t.Errorf("admin without a configured token: %d %s (want a 404 that does not describe the admin API)", a.status, a.body)
	}
	p.signal(syscall.SIGTERM)
	p.wait()

	const token = "t0ken-for-tests"
	p = serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, append(local, "--store", rd.URL(), "--policy", pol)...)
	base := "http://" + p.http + "/admin/v1/"
	for _, tok := range []string{"", "wrong", token + "x"} {
		a := do(t, "GET", base+"state?path=shared", tok, "")
		if a.status != 401 || a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("token %q: %d %s", tok, a.status, a.body)
		}
		a.problem(t)
	}
	// Three callers consume the shared key, with meta; one peeks.
	for i, who := range []string{"ann", "bob", "cy"} {
		a := p.check(fmt.Sprintf(`{"path": ["shared"], "cost": %d, "meta": {"user_id": %q}}`, i+1, who))
		if a.status != 200 {
			t.Fatalf("check: %d %s", a.status, a.body)
		}
	}
	p.check(`{"path": ["shared"], "cost": 0, "meta": {"user_id": "peeker"}}`)

	a := do(t, "GET", base+"state?path=shared", token, "")
	if d := a.decision(t); a.status != 200 || len(d.Levels) != 1 || d.Levels[0].Remaining != 94 {
		t.Fatalf("state: %d %s", a.status, a.body)
	}
	var cons struct { // GET /admin/v1/consumers
		Levels []struct {
			Consumers []struct {
				Cost int64           `json:"cost"`
				Meta json.RawMessage `json:"meta"`
			} `json:"consumers"`
		} `json:"levels"`
	}
	deadline := time.Now().Add(waitLimit)
	for {
		a = do(t, "GET", base+"consumers?path=shared", token, "")
		if err := json.Unmarshal(a.body, &cons); err != nil || a.status != 200 {
			t.Fatalf("consumers: %d %s", a.status, a.body)
		}
		if len(cons.Levels) == 1 && len(cons.Levels[0].Consumers) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the list is written in the background
	}
	var who []string
	for _, c := range cons.Levels[0].Consumers {
		var m struct {
			UserID string `json:"user_id"`
		}
		json.Unmarshal(c.Meta, &m)
		who = append(who, fmt.Sprintf("%s:%d", m.UserID, c.Cost))
	}
	if strings.Join(who, " ") != "cy:3 bob:2 ann:1" {
		t.Errorf("consumers newest first: %v (%s)", who, a.body)
	}
	if ttl, err := rd.Do("PTTL", "sluice:{shared}#consumers"); err != nil || ttl == "-1" || ttl == "-2" {
		t.Errorf("consumers list PTTL %q %v", ttl, err)
	}
	// Reset: a level every caller shares only with levels=all.
	a = do(t, "DELETE", base+"state?path=shared", token, "")
	if a.status != 200 || strings.Contains(string(a.body), `"shared"`) {
		t.Fatalf("reset without levels=all reset the shared level: %d %s", a.status, a.body)
	}
	if d := do(t, "GET", base+"state?path=shared", token, "").decision(t); d.Levels[0].Remaining != 94 {
		t.Fatalf("after a reset of the caller's levels the shared one changed: %+v", d.Levels[0])
	}
	a = do(t, "DELETE", base+"state?path=shared&levels=all", token, "")
	if a.status != 200 || !strings.Contains(string(a.body), `"shared"`) {
		t.Fatalf("reset: %d %s", a.status, a.body)
	}
	if v, _ := rd.Do("EXISTS", "sluice:{shared}#consumers"); v != "0" {
		t.Errorf("the reset left the consumers list")
	}
	if a := do(t, "POST", base+"state?path=shared", token, ""); a.status != 405 || a.header.Get("Allow") != "GET, DELETE" {
		t.Errorf("POST on state: %d %v", a.status, a.header)
	}
	a = do(t, "GET", base+"state?path=shared", token, "")
	if d := a.decision(t); d.Levels[0].Remaining != 100 {
		t.Errorf("after reset: %s", a.body)
	}
	if a := do(t, "GET", base+"state", token, ""); a.status != 400 {
		t.Errorf("state without path: %d", a.status)
	}
}

func TestServeReload(t *testing.T) {
	pol := policyFile(t, testPolicy)
	p := serve(t, nil, append(local, "--policy", pol, "--watch-interval", "50ms")...)
	if d := p.check(`{"path": ["shared"]}`).decision(t); d.Quota != 100 {
		t.Fatalf("before: %+v", d)
	}
	// A good change is picked up by the watcher.
	writeTestFile(t, pol, strings.Replace(testPolicy, "burst: 100, rate: 100", "burst: 7, rate: 7", 1))
	p.waitLog("policy reloaded")
	if d := p.check(`{"path": ["shared"]}`).decision(t); d.Quota != 7 {
		t.Fatalf("after a good change: %+v", d)
	}
	// A bad file is logged with its positions and the old policy stays.
	writeTestFile(t, pol, "schema:\n  shared:\n    limits: {algorithm: gcra, burst: -1, count: 1, period: 1s}\n  x:\n    bogus: 1\n")
	p.waitLog("policy reload failed")
	p.waitLog("limits.yaml:5:5")
	p.waitLog("limits.yaml:3:")
	if d := p.check(`{"path": ["shared"]}`).decision(t); d.Quota != 7 {
		t.Fatalf("after a bad change: %+v", d)
	}
	// SIGHUP reloads too (here the same bad file: a second failure).
	p.signal(syscall.SIGHUP)
	deadline := time.Now().Add(waitLimit)
	for {
		m := string(do(t, "GET", "http://"+p.http+"/metrics", "", "").body)
		if strings.Contains(m, `sluice_policy_reloads_total{result="failure"} 2`) {
			if !strings.Contains(m, `sluice_policy_reloads_total{result="success"} 1`) {
				t.Errorf("reload metrics:\n%s", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And a fixed file, with SIGHUP only.
	writeTestFile(t, pol, testPolicy)
	p.signal(syscall.SIGHUP)
	deadline = time.Now().Add(10 * time.Second)
	for p.check(`{"path": ["shared"]}`).decision(t).Quota != 100 {
		if time.Now().After(deadline) {
			t.Fatal("the fixed file was not reloaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeSIGTERMDrains(t *testing.T) {
	rd := redistest.Start(t)
	// A check's timeout far beyond what the test takes to send SIGTERM and
	// see the listener closed on a busy machine: the check in flight then
	// waits for the store, not for its timeout.
	p := serve(t, nil, append(local, "--store", rd.URL(), "--policy", policyFile(t, testPolicy), "--timeout", "2m")...)
	if a := p.check(`{"path": ["shared"]}`); a.status != 200 {
		t.Fatalf("warm-up: %d", a.status)
	}
	// Stall Redis so that a check is in flight when SIGTERM arrives.
	resume := rd.Pause(t)
	done := make(chan answer, 1)
	// The check's connection's client end, once the check is written to
	// it. (Not httptrace's WroteRequest: Go's transport calls it before it
	// flushes the request to the connection, so that SIGTERM could come
	// before the check was sent, and the check meet a closed listener: how
	// this test once saw EOF.)
	wrote := make(chan string, 1)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &writtenConn{Conn: c, wrote: wrote}, nil
	}
	go func() {
		req, _ := http.NewRequest("POST", "http://"+p.http+"/v1/check", strings.NewReader(`{"path": ["shared"]}`))
		resp, err := (&http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{DialContext: dial}}).Do(req)
		if err != nil {
			done <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{status: resp.StatusCode, body: b}
	}()
	// SIGTERM once the server has read the check: the drain serves what
	// has arrived (server's TestDrainServesWhatArrived: net/http's Shutdown
	// alone dropped a check read but not yet parsed), so its handler runs
	// to the stalled store, and the drain must wait for it.
	var local string
	select {
	case local = <-wrote:
	case a := <-done:
		t.Fatalf("the check ended before it was written: %d %s", a.status, a.body)
	}
	readBy(t, local, p.http)
	p.signal(syscall.SIGTERM)
	p.waitLog("shutting down")
	// New connections are refused while the in-flight check drains.
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := net.DialTimeout("tcp", p.http, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener is still open after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case a := <-done:
		t.Fatalf("the in-flight check ended before the store came back: %d %s", a.status, a.body)
	default:
	}
	resume()
	select {
	case a := <-done:
		if a.status != 200 || !strings.Contains(string(a.body), `"allowed":true`) || strings.Contains(string(a.body), "store_error") {
			t.Errorf("in-flight check: %d %s", a.status, a.body)
		}
	case <-time.After(waitLimit):
		t.Fatal("the in-flight check did not finish")
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	p.waitLog("stopped")
}

// writtenConn sends its local address on wrote once a write to it has
// returned: the bytes are in the kernel, on their way to the server.
type writtenConn struct {
	net.Conn
	once  sync.Once
	wrote chan<- string
}

func (c *writtenConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.once.Do(func() { c.wrote <- c.LocalAddr().String() })
	return n, err
}

// readBy waits until the server at addr has read all that the client at
// local sent on their connection: the client's send queue is empty (the
// bytes reached the server's socket) and so is the server's receive queue,
// as /proc/net/tcp counts them.
func readBy(t *testing.T, local, addr string) {
	t.Helper()
	port := func(a string) string {
		_, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		return fmt.Sprintf(":%04X", n)
	}
	client, server := port(local), port(addr)
	queues := func() (sent, unread string, ok bool) {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			q := strings.Split(f[4], ":") // tx_queue:rx_queue
			switch {
			case strings.HasSuffix(f[1], client) && strings.HasSuffix(f[2], server):
				sent, found = q[0], found+1
			case strings.HasSuffix(f[1], server) && strings.HasSuffix(f[2], client):
				unread, found = q[1], found+1
			}
		}
		return sent, unread, found == 2
	}
	deadline := time.Now().Add(waitLimit)
	for {
		sent, unread, ok := queues()
		if ok && strings.Trim(sent, "0") == "" && strings.Trim(unread, "0") == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not read the request (send queue %s, receive queue %s)", sent, unread)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeStoreDown(t *testing.T) {
	for _, mode := range []string{"allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			rd := redistest.Start(t)
			p := serve(t, []string{"SLUICE_ON_STORE_ERROR=" + mode},
				append(local, "--timeout", "50ms", "--store", rd.URL(), "--policy", policyFile(t, testPolicy))...)
			p.check(`{"path": ["shared"]}`) // warm up
			c := p.rls(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			grpcReq := &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/a"}}}}}
			wantStatus, wantAllowed, wantCode := 200, true, rlv3.RateLimitResponse_OK
			if mode == "deny" { // fail closed: 503, as httplimit's FailClosed
				wantStatus, wantAllowed, wantCode = 503, false, rlv3.RateLimitResponse_OVER_LIMIT
			}
			// Stalled (SIGSTOP), then dead (SIGKILL): both answer by the
			// store-error policy, while Redis cannot answer.
			for _, how := range []string{"stalled", "down"} {
				if how == "stalled" {
					rd.Pause(t)
				} else {
					rd.Stop()
				}
				for i := 0; i < 3; i++ {
					a := p.check(`{"path": ["shared"]}`)
					d := a.decision(t)
					if a.status != wantStatus || d.Allowed != wantAllowed || !strings.Contains(d.StoreError, "store unavailable") {
						t.Errorf("%s http: %d %s", how, a.status, a.body)
					}
					if ra := a.header.Get("Retry-After"); mode == "deny" && ra != "1" {
						t.Errorf("%s http: 503 with Retry-After %q, want 1", how, ra)
					}
					r, err := c.ShouldRateLimit(ctx, grpcReq)
					if err != nil || r.OverallCode != wantCode {
						t.Errorf("%s grpc: %v %v", how, r, err)
					}
				}
			}
			if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 || !strings.Contains(string(a.body), "store degraded") {
				t.Errorf("readyz with the store down: %d %s, want 200 and the store degraded", a.status, a.body)
			}
			m := string(do(t, "GET", "http://"+p.http+"/metrics", "", "").body)
			outcome := map[string]string{"allow": "store_error_allowed", "deny": "store_error_denied"}[mode]
			if metric(m, `sluice_checks_total{api="http",outcome="`+outcome+`"}`) < 6 ||
				metric(m, `sluice_checks_total{api="grpc",outcome="`+outcome+`"}`) < 6 || metric(m, "sluice_store_errors_total") < 12 {
				t.Errorf("metrics:\n%s", grep(m, "sluice_"))
			}
		})
	}
}

// metric returns the value of a metric line, -1 when missing.
func metric(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestServeDefaultsAndConfig(t *testing.T) {
	// With no flags at all: the memory store, the bundled example, on
	// 127.0.0.1:8080 and :8081, when those ports are free here.
	free := true
	const httpAddr, grpcAddr = "127.0.0.1:8080", "127.0.0.1:8081" // README's and sluice.example.yaml's
	for _, a := range []string{httpAddr, grpcAddr} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			free = false
			break
		}
		l.Close()
	}
	if free {
		p := serve(t, nil)
		if p.http != httpAddr || p.grpc != grpcAddr {
			t.Errorf("default addresses %q %q", p.http, p.grpc)
		}
		out := p.stdout.String()
		if !strings.Contains(out, "store      memory") || !strings.Contains(out, "bundled example") || !strings.Contains(out, "curl") {
			t.Errorf("banner:\n%s", out)
		}
		// The README's try-it: 3 allowed, the 4th denied.
		for i := 1; i <= 4; i++ {
			a := p.check(`{"path": ["user", "alex", "trade"]}`)
			if want := map[bool]int{true: 429, false: 200}[i == 4]; a.status != want {
				t.Errorf("try-it %d: %d %s", i, a.status, a.body)
			}
		}
		p.signal(syscall.SIGINT)
		if code := p.wait(); code != 0 {
			t.Errorf("exit %d after SIGINT", code)
		}
	} else {
		t.Log("ports 8080/8081 are taken here: skipping the no-flags run")
	}

	// A config file, overridden by the environment, overridden by flags.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeTestFile(t, cfg, fmt.Sprintf("http: 127.0.0.1:0\ngrpc: off\npolicy: %s\ntimeout: 20ms\nadmin_token: from-file\nlog_format: json\n", policyFile(t, testPolicy)))
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=from-env", "SLUICE_LOG_FORMAT=text"}, "--config", cfg, "--log-format", "json")
	if p.grpc != "" {
		t.Errorf("grpc: off still listens on %q", p.grpc)
	}
	if a := do(t, "GET", "http://"+p.http+"/admin/v1/state?path=shared", "from-env", ""); a.status != 200 {
		t.Errorf("the env token does not override the file's: %d", a.status)
	}
	if a := do(t, "GET", "http://"+p.http+"/admin/v1/state?path=shared", "from-file", ""); a.status != 401 {
		t.Errorf("the file's token still works: %d", a.status)
	}
	p.waitLog(`"msg":"listening"`)
	p.waitLog(`"timeout":"20ms"`)

	// Bad settings are refused before serving.
	for _, args := range [][]string{
		{"--on-store-error", "maybe"},
		{"--timeout", "soon"},
		{"--store", "mysql://x"},
		{"--policy", filepath.Join(dir, "missing.yaml")},
		{"--config", filepath.Join(dir, "missing.yaml")},
	} {
		out, err := exec.Command(sluiceBin, append(append([]string{"serve"}, local...), args...)...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: accepted\n%s", args, out)
		}
	}
}

func TestImportEnvoyCommand(t *testing.T) {
	dir := t.TempDir()
	envoy := filepath.Join(dir, "envoy.yaml")
	writeTestFile(t, envoy, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /a
    rate_limit: {unit: hour, requests_per_unit: 1, name: a, replaces: [{name: b}]}
`)
	cmd := exec.Command(sluiceBin, "import-envoy", envoy)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
	// -o writes the same policy, atomically.
	limits := filepath.Join(dir, "limits.yaml")
	if out, err := exec.Command(sluiceBin, "import-envoy", "-o", limits, envoy).CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("-o: %v %s", err, out)
	}
	if got, _ := os.ReadFile(limits); string(got) != stdout.String() {
		t.Fatalf("-o wrote %q, stdout had %q", got, stdout.String())
	}

	// Serve it and ask through gRPC as Envoy would.
	p := serve(t, nil, append(local, "--policy", limits)...)
	c := p.rls(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req := &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/a"}}}}}
	var codes []string
	for i := 0; i < 2; i++ {
		r, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.OverallCode.String())
		if cl := r.Statuses[0].CurrentLimit; cl.GetRequestsPerUnit() != 1 || cl.GetUnit() != rlv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("current limit %v", cl)
		}
	}
	if strings.Join(codes, " ") != "OK OVER_LIMIT" {
		t.Errorf("codes %v", codes)
	}

	// A failed import writes nothing: -o leaves the old file as it was.
	bad := filepath.Join(dir, "bad.yaml")
	writeTestFile(t, bad, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	out, err := exec.Command(sluiceBin, "import-envoy", "-o", limits, bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:4:") || !strings.Contains(string(out), "fortnight") {
		t.Errorf("bad file: %v %s", err, out)
	}
	if got, _ := os.ReadFile(limits); string(got) != stdout.String() {
		t.Errorf("a failed import changed %s", limits)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("a failed import left files behind: %v", entries)
	}
}

func TestServeRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const token = "cluster-token"
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, append(local, "--store", cl.URL(), "--policy", policyFile(t, testPolicy))...)
	// Users' keys lie in several slots; each check's levels share one.
	for _, user := range []string{"alex", "bo", "cy", "dee"} {
		for i := 1; i <= 3; i++ {
			a := p.check(fmt.Sprintf(`{"path": ["user", %q, "trade"], "meta": {"n": %d}}`, user, i))
			if want := map[bool]int{true: 429, false: 200}[i == 3]; a.status != want {
				t.Fatalf("%s check %d: %d %s", user, i, a.status, a.body)
			}
		}
	}
	// gRPC: descriptors in different slots, all or nothing across them.
	c := p.rls(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req := &rlv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.9.9.9"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/a"}}},
	}}
	r, err := c.ShouldRateLimit(ctx, req)
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 3 || r.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("first: %v %v", r, err)
	}
	r, err = c.ShouldRateLimit(ctx, req)
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("second (refunded across slots): %v %v", r, err)
	}
	// Admin across slots.
	base := "http://" + p.http + "/admin/v1/"
	deadline := time.Now().Add(waitLimit)
	for {
		a := do(t, "GET", base+"consumers?path=user&path=bo&path=trade", token, "")
		if strings.Count(string(a.body), `"n"`) == 4 { // 2 admitted checks, on 2 levels
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers: %d %s", a.status, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := do(t, "DELETE", base+"state?path=user&path=bo&path=trade", token, ""); a.status != 200 {
		t.Fatalf("reset: %d %s", a.status, a.body)
	}
	if a := p.check(`{"path": ["user", "bo", "trade"]}`); a.status != 200 {
		t.Errorf("after reset: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 {
		t.Errorf("readyz: %d %s", a.status, a.body)
	}
}

// TestServeRedisTLSAndAuth serves on Redis over TLS (a CA of the test's
// own, given with --redis-tls-ca) with a password from the environment.
func TestServeRedisTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "sluice test CA")
	srv, srvKey := newCert(t, ca, caKey, "127.0.0.1")
	writeTestFile(t, filepath.Join(dir, "ca.pem"), pemBlock("CERTIFICATE", ca.Raw))
	writeTestFile(t, filepath.Join(dir, "redis.pem"), pemBlock("CERTIFICATE", srv.Raw))
	writeTestFile(t, filepath.Join(dir, "redis.key"), pemBlock("EC PRIVATE KEY", marshalKey(t, srvKey)))
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rd := redistest.Start(t, "--tls-port", fmt.Sprint(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "redis.pem"), "--tls-key-file", filepath.Join(dir, "redis.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no")
	if _, err := rd.Do("CONFIG", "SET", "requirepass", "s3cret-pass"); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("rediss://127.0.0.1:%d/0", tlsPort)

	p := serve(t, []string{"SLUICE_REDIS_PASSWORD=s3cret-pass"}, append(local, "--store", url,
		"--redis-tls-ca", filepath.Join(dir, "ca.pem"), "--policy", policyFile(t, testPolicy))...)
	for i := 1; i <= 3; i++ {
		a := p.check(`{"path": ["user", "tls", "trade"]}`)
		if want := map[bool]int{true: 429, false: 200}[i == 3]; a.status != want || strings.Contains(string(a.body), "store_error") {
			t.Fatalf("check %d: %d %s", i, a.status, a.body)
		}
	}
	// A wrong password, or no CA, does not connect: refused at start.
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"SLUICE_REDIS_PASSWORD=wrong"}, []string{"--redis-tls-ca", filepath.Join(dir, "ca.pem")}},
		{[]string{"SLUICE_REDIS_PASSWORD=s3cret-pass"}, nil},
	} {
		cmd := exec.Command(sluiceBin, append(append([]string{"serve", "--store", url}, local...), c.args...)...)
		cmd.Env = append(os.Environ(), c.env...)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "store") {
			t.Errorf("%v %v: %v\n%s", c.env, c.args, err, out)
		}
	}
}

func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP(name)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pemBlock(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// TestServeRedisSentinel reaches the master through a Sentinel, by the
// store URL's master_set.
func TestServeRedisSentinel(t *testing.T) {
	master := redistest.Start(t)
	dir := t.TempDir()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	host, mport, _ := net.SplitHostPort(master.Addr)
	conf := filepath.Join(dir, "sentinel.conf")
	writeTestFile(t, conf, fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nsentinel monitor mymaster %s %s 1\n", port, dir, host, mport))
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Wait until the sentinel knows the master.
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			fmt.Fprintf(c, "*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$8\r\nmymaster\r\n")
			c.SetReadDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 256)
			n, _ := c.Read(buf)
			c.Close()
			if strings.Contains(string(buf[:n]), mport) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not know the master: %v\n%s", addr, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := serve(t, nil, append(local, "--store", "redis://"+addr+"?master_set=mymaster", "--policy", policyFile(t, testPolicy))...)
	for i := 1; i <= 3; i++ {
		a := p.check(`{"path": ["user", "sentinel", "trade"]}`)
		if want := map[bool]int{true: 429, false: 200}[i == 3]; a.status != want || strings.Contains(string(a.body), "store_error") {
			t.Fatalf("check %d: %d %s", i, a.status, a.body)
		}
	}
	if v, err := master.Do("EXISTS", "sluice:{user:sentinel}:trade"); err != nil || v != "1" {
		t.Errorf("the state is not on the master: %q %v", v, err)
	}
}

func TestExampleConfig(t *testing.T) {
	var c server.Config
	if err := server.LoadConfigFile("sluice.example.yaml", &c); err != nil {
		t.Fatal(err)
	}
	c = c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Store != "redis://127.0.0.1:6379/0" || c.Timeout != 50*time.Millisecond || c.Consumers.Max != 20 || c.LogFormat != "json" {
		t.Errorf("%+v", c)
	}
	// It starts as it is, but for its Redis and ports (a test may not
	// take 6379, 8080 and 8081), and serves its policy.
	rd := redistest.Start(t)
	p := serve(t, nil, "--config", "sluice.example.yaml", "--store", rd.URL(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 {
		t.Fatalf("readyz: %d %s", a.status, a.body)
	}
	if a := p.check(`{"path": ["user", "alex", "trade"]}`); a.status != 200 || !a.decision(t).Matched {
		t.Errorf("a check on the example policy: %d %s", a.status, a.body)
	}
	// Its forward-auth routes: a proxied POST /trade is the user's trade.
	req, _ := http.NewRequest("GET", "http://"+p.http+"/v1/forward-auth", nil)
	req.Header.Set("X-Forwarded-Method", "POST")
	req.Header.Set("X-Forwarded-Uri", "/trade")
	req.Header.Set("X-User", "alex")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit"), "user/*/trade") {
		t.Errorf("forward-auth of the example: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Its queue admits, and `sluice queue stats` sees the entry in Redis.
	if a := do(t, "POST", "http://"+p.http+"/v1/queues/jobs", "", `{"job": "resize"}`); a.status != 201 {
		t.Errorf("POST /v1/queues/jobs: %d %s", a.status, a.body)
	}
	out, err := exec.Command(sluiceBin, "queue", "stats", "--store", rd.URL(), "jobs").Output()
	if err != nil || !strings.Contains(string(out), `"length":1,`) {
		t.Errorf("queue stats: %s %v", out, err)
	}
}

// TestExampleConfigShowsEveryField: sluice.example.yaml, which
// docs/service.md says shows every field of a sluice.yaml, names every
// field of server.Config and of the sections under it (some commented).
func TestExampleConfigShowsEveryField(t *testing.T) {
	example, err := os.ReadFile("sluice.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string) []string
	walk = func(typ reflect.Type, path string) (fields []string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return nil
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields = append(fields, path+name)
			fields = append(fields, walk(f.Type, path+name+".")...)
		}
		return fields
	}
	fields := walk(reflect.TypeFor[server.Config](), "")
	if len(fields) < 30 {
		t.Fatalf("found only %d fields in server.Config: %v", len(fields), fields)
	}
	for _, f := range fields {
		name := f[strings.LastIndex(f, ".")+1:]
		if !regexp.MustCompile(`(^|[\s{(,#\[-])` + name + `:`).Match(example) {
			t.Errorf("sluice.example.yaml does not show %s", f)
		}
	}
}

// TestServeStartsWithRedisDown: started while Redis is unreachable, the
// service says so in its banner, serves by on_store_error, is ready (it
// answers) with the store degraded, and connects when Redis comes up.
func TestServeStartsWithRedisDown(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := serve(t, nil, append(local, "--store", fmt.Sprintf("redis://127.0.0.1:%d/0", port), "--on-store-error", "deny",
		"--policy", policyFile(t, testPolicy))...)
	p.waitLog("store unreachable")
	if out := p.stdout.String(); !strings.Contains(out, "the store is UNREACHABLE") || !strings.Contains(out, "every check is DENIED with 503") {
		t.Errorf("the banner does not say the store is unreachable and what is answered:\n%s", out)
	}
	a := p.check(`{"path": ["shared"]}`)
	if d := a.decision(t); a.status != 503 || !strings.Contains(d.StoreError, "not connected") {
		t.Fatalf("before Redis: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", "http://"+p.http+"/metrics", "", ""); !strings.Contains(string(a.body), "\nsluice_store_up 0\n") {
		t.Errorf("metrics before Redis lack sluice_store_up 0")
	}
	if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 || !strings.Contains(string(a.body), "store degraded") {
		t.Errorf("readyz before Redis: %d %s", a.status, a.body)
	}

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	rd := exec.Command(bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	rd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := rd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rd.Process.Kill()
		rd.Wait()
	})
	p.waitLog("store connected")
	if a := p.check(`{"path": ["shared"]}`); a.status != 200 || strings.Contains(string(a.body), "store_error") {
		t.Errorf("after Redis came up: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", "http://"+p.http+"/readyz", "", ""); a.status != 200 || string(a.body) != "ready\n" {
		t.Errorf("readyz after Redis came up: %d %s", a.status, a.body)
	}
}

// TestServeRequireStore: with --require-store (or its variable) and no
// store to reach, serve exits 1 with a one-line reason, and serves
// nothing.
func TestServeRequireStore(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	for _, how := range [][]string{{"--require-store=true"}, {"--require-store"}, {"SLUICE_REQUIRE_STORE=true"}} {
		cmd := exec.Command(sluiceBin, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "off", "--store", url}, how[0])...)
		if strings.HasPrefix(how[0], "SLUICE_") {
			cmd = exec.Command(sluiceBin, "serve", "--http", "127.0.0.1:0", "--grpc", "off", "--store", url)
			cmd.Env = append(os.Environ(), how[0])
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s: %v, want exit status 1", how[0], err)
		}
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "cannot be reached and require_store is set") || !strings.Contains(lines[0], "connection refused") {
			t.Errorf("%s: stderr %q, want one line with the reason", how[0], stderr.String())
		}
		if stdout.Len() > 0 {
			t.Errorf("%s: printed %q, serving nothing", how[0], stdout.String())
		}
	}
}

// TestServeReadyThroughARedisOutage: Redis killed under a running service
// with on_store_error: allow, then started again on its port: /readyz stays
// 200 throughout, saying the store is degraded (so does sluice_store_up,
// and the log), and says ready again once Redis is back; the checks
// meanwhile are answered by on_store_error.
func TestServeReadyThroughARedisOutage(t *testing.T) {
	rd := redistest.Start(t)
	port, _ := strconv.Atoi(rd.Addr[strings.LastIndexByte(rd.Addr, ':')+1:])
	// local's timeout (5s): a killed Redis refuses at once, and a live
	// one on a busy machine may take more than 50ms to answer /readyz's ping.
	p := serve(t, []string{"SLUICE_ON_STORE_ERROR=allow"}, append(local, "--store", rd.URL(), "--policy", policyFile(t, testPolicy))...)
	ready := func() string {
		a := do(t, "GET", "http://"+p.http+"/readyz", "", "")
		if a.status != 200 {
			t.Fatalf("readyz: %d %s, want 200 whatever the store does", a.status, a.body)
		}
		return string(a.body)
	}
	if got := ready(); got != "ready\n" {
		t.Fatalf("readyz with Redis up: %q", got)
	}
	rd.Stop()
	if got := ready(); !strings.Contains(got, "store degraded") || !strings.Contains(got, "every check is allowed") {
		t.Errorf("readyz with Redis down: %q", got)
	}
	p.waitLog("store degraded")
	if a := do(t, "GET", "http://"+p.http+"/metrics", "", ""); !strings.Contains(string(a.body), "\nsluice_store_up 0\n") {
		t.Errorf("metrics with Redis down lack sluice_store_up 0")
	}
	if a := p.check(`{"path": ["shared"]}`); a.status != 200 || !strings.Contains(string(a.body), "store unavailable") {
		t.Errorf("a check with Redis down: %d %s, want 200 by on_store_error", a.status, a.body)
	}
	redistest.StartOn(t, port)
	for ready() != "ready\n" {
		time.Sleep(20 * time.Millisecond)
	}
	p.waitLog("store answers again")
}

// TestServeAdminListenerAndShutdownDelay: with --admin-http the admin API
// is served there and not on the HTTP listener; with --shutdown-delay,
// after SIGTERM /readyz answers 503 while checks are still served. The
// delay, 10s, is far longer than the test takes to look on a busy machine
// (1.5s once was not enough to be sure).
func TestServeAdminListenerAndShutdownDelay(t *testing.T) {
	const token = "tok"
	args := func(delay time.Duration) []string {
		return append(local, "--admin-http", "127.0.0.1:0", "--shutdown-delay", delay.String(), "--policy", policyFile(t, testPolicy))
	}
	delay := 10 * time.Second
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, args(delay)...)
	if p.admin == "" {
		t.Fatal("no admin address in the banner")
	}
	if a := do(t, "GET", "http://"+p.admin+"/admin/v1/state?path=shared", token, ""); a.status != 200 {
		t.Errorf("admin listener: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", "http://"+p.http+"/admin/v1/state?path=shared", token, ""); a.status != 404 {
		t.Errorf("admin on the HTTP listener too: %d", a.status)
	}
	if a := do(t, "POST", "http://"+p.admin+"/v1/check", "", `{"path": ["shared"]}`); a.status != 404 {
		t.Errorf("checks on the admin listener: %d", a.status)
	}
	// Metrics and health answer on both listeners, as the README says.
	for _, addr := range []string{p.http, p.admin} {
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			if a := do(t, "GET", "http://"+addr+path, "", ""); a.status != 200 {
				t.Errorf("GET %s on %s: %d", path, addr, a.status)
			}
		}
	}
	// After SIGTERM, /readyz answers 503 and checks are answered for the
	// delay. A machine too busy to ask within it meets a closed listener:
	// again, with a delay six times as long.
	for !shutdownDelayServes(t, p, delay) {
		if delay *= 6; delay > 10*time.Minute {
			t.Fatal("no check within a shutdown delay of 6 minutes")
		}
		t.Logf("the check came after the delay: again with %v", delay)
		p = serve(t, nil, args(delay)...)
	}
}

// shutdownDelayServes sends p SIGTERM and sees /readyz answer 503 and a
// check 200 meanwhile, then p exit 0; false when it asked later than
// delay after the signal, and the listener had closed.
func shutdownDelayServes(t *testing.T, p *proc, delay time.Duration) bool {
	t.Helper()
	try := func(method, path, body string) (int, error) {
		req, _ := http.NewRequest(method, "http://"+p.http+path, strings.NewReader(body))
		resp, err := (&http.Client{Timeout: waitLimit}).Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	signalled := time.Now()
	p.signal(syscall.SIGTERM)
	late := func(what string, err error) bool {
		t.Helper()
		if since := time.Since(signalled); since < delay {
			t.Fatalf("%s %v after SIGTERM, within the shutdown delay %v: %v", what, since, delay, err)
		}
		p.wait()
		return false
	}
	for {
		status, err := try("GET", "/readyz", "")
		if err != nil {
			return late("/readyz failed", err)
		}
		if status == 503 {
			break
		}
		if time.Since(signalled) > delay+waitLimit { // a hang detector
			t.Fatalf("/readyz answers %d %v after SIGTERM", status, time.Since(signalled))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status, err := try("POST", "/v1/check", `{"path": ["shared"]}`); err != nil {
		return late("a check failed", err)
	} else if status != 200 {
		t.Errorf("a check while draining: %d", status)
	}
	select {
	case <-p.exited:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(delay + waitLimit): // a hang detector
		t.Fatalf("sluice serve did not exit %v after the shutdown delay", waitLimit)
	}
	return true
}

// TestServeResetReachesEveryInstance: two `sluice serve` on one Redis,
// each with its over-limit cache (on by default) holding a caller's
// denial of a day. An admin reset on one lets the other admit again
// within the store's ForgetPoll and a round trip (before: the other kept
// its cached denial until the denial would have ended). The test waits
// without a deadline of its own, and logs how long it took.
func TestServeResetReachesEveryInstance(t *testing.T) {
	rd := redistest.Start(t)
	pol := policyFile(t, testPolicy)
	const token = "t0ken-for-tests"
	env := []string{"SLUICE_ADMIN_TOKEN=" + token}
	a := serve(t, env, append(local, "--store", rd.URL(), "--policy", pol)...)
	b := serve(t, env, append(local, "--store", rd.URL(), "--policy", pol)...)
	check := `{"path": ["user", "zoe"]}`
	for i := range 3 {
		if r := a.check(check); r.status != 200 {
			t.Fatalf("check %d: %d %s", i, r.status, r.body)
		}
	}
	for _, p := range []*proc{a, b} {
		if r := p.check(check); r.status != 429 {
			t.Fatalf("over the limit: %d %s", r.status, r.body)
		}
	}
	if r := do(t, "DELETE", "http://"+a.http+"/admin/v1/state?path=user&path=zoe", token, ""); r.status != 200 || !strings.Contains(string(r.body), `"user:zoe"`) {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	start := time.Now()
	for try := 0; ; try++ {
		r := b.check(check) // a cached denial until the reset reaches b
		if r.status == 200 {
			break
		}
		// Far beyond the bound (a few hundred ms), on however busy a
		// machine: the cached denial would hold for a day.
		if r.status != 429 || try == 6000 {
			t.Fatalf("check on the other instance after %v: %d %s", time.Since(start), r.status, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the reset reached the other instance in %v", time.Since(start))
}

// TestBannerPath: the start banner's example path is one the served
// policy limits (it once suggested user/alex/trade for any policy), and
// none is suggested for a policy that limits nothing.
func TestBannerPath(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"schema:\n  api:\n    children:\n      \"*\": {limits: [1, 1, 60]}\n", `{"path":["api","alex"]}`},
		{"schema:\n  shadowed: {shadow: true, limits: [1, 1, 60]}\n  b: {limits: [1, 1, 60]}\n", `{"path":["b"]}`},
		{"schema:\n  free: {unlimited: true}\n", ""},
	} {
		p, err := policy.Parse("t.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if path := samplePath(p); path != nil {
			b, _ := json.Marshal(map[string][]string{"path": path})
			got = string(b)
		}
		if got != c.want {
			t.Errorf("%q: sample %s, want %s", c.src, got, c.want)
		}
	}
}

// waitLimit bounds a wait for something that takes milliseconds (a
// reload, a drain, a listener), so far beyond it that a machine busy with
// other work does not miss it: the test then fails instead of hanging.
const waitLimit = time.Minute

// cliTimeout is the store timeout (SLUICE_TIMEOUT) of the commands the
// tests run on a service's store (block, override ...): the service's 50ms
// default is one a busy machine misses.
const cliTimeout = "1m"

// decisionJSON reads the decision JSON the service answers with, every
// field of it.
type decisionJSON = proxytest.DecisionJSON

// levelJSON is one level of a decisionJSON.
type levelJSON = proxytest.LevelJSON
