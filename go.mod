module github.com/sluicehq/sluice

go 1.25.0

require (
	github.com/goccy/go-yaml v1.19.2
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.47.0 // indirect
