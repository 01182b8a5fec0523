package redis

// The store's key names and hash slots, for the tests of package
// redis_test, which check where keys land.
var (
	KeyName      = keyName
	ConsumersKey = consumersKey
	QueueKey     = queueKey
)
