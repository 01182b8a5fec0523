package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA and the certificates it signs, written as PEM files.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: t.TempDir(), ca: ca, caKey: key, serial: 1}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue writes a certificate and key for name (a server for 127.0.0.1,
// or a client), and returns their files and the certificate's serial.
func (p *testPKI) issue(t *testing.T, name string, server bool) (certFile, keyFile string, serial int64) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder), p.serial
}

// TestMutualTLS: with grpc_tls and a client CA, the gRPC server answers a
// client with a certificate that CA signed and refuses one without; the
// HTTP listener serves TLS too (and Envoy's /healthcheck); a certificate
// rewritten on disk is served without a restart.
func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	cert, key, _ := pki.issue(t, "server", true)
	clientCert, clientKey, _ := pki.issue(t, "client", false)
	s := serveForTest(t, Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0",
		PolicyData: []byte("schema:\n  d: {children: {k: {children: {\"*\": {limits: [1, 1, 1]}}}}}\n"),
		GRPCTLS:    TLSConfig{CertFile: cert, KeyFile: key, CAFile: filepath.Join(pki.dir, "ca.pem")},
		HTTPTLS:    TLSConfig{CertFile: cert, KeyFile: key}})
	roots := x509.NewCertPool()
	roots.AddCert(pki.ca)
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
	newCert, newKey, want := pki.issue(t, "server2", true)
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
