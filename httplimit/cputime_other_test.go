//go:build !unix

package httplimit_test

import "time"

func cpuTime() time.Duration { return 0 }
