// Command floor is the least a Go rate limit service can do per check on
// Redis, the floor Sluice's exact path is measured against (bench/envoy.sh,
// BENCHMARKS.md): it decodes a request as Sluice's does (Envoy's RLS v3
// over gRPC with grpc-go; {"path": [...]} over HTTP with net/http and
// encoding/json), runs one EVALSHA of a minimal fixed-window script through
// rueidis with its defaults (Sluice's Redis client), and answers OK or
// OVER_LIMIT (200 or 429). No policy, no metrics, no logging, no clock but
// this machine's: the floor, not a service.
//
//	floor -http 127.0.0.1:8080 -grpc 127.0.0.1:8081 -redis 127.0.0.1:6379 -limit 1000000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
)

// script counts a cost in a window's key and reports whether the window's
// count is within the limit.
//
// KEYS[1] the window's key; ARGV[1] the limit, ARGV[2] the cost, ARGV[3]
// the key's life in ms. Reply 1 allowed, 0 not.
var script = rueidis.NewLuaScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[1]) then return 0 end
return 1`)

type floor struct {
	client rueidis.Client
	limit  string
}

// allow runs the script for key in this second's window.
func (f *floor) allow(ctx context.Context, key string, cost int64) (bool, error) {
	key += ":" + strconv.FormatInt(time.Now().Unix(), 10)
	n, err := script.Exec(ctx, f.client, []string{key}, []string{f.limit, strconv.FormatInt(cost, 10), "1000"}).AsInt64()
	return n == 1, err
}

func (f *floor) check(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var req struct {
		Path []string `json:"path"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil || len(req.Path) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	ok, err := f.allow(r.Context(), strings.Join(req.Path, ":"), 1)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case ok:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"allowed":true}`+"\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"allowed":false}`+"\n")
	}
}

type rls struct {
	rlv3.UnimplementedRateLimitServiceServer
	f *floor
}

func (s rls) ShouldRateLimit(ctx context.Context, req *rlv3.RateLimitRequest) (*rlv3.RateLimitResponse, error) {
	resp := &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OK}
	for _, d := range req.Descriptors {
		var b strings.Builder
		b.WriteString(req.Domain)
		for _, e := range d.Entries {
			b.WriteString(":" + e.Key + ":" + e.Value)
		}
		ok, err := s.f.allow(ctx, b.String(), int64(max(req.HitsAddend, 1)))
		if err != nil {
			return nil, err
		}
		code := rlv3.RateLimitResponse_OK
		if !ok {
			code, resp.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT, rlv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, &rlv3.RateLimitResponse_DescriptorStatus{Code: code})
	}
	return resp, nil
}

func main() {
	httpAddr := flag.String("http", "127.0.0.1:8080", "HTTP listen address")
	grpcAddr := flag.String("grpc", "127.0.0.1:8081", "gRPC listen address")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	limit := flag.Int64("limit", 1000000, "checks a key may make a second")
	flag.Parse()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*redisAddr}})
	if err != nil {
		log.Fatal(err)
	}
	f := &floor{client: client, limit: strconv.FormatInt(*limit, 10)}
	ln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	rlv3.RegisterRateLimitServiceServer(g, rls{f: f})
	go func() { log.Fatal(g.Serve(ln)) }()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", f.check)
	log.Fatal(http.ListenAndServe(*httpAddr, mux))
}
