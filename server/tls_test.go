package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/internal/pkitest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TestMutualTLS: with grpc_tls and a client CA, the gRPC server answers a
// client with a certificate that CA signed and refuses one without; the
// HTTP listener serves TLS too (and Envoy's /healthcheck); a certificate
// rewritten on disk is served without a restart.
func TestMutualTLS(t *testing.T) {
	pki := pkitest.New(t)
	cert, key, _ := pki.Issue(t, "server", true)
	clientCert, clientKey, _ := pki.Issue(t, "client", false)
	s := serveForTest(t, Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0",
		PolicyData: []byte("schema:\n  d: {children: {k: {children: {\"*\": {limits: [1, 1, 1]}}}}}\n"),
		GRPCTLS:    TLSConfig{CertFile: cert, KeyFile: key, CAFile: pki.CAFile()},
		HTTPTLS:    TLSConfig{CertFile: cert, KeyFile: key}})
	roots := x509.NewCertPool()
	roots.AddCert(pki.CA)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(c *tls.Config) error {
		conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rlv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
		return err
	}
	if err := ask(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}); err != nil {
		t.Errorf("a client with a certificate of the CA: %v", err)
	}
	if err := ask(&tls.Config{RootCAs: roots}); err == nil {
		t.Error("a client without a certificate was answered")
	}

	// HTTPS, and the certificate it serves, rewritten on disk.
	served := func() int64 {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		resp, err := c.Get("https://" + s.HTTPAddr() + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /healthcheck over TLS: %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	before := served()
	newCert, newKey, want := pki.Issue(t, "server2", true)
	for _, f := range [][2]string{{newCert, cert}, {newKey, key}} {
		b, _ := os.ReadFile(f[0])
		os.WriteFile(f[1]+".tmp", b, 0o600)
		os.Rename(f[1]+".tmp", f[1])
	}
	for n := served(); n != want; n = served() { // the files are looked at once a second
		if n != before {
			t.Fatalf("served serial %d, want %d or %d", n, before, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
