// Command gubernator is gubernator (github.com/gubernator-io/gubernator),
// the Go rate limit service that keeps its counters in its own memory,
// built from its Go module so that bench/envoy.sh can run it next to
// sluice serve. It is configured, as upstream's daemon is, by environment
// variables (GUBER_GRPC_ADDRESS, GUBER_HTTP_ADDRESS, ...), and stops on
// SIGTERM or SIGINT. With GUBER_PEER_DISCOVERY_TYPE=none it is a cluster
// of one: it owns every limit, as one sluice serve on the memory store does,
// unless PEERS names the cluster's members (their gRPC addresses, comma
// separated, as every member dials them; this one's is
// GUBER_ADVERTISE_ADDRESS): bench/global.sh links three so, through relays.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	conf, err := gubernator.SetupDaemonConfig(logrus.StandardLogger(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gubernator:", err)
		os.Exit(1)
	}
	d, err := gubernator.SpawnDaemon(context.Background(), conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gubernator:", err)
		os.Exit(1)
	}
	if conf.PeerDiscoveryType == "none" {
		peers := []gubernator.PeerInfo{{GRPCAddress: conf.AdvertiseAddress, HTTPAddress: conf.HTTPListenAddress}}
		if p := os.Getenv("PEERS"); p != "" {
			peers = nil
			for _, a := range strings.Split(p, ",") {
				peers = append(peers, gubernator.PeerInfo{GRPCAddress: a})
			}
		}
		d.SetPeers(peers)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	d.Close()
}
