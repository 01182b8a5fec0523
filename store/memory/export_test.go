package memory

// For the tests of package memory_test: how many keys the store holds, a
// sweep on demand, and the consumers lists' byte bound.
var WithConsumerBytes = withConsumerBytes

func (s *Store) Len() int { return s.keys() }

func (s *Store) Sweep() { s.sweep() }
