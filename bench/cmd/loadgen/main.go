// Command loadgen loads `sluice serve` over loopback and serves the bare
// baselines it is compared with (bench/serve.sh runs them all):
//
//	loadgen http -addr 127.0.0.1:8080 -c 50 -d 10s -pid PID   POST /v1/check, 50 connections
//	loadgen http -method GET -path /page -header 'X-Api-Key: k{i}' ...   GET, a header per caller
//	loadgen grpc -addr 127.0.0.1:8081 -c 50 -d 10s -pid PID   ShouldRateLimit, 50 concurrent calls
//	loadgen grpc -gubernator -limit 1000000 ...               gubernator's GetRateLimits instead
//	loadgen bare-http -addr 127.0.0.1:9080                    net/http, a fixed JSON body
//	loadgen bare-http -empty ...                              net/http, 200 and no body
//	loadgen bare-grpc -addr 127.0.0.1:9081                    ShouldRateLimit, a fixed OK
//
// The load runs for a warm-up (-w, default 1s) and then the measured
// duration, each worker sending one request at a time and timing it. The
// HTTP client is a minimal HTTP/1.1 keep-alive client over one TCP
// connection per worker, so that the generator itself costs little CPU;
// the gRPC client shares -conns HTTP/2 connections among the workers. It
// prints one JSON line: requests per second, p50 and p99 latency, answers
// by status, and, given -pid, the CPU time (utime+stime from /proc) the
// process under test used per request, plus the CPU the rest of the
// machine (neither the target nor loadgen, nor Redis given -redis-pid)
// used meanwhile.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen http|grpc|bare-http|bare-grpc [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "http", "grpc":
		err = load(os.Args[1], os.Args[2:])
	case "bare-http":
		err = bareHTTP(os.Args[2:])
	case "bare-grpc":
		err = bareGRPC(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// Result is loadgen's output line.
type Result struct {
	Name        string         `json:"name"`
	Requests    int            `json:"requests"`
	Seconds     float64        `json:"seconds"`
	RPS         float64        `json:"rps"`
	P50us       float64        `json:"p50_us"`
	P99us       float64        `json:"p99_us"`
	Statuses    map[string]int `json:"statuses"`
	Errors      int            `json:"errors"`
	CPUusPerReq float64        `json:"cpu_us_per_req,omitempty"`
	TargetCPU   float64        `json:"target_cpu_cores,omitempty"`
	// RedisCPUusPerReq is Redis's CPU per request, given -redis-pid; the
	// other CPU then leaves Redis out.
	RedisCPUusPerReq float64 `json:"redis_cpu_us_per_req,omitempty"`
	OtherCPU         float64 `json:"other_cpu_cores"`
}

func load(mode string, args []string) error {
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	addr := fs.String("addr", "", "target address")
	conc := fs.Int("c", 50, "concurrent connections (http) or calls (grpc)")
	conns := fs.Int("conns", 4, "gRPC connections shared by the workers")
	dur := fs.Duration("d", 10*time.Second, "measured duration")
	warm := fs.Duration("w", time.Second, "warm-up")
	pid := fs.Int("pid", 0, "process under test, for CPU per request")
	keys := fs.Int("keys", 1000, "distinct callers; each request picks one at random")
	name := fs.String("name", mode, "name of the run")
	path := fs.String("path", "/v1/check", "HTTP path")
	rate := fs.Float64("rate", 0, "requests per second in all, spread evenly over the workers (0: as fast as answered)")
	body := fs.String("body", `{"path": ["user", "u{i}", "trade"]}`, "HTTP body: {i} is the caller's number, {ip} its address (10.0.x.y)")
	method := fs.String("method", "POST", "HTTP method; a GET sends no body")
	header := fs.String("header", "", "HTTP: one more header line, such as \"X-Api-Key: k{i}\" ({i} and {ip} as in -body)")
	redisPid := fs.Int("redis-pid", 0, "Redis, for its CPU per request")
	guber := fs.Bool("gubernator", false, "gRPC: call gubernator's V1/GetRateLimits (one token bucket of -limit a second per caller, name edge, key {ip}) instead of ShouldRateLimit")
	limit := fs.Int64("limit", 1000000, "gRPC with -gubernator: the limit a second each request carries")
	quota := fs.Int("quota", 0, "gRPC: ask for this much quota (x-sluice-quota) and, as a proxy would, admit from what is granted without calling until it runs out or expires (answers \"OK (quota)\")")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("-addr is required")
	}
	var work func(w int) (func() (string, error), func())
	switch mode {
	case "http":
		work = func(w int) (func() (string, error), func()) {
			c := &rawClient{addr: *addr}
			bodies := make([][]byte, *keys)
			for i := range bodies {
				rp := strings.NewReplacer("{i}", strconv.Itoa(i), "{ip}", ip(i))
				extra := ""
				if *header != "" {
					extra = rp.Replace(*header) + "\r\n"
				}
				if *method == "GET" {
					bodies[i] = []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", *path, *addr, extra))
					continue
				}
				body := rp.Replace(*body)
				bodies[i] = []byte(fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", *method, *path, *addr, extra, len(body), body))
			}
			r := rand.New(rand.NewPCG(uint64(w), 1))
			return func() (string, error) {
				return c.do(bodies[r.IntN(len(bodies))])
			}, c.close
		}
	case "grpc":
		ccs := make([]*grpc.ClientConn, *conns)
		for i := range ccs {
			cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer cc.Close()
			ccs[i] = cc
		}
		work = func(w int) (func() (string, error), func()) {
			if *guber {
				return guberCall(ccs[w%len(ccs)], w, *keys, *limit), func() {}
			}
			c := rlv3.NewRateLimitServiceClient(ccs[w%len(ccs)])
			reqs := make([]*rlv3.RateLimitRequest, *keys)
			for i := range reqs {
				reqs[i] = &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
					Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip(i)}}}}}
			}
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			ctx := context.Background()
			if *quota > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-sluice-quota", strconv.Itoa(*quota))
			}
			// The quota this worker holds, for its one caller (-keys 1).
			var left uint32
			var until time.Time
			return func() (string, error) {
				if left > 0 && time.Now().Before(until) {
					left--
					return "OK (quota)", nil
				}
				r, err := c.ShouldRateLimit(ctx, reqs[rnd.IntN(len(reqs))])
				if err != nil {
					return "", err
				}
				if q := r.GetQuota(); q != nil && *keys == 1 {
					left, until = q.GetRequests(), q.GetValidUntil().AsTime()
				}
				return r.OverallCode.String(), nil
			}, func() {}
		}
	}

	var measuring atomic.Bool
	var stop atomic.Bool
	lat := make([][]time.Duration, *conc)
	statuses := make([]map[string]int, *conc)
	errs := make([]int, *conc)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			call, done := work(w)
			defer done()
			lat[w] = make([]time.Duration, 0, 1<<16)
			statuses[w] = map[string]int{}
			var interval time.Duration
			next := time.Now()
			if *rate > 0 {
				interval = time.Duration(float64(*conc) / *rate * float64(time.Second))
				next = next.Add(interval * time.Duration(w) / time.Duration(*conc)) // stagger the workers
			}
			for !stop.Load() {
				if interval > 0 {
					// Latency counts from the send, not from the scheduled
					// time: well under capacity, late timer wake-ups of
					// this process would otherwise count as the server's.
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = next.Add(interval)
				}
				t0 := time.Now()
				st, err := call()
				d := time.Since(t0)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs[w]++
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(time.Millisecond)
					continue
				}
				lat[w] = append(lat[w], d)
				statuses[w][st]++
			}
		}(w)
	}
	time.Sleep(*warm)
	cpu0, tot0, self0, rcpu0 := procCPU(*pid), machineCPU(), procCPU(os.Getpid()), procCPU(*redisPid)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(*dur)
	measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1, tot1, self1, rcpu1 := procCPU(*pid), machineCPU(), procCPU(os.Getpid()), procCPU(*redisPid)
	stop.Store(true)
	wg.Wait()

	var all []time.Duration
	res := Result{Name: *name, Statuses: map[string]int{}, Seconds: elapsed.Seconds()}
	for w := range lat {
		all = append(all, lat[w]...)
		for k, v := range statuses[w] {
			res.Statuses[k] += v
		}
		res.Errors += errs[w]
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	res.Requests = len(all)
	res.RPS = float64(len(all)) / elapsed.Seconds()
	if len(all) > 0 {
		res.P50us = us(all[len(all)*50/100])
		res.P99us = us(all[len(all)*99/100])
	}
	if *pid > 0 && len(all) > 0 {
		target := (cpu1 - cpu0).Seconds()
		res.CPUusPerReq = target * 1e6 / float64(len(all))
		res.TargetCPU = target / elapsed.Seconds()
	}
	if *redisPid > 0 && len(all) > 0 {
		res.RedisCPUusPerReq = (rcpu1 - rcpu0).Seconds() * 1e6 / float64(len(all))
	}
	others := (tot1 - tot0 - (cpu1 - cpu0) - (self1 - self0) - (rcpu1 - rcpu0)).Seconds() / elapsed.Seconds()
	res.OtherCPU = float64(int(others*100)) / 100
	if res.Errors > 0 {
		fmt.Fprintf(os.Stderr, "loadgen: %d errors, the first: %v\n", res.Errors, firstErr.Load())
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// guberCall calls gubernator's GetRateLimits for a random one of keys
// callers. The messages are encoded with protowire, so that loadgen needs
// none of gubernator's packages; the answer is its first response's
// status, and its error field an error.
func guberCall(cc *grpc.ClientConn, w, keys int, limit int64) func() (string, error) {
	reqs := make([][]byte, keys)
	for i := range reqs {
		var r []byte
		r = protowire.AppendTag(r, 1, protowire.BytesType) // name
		r = protowire.AppendString(r, "edge")
		r = protowire.AppendTag(r, 2, protowire.BytesType) // unique_key
		r = protowire.AppendString(r, ip(i))
		r = protowire.AppendTag(r, 3, protowire.VarintType) // hits
		r = protowire.AppendVarint(r, 1)
		r = protowire.AppendTag(r, 4, protowire.VarintType) // limit
		r = protowire.AppendVarint(r, uint64(limit))
		r = protowire.AppendTag(r, 5, protowire.VarintType) // duration, ms
		r = protowire.AppendVarint(r, 1000)
		reqs[i] = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), r) // requests
	}
	rnd := rand.New(rand.NewPCG(uint64(w), 1))
	var out []byte
	return func() (string, error) {
		in := reqs[rnd.IntN(len(reqs))]
		if err := cc.Invoke(context.Background(), "/pb.gubernator.V1/GetRateLimits", &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return "", err
		}
		return guberStatus(out)
	}
}

