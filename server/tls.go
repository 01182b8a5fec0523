package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// A server's TLSConfig serves a listener over TLS from files, and, with
// CAFile, asks every client for a certificate that CA signed (mutual TLS,
// as Envoy Gateway runs its rate limit service). The files are read again
// when they change (at most once a second, on a handshake), so a rotated
// certificate is served without a restart.

// tlsFiles is a server TLSConfig's files as last read.
type tlsFiles struct {
	cfg     TLSConfig
	mu      sync.Mutex
	checked time.Time    // the files' times were last looked at
	stamps  [3]fileStamp // of the files as read
	conf    *tls.Config
}

// newTLSFiles reads t's files: an error names the one that is wrong.
func newTLSFiles(t TLSConfig) (*tlsFiles, error) {
	if t.ServerName != "" || t.InsecureSkipVerify {
		return nil, errors.New("server_name and insecure_skip_verify are a client's: a server takes cert_file, key_file and ca_file")
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("cert_file and key_file are both needed")
	}
	f := &tlsFiles{cfg: t}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

// load reads the files into a tls.Config.
func (f *tlsFiles) load() error {
	cert, err := tls.LoadX509KeyPair(f.cfg.CertFile, f.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("cert_file %s, key_file %s: %w", f.cfg.CertFile, f.cfg.KeyFile, err)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if f.cfg.CAFile != "" {
		pem, err := os.ReadFile(f.cfg.CAFile)
		if err != nil {
			return fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("ca_file %s holds no PEM certificate", f.cfg.CAFile)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f.conf = conf
	f.stamps = [3]fileStamp{statFile(f.cfg.CertFile), statFile(f.cfg.KeyFile), statFile(f.cfg.CAFile)}
	return nil
}

// config is the server's tls.Config: each handshake takes the files as
// they are now, read again when one has changed (a file half-written is
// kept for the next look: the config in force stays).
func (f *tlsFiles) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if now := time.Now(); now.Sub(f.checked) >= time.Second {
			f.checked = now
			st := [3]fileStamp{statFile(f.cfg.CertFile), statFile(f.cfg.KeyFile), statFile(f.cfg.CAFile)}
			if st != f.stamps {
				f.load() // on an error the config in force stays
			}
		}
		return f.conf, nil
	}}
}
