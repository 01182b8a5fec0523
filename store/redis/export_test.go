package redis

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/queue/backend"
)

// The store's key names and hash slots, for the tests of package
// redis_test, which check where keys land.
var (
	KeyName      = keyName
	ConsumersKey = consumersKey
	QueueKey     = queueKey
)

// SetDedupWindow sets how long a queue remembers a handled dedup id.
func SetDedupWindow(q backend.Queue, d time.Duration) {
	q.(*queue).dedupWindow = strconv.FormatInt(d.Milliseconds(), 10)
}