// guberStatus reads the first RateLimitResp of a GetRateLimitsResp.
func guberStatus(b []byte) (string, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return "", errors.New("gubernator: no response")
	}
	r, m := protowire.ConsumeBytes(b[n:])
	if m < 0 {
		return "", errors.New("gubernator: bad response")
	}
	status := "UNDER_LIMIT"
	for len(r) > 0 {
		num, typ, n := protowire.ConsumeTag(r)
		if n < 0 {
			return "", errors.New("gubernator: bad response")
		}
		r = r[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(r)
			if v == 1 {
				status = "OVER_LIMIT"
			}
			n = m
		case num == 5 && typ == protowire.BytesType:
			v, m := protowire.ConsumeString(r)
			if v != "" {
				return "", errors.New("gubernator: " + v)
			}
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, r)
		}
		if n < 0 {
			return "", errors.New("gubernator: bad response")
		}
		r = r[n:]
	}
	return status, nil
}

// rawCodec passes encoded messages through gRPC as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// ip is caller i's address, 10.0.x.y.
func ip(i int) string { return fmt.Sprintf("10.0.%d.%d", i/256, i%256) }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()/100) / 10 }

// procCPU is a process's utime+stime from /proc (0 for pid 0).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// machineCPU is the CPU time processes used on the whole machine
// (/proc/stat).
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)[1:]
	var busy int64
	for i, v := range f {
		n, _ := strconv.ParseInt(v, 10, 64)
		// user, nice, system, steal: not idle or iowait, nor irq and
		// softirq (loopback networking, charged to no process); guest
		// time is counted in user.
		if i == 3 || i == 4 || i == 5 || i == 6 || i >= 8 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / 100
}

