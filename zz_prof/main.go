package main

import (
	"context"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"

	"github.com/sluicehq/sluice/server"
)

func main() {
	go http.ListenAndServe("127.0.0.1:6061", nil)
	cfg := server.Config{HTTP: os.Args[1], GRPC: os.Args[2], Store: os.Args[3], Policy: os.Args[4], LogLevel: "warn"}
	if err := server.ApplyEnv(&cfg, os.Getenv); err != nil {
		panic(err)
	}
	s, err := server.New(context.Background(), cfg, slog.Default())
	if err != nil {
		panic(err)
	}
	s.Serve(context.Background(), nil)
}
