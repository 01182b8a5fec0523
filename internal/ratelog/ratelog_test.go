package ratelog

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	var l Every
	t0 := time.Unix(1000, 0)
	if n, ok := l.Allow(t0); !ok || n != 0 {
		t.Fatalf("first: %d, %v", n, ok)
	}
	for i := 1; i <= 3; i++ {
		if _, ok := l.Allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("event %d within the second let through", i)
		}
	}
	if n, ok := l.Allow(t0.Add(time.Second)); !ok || n != 3 {
		t.Fatalf("after a second: withheld %d, ok %v; want 3, true", n, ok)
	}
}
