package memory

import (
	"testing"
	"unsafe"
)

// TestEntryLayout: an entry fills one 128-byte size class, with the state
// a decision writes in its first cache line (see entry), and a shard fills
// a pair of cache lines.
func TestEntryLayout(t *testing.T) {
	var e entry
	if n := unsafe.Sizeof(e); n != 128 {
		t.Errorf("entry is %d bytes, want 128", n)
	}
	if end := unsafe.Offsetof(e.st) + unsafe.Offsetof(e.st.Log) + 8; end > 64 {
		t.Errorf("the state ends at byte %d, past the first cache line", end)
	}
	if unsafe.Offsetof(e.h) >= 64 {
		t.Error("the hash is past the first cache line")
	}
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Errorf("a shard is %d bytes, want 128 (a pair of cache lines)", n)
	}
}
