package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/store"
)

// A reset or a refund gives capacity back, and every store on the same
// Redis and prefix drops the denials its over-limit cache holds for the
// keys: the store that made it at once, the others when forget.lua's
// message reaches them over pub/sub (about a round trip). A store that
// was not subscribed when a message went out finds a generation counter
// ahead of the last one it saw, read every ForgetPoll, and drops every
// cached denial. So a reset reaches every cache within ForgetPoll plus a
// round trip, however messages are lost; a store that cannot read the
// counter drops its cached denials too, since it cannot tell.

// ForgetPoll is how often a store with an over-limit cache reads the
// generation of forgets.
const ForgetPoll = 250 * time.Millisecond

var forgetScript = embeddedScript("forget.lua")

// forgetNames are the channel and the generation counter: '%' followed
// by a letter is in no escaped key (keyName writes '%' as "%25").
func (s *Store) forgetNames() (channel, gen string) {
	return s.prefix + "%forget", s.prefix + "%forget:gen"
}

// forget drops the cached denials of the requests' keys, here and on
// every store with an over-limit cache on this Redis and prefix.
func (s *Store) forget(ctx context.Context, reqs ...store.Request) error {
	s.forgetHere(reqs...)
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	payload, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	channel, gen := s.forgetNames()
	if err := forgetScript.Exec(ctx, bounded{s.client()}, []string{gen}, []string{channel, string(payload)}).Error(); err != nil {
		return fmt.Errorf("redis store: tell the other stores' over-limit caches: %w", err)
	}
	return nil
}

// forgets follows the other stores' forgets for the over-limit cache:
// their messages, and the generation counter every ForgetPoll.
type forgets struct {
	mu   sync.Mutex
	gen  int64 // the last generation seen
	done chan struct{}
}

// watchForgets runs until the store is closed. Its subscription's
// goroutine may outlive it: a subscription rueidis dials anew waits for
// its handshake up to the dial timeout whatever its context says, and a
// Redis that hung must not hold the store's Close; it ends then.
func (s *Store) watchForgets() {
	defer close(s.forgets.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	channel, _ := s.forgetNames()
	subscribed := false
	t := time.NewTicker(ForgetPoll)
	defer t.Stop()
	for {
		if c := s.client(); c != nil && !subscribed {
			subscribed = true
			go func() {
				for ctx.Err() == nil {
					// Receive returns on a failed subscription or when
					// closing; messages lost meanwhile show in the poll.
					c.Receive(ctx, c.B().Subscribe().Channel(channel).Build(), s.forgotten)
					select {
					case <-ctx.Done():
					case <-time.After(ForgetPoll):
					}
				}
			}()
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.pollForgets(ctx)
		}
	}
}

// forgetHere drops the cached denials of the requests' keys in this
// store only: a refund across Cluster hash slots, whose reservation lasted one
// round trip, so that a denial another store cached meanwhile errs by at
// most its RetryAfter towards denying.
func (s *Store) forgetHere(reqs ...store.Request) {
	if s.denials != nil {
		for _, r := range reqs {
			s.denials.Forget(r.Key)
		}
	}
}

// forgotten handles a forget.lua message.
func (s *Store) forgotten(m rueidis.PubSubMessage) {
	genText, payload, _ := strings.Cut(m.Message, " ")
	g, err := strconv.ParseInt(genText, 10, 64)
	var keys []string
	if err != nil || json.Unmarshal([]byte(payload), &keys) != nil {
		s.denials.Clear() // not understood: forget everything
		return
	}
	f := &s.forgets
	f.mu.Lock()
	defer f.mu.Unlock()
	if g > f.gen+1 {
		s.denials.Clear() // a message was missed
	} else {
		for _, k := range keys {
			s.denials.Forget(k)
		}
	}
	f.gen = max(f.gen, g)
}

// pollForgets reads the generation counter and drops every cached denial
// when it moved past the messages seen, or cannot be read.
func (s *Store) pollForgets(ctx context.Context) {
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return // never connected: nothing was cached
	}
	defer cancel()
	_, gen := s.forgetNames()
	c := bounded{s.client()}
	g, err := c.Do(ctx, c.B().Get().Key(gen).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		s.denials.Clear()
		return
	}
	f := &s.forgets
	f.mu.Lock()
	defer f.mu.Unlock()
	if g > f.gen {
		s.denials.Clear()
		f.gen = g
	}
}
