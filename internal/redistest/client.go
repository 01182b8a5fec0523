package redistest

import (
	"testing"

	"github.com/redis/rueidis"
)

// Client returns a rueidis client for url (client-side caching off),
// closed when the test ends.
func Client(tb testing.TB, url string) rueidis.Client {
	tb.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
