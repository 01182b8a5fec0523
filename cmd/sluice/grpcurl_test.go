package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// grpcurlVersion is the grpcurl that TestGRPCReflection builds from its Go
// module (test.sh builds the same one ahead, so that the test only links).
const grpcurlVersion = "v1.9.3"

// grpcurl builds the real grpcurl at grpcurlVersion into a directory of
// the test's and returns its path.
func grpcurl(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@"+grpcurlVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install grpcurl@%s: %v\n%s", grpcurlVersion, err, out)
	}
	return filepath.Join(dir, "grpcurl")
}

// TestGRPCReflection: `sluice serve` serves gRPC server reflection, so the
// real grpcurl lists its services and calls ShouldRateLimit by name with
// no proto files, as a new user tries it; --grpc-reflection off (or
// SLUICE_GRPC_REFLECTION, or grpc_reflection: off) turns it off.
func TestGRPCReflection(t *testing.T) {
	bin := grpcurl(t)
	p := serve(t, nil, append(local, "--policy", policyFile(t, testPolicy))...)
	_, port, err := net.SplitHostPort(p.grpc)
	if err != nil {
		t.Fatal(err)
	}
	addr := "localhost:" + port // as a user types it
	run := func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}

	out, err := run("-plaintext", addr, "list")
	if err != nil {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	services := strings.Fields(out)
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("grpcurl list: %q, want %s among them", out, want)
		}
	}
	out, err = run("-plaintext", addr, "describe", "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit")
	if err != nil || !strings.Contains(out, "rpc ShouldRateLimit ( .envoy.service.ratelimit.v3.RateLimitRequest ) returns ( .envoy.service.ratelimit.v3.RateLimitResponse )") {
		t.Errorf("grpcurl describe: %v\n%s", err, out)
	}

	// The user's descriptor (user, alex) (trade, ...) is the policy path
	// user/alex/trade: 2 a day, so the third call is OVER_LIMIT.
	req := `{"domain": "user", "descriptors": [{"entries": [{"key": "alex", "value": "trade"}]}]}`
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		out, err := run("-plaintext", "-d", req, addr, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
		if err != nil {
			t.Fatalf("call %d: %v\n%s", i+1, err, out)
		}
		var resp struct {
			OverallCode string `json:"overallCode"`
			Statuses    []struct {
				Code           string `json:"code"`
				LimitRemaining int    `json:"limitRemaining"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("call %d: %v\n%s", i+1, err, out)
		}
		if resp.OverallCode != want || len(resp.Statuses) != 1 || resp.Statuses[0].Code != want || resp.Statuses[0].LimitRemaining != 1-i && want == "OK" {
			t.Errorf("call %d: %s, want %s", i+1, out, want)
		}
	}
	if !strings.Contains(p.stdout.String(), "grpcurl -plaintext "+p.grpc+" list") {
		t.Errorf("the banner does not say how to list the services:\n%s", p.stdout.String())
	}

	// Off, by the flag and by the variable: grpcurl is told so, and the
	// rate limit service still answers.
	for _, how := range [][2][]string{{nil, {"--grpc-reflection", "off"}}, {{"SLUICE_GRPC_REFLECTION=off"}, nil}} {
		off := serve(t, how[0], append(append(local, "--policy", policyFile(t, testPolicy)), how[1]...)...)
		out, err := run("-plaintext", off.grpc, "list")
		if err == nil || !strings.Contains(out, "server does not support the reflection API") {
			t.Errorf("%v: grpcurl list with reflection off: %v\n%s", how, err, out)
		}
		if strings.Contains(off.stdout.String(), "grpcurl") {
			t.Errorf("%v: the banner offers grpcurl with reflection off:\n%s", how, off.stdout.String())
		}
		r, err := off.rls(t).ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "user",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "alex", Value: "trade"}}}}})
		if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
			t.Errorf("%v: ShouldRateLimit with reflection off: %v %v", how, r, err)
		}
	}

	// test.sh builds the same version ahead.
	sh, err := os.ReadFile("../../test.sh")
	if err != nil || !strings.Contains(string(sh), "grpcurl_version="+grpcurlVersion) {
		t.Errorf("test.sh does not build grpcurl %s ahead: %v", grpcurlVersion, err)
	}
}