// idle waits (at most -timeout) until the machine's processes use less
// than -max cores over a second, so that a run starts on a quiet machine.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	maxCores := fs.Float64("max", 0.2, "busy cores below which the machine counts as idle")
	timeout := fs.Duration("timeout", 20*time.Second, "longest wait")
	fs.Parse(args)
	deadline := time.Now().Add(*timeout)
	for {
		t0 := machineCPU()
		time.Sleep(time.Second)
		busy := (machineCPU() - t0).Seconds()
		if busy < *maxCores || time.Now().After(deadline) {
			return nil
		}
	}
}

// rawClient is a minimal HTTP/1.1 keep-alive client: it writes a
// prepared request and reads a response with a Content-Length.
type rawClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	buf  []byte
}

func (c *rawClient) do(req []byte) (string, error) {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return "", err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	if _, err := c.conn.Write(req); err != nil {
		c.close()
		return "", err
	}
	status, err := c.readResponse()
	if err != nil {
		c.close()
	}
	return status, err
}

func (c *rawClient) readResponse() (string, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 12 {
		return "", fmt.Errorf("bad status line %q", line)
	}
	status := string(line[9:12])
	n := -1
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return "", err
		}
		if len(h) <= 2 {
			break
		}
		if len(h) > 16 && (h[0] == 'C' || h[0] == 'c') && strings.EqualFold(string(h[:15]), "content-length:") {
			n, _ = strconv.Atoi(strings.TrimSpace(string(h[15:])))
		}
	}
	if n < 0 {
		return "", errors.New("response without Content-Length")
	}
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(c.br, c.buf[:n]); err != nil {
		return "", err
	}
	return status, nil
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// bareBody is what the bare handler answers: a decision-shaped JSON body
// of the size sluice answers with for a two-level check.
var bareBody = []byte(`{"allowed":true,"limit":1000,"remaining":999,"retry_after_ns":0,"reset_after_ns":1000000,"matched":true,"levels":[{"pattern":"user/*","key":"user:u1","spec":{"algorithm":"gcra","burst":999,"count":1000000,"period":"1s"},"shadow":false,"allowed":true,"limit":1000,"remaining":999,"retry_after_ns":0,"reset_after_ns":1000},{"pattern":"user/*/trade","key":"user:u1:trade","spec":{"algorithm":"fixed_window","limit":1000000,"window":"1s"},"shadow":false,"allowed":true,"limit":1000000,"remaining":999999,"retry_after_ns":0,"reset_after_ns":1000000}]}` + "\n")

// bareHTTP serves a fixed JSON body on every path: the net/http baseline.
func bareHTTP(args []string) error {
	fs := flag.NewFlagSet("bare-http", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9080", "listen address")
	empty := fs.Bool("empty", false, "answer 200 with an empty body: a forward-auth that costs nothing")
	fs.Parse(args)
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", l.Addr())
	return http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if *empty {
			w.Header().Set("Content-Length", "0")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(bareBody)
	}))
}

type okService struct {
	rlv3.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(context.Context, *rlv3.RateLimitRequest) (*rlv3.RateLimitResponse, error) {
	return &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OK,
		Statuses: []*rlv3.RateLimitResponse_DescriptorStatus{{Code: rlv3.RateLimitResponse_OK}}}, nil
}

// bareGRPC serves ShouldRateLimit answering a fixed OK: the gRPC baseline.
func bareGRPC(args []string) error {
	fs := flag.NewFlagSet("bare-grpc", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9081", "listen address")
	fs.Parse(args)
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", l.Addr())
	s := grpc.NewServer()
	rlv3.RegisterRateLimitServiceServer(s, okService{})
	return s.Serve(l)
}
