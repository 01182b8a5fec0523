package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// fileStamp is what the watcher compares to notice a changed file. Its
// contents are in it: a file swapped for another of the same size and
// modification time (a symlink swapped to another directory, whose files
// were written in the same tick of a coarse clock or copied with their
// times, rsync -t) is a change all the same.
type fileStamp struct {
	modTime time.Time
	size    int64
	ok      bool
	sum     uint64 // of the contents (a directory's: its files' names, times, sizes and contents)
}

// statDir stamps the *.yaml and *.yml files of dir, following symlinks
// (a Kubernetes ConfigMap's files are links into a directory it swaps).
func statDir(dir string) fileStamp {
	files, err := envoyFiles(dir)
	if err != nil {
		return fileStamp{}
	}
	h := fnv.New64a()
	st := fileStamp{ok: true}
	for _, f := range files {
		fst := statFile(f)
		if !fst.ok {
			return fileStamp{}
		}
		fmt.Fprintf(h, "%s %d %d %d\n", f, fst.modTime.UnixNano(), fst.size, fst.sum)
		st.size += fst.size
		if fst.modTime.After(st.modTime) {
			st.modTime = fst.modTime
		}
	}
	st.sum = h.Sum64()
	return st
}

// envoyFiles lists the configuration files of an Envoy config directory:
// its *.yaml and *.yml files but those whose name starts with a dot (as
// envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES=true, which Envoy Gateway
// and Istio set).
func envoyFiles(dir string) ([]string, error) {
	var out []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			if !strings.HasPrefix(filepath.Base(f), ".") {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// policyStamp stamps what the policy is read from: the file, or the Envoy
// configuration directory.
func (s *Server) policyStamp() fileStamp {
	if s.cfg.EnvoyConfigDir != "" {
		return statDir(s.cfg.EnvoyConfigDir)
	}
	return statFile(s.cfg.Policy)
}

// statFile stamps the file at path: its time, its size, and a hash of
// its contents (of at most yamlfile.MaxFileBytes and a byte: a larger file
// is refused when it is read). A policy is small; reading it at each poll
// costs little.
func statFile(path string) fileStamp {
	f, err := os.Open(path)
	if err != nil {
		return fileStamp{}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileStamp{}
	}
	h := fnv.New64a()
	if _, err := io.Copy(h, io.LimitReader(f, yamlfile.MaxFileBytes+1)); err != nil {
		return fileStamp{}
	}
	return fileStamp{modTime: fi.ModTime(), size: fi.Size(), ok: true, sum: h.Sum64()}
}

// watch reloads the policy on every value from reload (SIGHUP) and, for a
// policy file, when its contents, modification time or size have changed
// and then stayed the same for one poll (polled every WatchInterval; a negative
// interval disables polling), so that a file being written in place is
// not loaded half-written. A writer that pauses longer than a poll can
// still be read early: replace the file by a rename for a guarantee.
func (s *Server) watch(ctx context.Context, reload <-chan struct{}) {
	var tick <-chan time.Time
	if (s.cfg.Policy != "" || s.cfg.EnvoyConfigDir != "") && s.cfg.WatchInterval > 0 {
		t := time.NewTicker(time.Duration(s.cfg.WatchInterval))
		defer t.Stop()
		tick = t.C
	}
	overrides := time.NewTicker(overridePoll)
	defer overrides.Stop()
	var refreshing atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-overrides.C:
			// On its own goroutine, one at a time: a stalled store delays
			// no reload and no shutdown.
			if refreshing.CompareAndSwap(false, true) {
				go func() {
					defer refreshing.Store(false)
					if err := s.checker.Refresh(ctx); err != nil && ctx.Err() == nil {
						s.storeFailed("overrides", err)
					}
				}()
			}
		case _, ok := <-reload:
			if !ok {
				reload = nil
				continue
			}
			s.reload("signal")
		case <-tick:
			s.reloadIfChanged()
		}
	}
}

func (s *Server) reloadIfChanged() {
	st := s.policyStamp()
	s.reloadMu.Lock()
	changed := st.ok && st != s.fileState
	settled := changed && st == s.fileSeen
	s.fileSeen = st
	s.reloadMu.Unlock()
	if settled {
		s.reload("file changed")
	}
}

// reload reads the policy again and swaps it in. A file that cannot be
// read or is invalid is logged, each error with its position, counted as a
// failed reload, and the policy in force stays. It reports whether the
// new policy is in force.
func (s *Server) reload(reason string) bool {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	p, stamp, err := s.loadPolicy()
	// Remember the file as seen even when it is bad, so that a bad file is
	// reported once, not at every poll.
	s.fileState = stamp
	if err != nil {
		s.m.reloads.WithLabelValues("failure").Inc()
		var list yamlfile.ErrorList
		from, name := s.policySource()
		if errors.As(err, &list) {
			s.log.Error("policy reload failed; the previous policy stays", "reason", reason,
				from, name, "errors", len(list))
			for _, e := range list {
				s.log.Error("policy error", "pos", e.Pos.String(), "field", e.Field, "msg", e.Msg)
			}
		} else {
			s.log.Error("policy reload failed; the previous policy stays", "reason", reason,
				from, name, "err", err)
		}
		return false
	}
	s.swap(p, reason)
	return true
}

// policySource names where the policy is read from, as a log attribute:
// its file, envoyproxy/ratelimit's directory, or the xDS server.
func (s *Server) policySource() (key, value string) {
	switch {
	case s.cfg.XDSServer != "":
		return "xds_server", s.cfg.XDSServer
	case s.cfg.EnvoyConfigDir != "":
		return "dir", s.cfg.EnvoyConfigDir
	case s.cfg.Policy != "":
		return "file", s.cfg.Policy
	case s.cfg.PolicyName != "":
		return "file", s.cfg.PolicyName
	}
	return "file", "limits.yaml"
}

// swap puts p in force, for reason. The caller holds reloadMu.
func (s *Server) swap(p *policy.Policy, reason string) {
	s.current.Store(p)
	if dc, ok := s.store.(store.DenialCache); ok {
		dc.ClearOverLimit() // denials of limits that may have changed
	}
	s.m.reloads.WithLabelValues("success").Inc()
	s.m.loadedAt.SetToCurrentTime()
	s.log.Info("policy reloaded", "reason", reason, "file", p.Name(), "nodes", len(p.Nodes()))
}
