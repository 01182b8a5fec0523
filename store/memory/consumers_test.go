package memory_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// TestConsumerLogBytesBound: the memory store's lists stay within their
// byte bound, dropping (and saying how many) what does not fit.
func TestConsumerLogBytesBound(t *testing.T) {
	st := memory.New(memory.WithConsumerBytes(64 << 10))
	defer st.Close()
	entry := bytes.Repeat([]byte("x"), 1024)
	var dropped int
	for i := range 1000 {
		err := st.PushConsumers(context.Background(), []store.Consumed{{Key: "k" + strconv.Itoa(i), Entry: entry}}, 20, time.Hour)
		var d *store.DroppedError
		if errors.As(err, &d) {
			dropped += d.Dropped
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// 64 KiB holds about 58 lists of one 1 KiB entry with their overhead.
	if dropped < 900 || dropped > 960 {
		t.Errorf("dropped %d of 1000 entries of 1 KiB within 64 KiB", dropped)
	}
	if got, _ := st.Consumers(context.Background(), "k0", ""); len(got) != 1 {
		t.Errorf("the first list: %d entries", len(got))
	}
	if got, _ := st.Consumers(context.Background(), "k999", ""); len(got) != 0 {
		t.Errorf("a list past the bound: %d entries", len(got))
	}
}
