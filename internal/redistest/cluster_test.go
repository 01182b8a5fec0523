package redistest_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Log(c.URL())
	r, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", "foo")
	if err != nil || r != "12182" {
		t.Fatal(r, err)
	}
}
