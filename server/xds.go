package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/envoyimport"
)

// xdsWaiting is the policy until the xDS server's first valid
// configuration (and the policy of an update with no resources): nothing
// is limited, as envoyproxy/ratelimit limits nothing in a domain it has no
// configuration for. Until the first, ShouldRateLimit does not answer by
// it but UNAVAILABLE (xdsWait).
const xdsWaiting = "unmatched: allow\nschema:\n  \"%no-configuration-yet\": {unlimited: true}\n"

// xdsRetry bounds the wait before connecting to the xDS server again.
const xdsRetry = 5 * time.Second

// watchXDS takes the policy from the xDS server until ctx is done: it
// subscribes to RateLimitConfig resources (state of the world over ADS),
// applies each response as a reload, all its domains at once, and
// acknowledges it; a response that does not convert or parse is refused
// (NACK, with the reason) and the policy in force stays. A lost
// connection is made again, after a growing pause of up to xdsRetry.
func (s *Server) watchXDS(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.followXDS(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("xds: connection lost; connecting again", "server", s.cfg.XDSServer, "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, xdsRetry)
	}
}

// followXDS follows one connection to the xDS server until it fails.
func (s *Server) followXDS(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if s.cfg.XDSTLS.enabled() {
		tc, err := tlsConfig(s.cfg.XDSTLS)
		if err != nil {
			return fmt.Errorf("xds_tls %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(s.cfg.XDSServer, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := sotw.NewADSClient(ctx, &corev3.Node{Id: s.cfg.XDSNodeID}, resource.RateLimitConfigType)
	if err := c.InitConnect(conn); err != nil {
		return err
	}
	for {
		resp, err := c.Fetch()
		if err != nil {
			return err
		}
		if err := s.applyXDS(resp.Resources); err != nil {
			s.m.reloads.WithLabelValues("failure").Inc()
			if s.xdsWait.Load() != nil {
				s.waitXDS("the xDS server's configuration was refused: " + err.Error())
			}
			s.log.Error("xds: configuration refused; the previous policy stays", "server", s.cfg.XDSServer, "err", err)
			if err := c.Nack(err.Error()); err != nil {
				return err
			}
			continue
		}
		if err := c.Ack(); err != nil {
			return err
		}
	}
}

// applyXDS converts RateLimitConfig resources, one domain each, straight
// to the policy (envoyimport.FromXDS), and swaps it in.
func (s *Server) applyXDS(resources []*anypb.Any) error {
	configs := make([]*rlsconfv3.RateLimitConfig, len(resources))
	for i, r := range resources {
		configs[i] = &rlsconfv3.RateLimitConfig{}
		if err := anypb.UnmarshalTo(r, configs[i], proto.UnmarshalOptions{}); err != nil {
			return fmt.Errorf("a resource that is not a RateLimitConfig: %w", err)
		}
	}
	var p *policy.Policy
	var err error
	if len(configs) == 0 {
		p, err = policy.Parse("xds:"+s.cfg.XDSServer, []byte(xdsWaiting))
	} else {
		var warnings []string
		p, warnings, err = envoyimport.FromXDS("xds:"+s.cfg.XDSServer, configs, s.cfg.Envoy.Counts)
		for _, w := range warnings {
			s.log.Warn("xds: " + w)
		}
		if err == nil {
			text, unlimited := envoyimport.DumpXDS(configs)
			s.rlconfig.Store(&rlconfig{p, text, unlimited, nil})
		}
	}
	if err != nil {
		return err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.swap(p, "xds")
	s.xdsWait.Store(nil)
	return nil
}

// maxWaitReason bounds the reason ShouldRateLimit and /readyz give while
// there is no xDS configuration (a refusal's may list 100 errors).
const maxWaitReason = 1024

// waitXDS records why there is no xDS configuration in force yet.
func (s *Server) waitXDS(why string) {
	if len(why) > maxWaitReason {
		why = strings.ToValidUTF8(why[:maxWaitReason-3], "") + "..."
	}
	s.xdsWait.Store(&why)
}
