package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// Metrics for the middleware: OnDecision sees every decision, so an app
// counts them in its own registry, here with the names and labels of
// sluice serve's sluice_decisions_total (a library registers nothing of its
// own in a program's metrics).
func Example_metrics() {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total", Help: "Level decisions by policy node and outcome.",
	}, []string{"node", "outcome"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(decisions)

	pol, err := policy.Parse("limits.yaml", []byte("schema:\n  api: {limits: [1, 1, 60]}\n"))
	if err != nil {
		panic(err)
	}
	st := memory.New()
	defer st.Close()
	limiter := httplimit.New(&policy.Checker{Policy: policy.NewCurrent(pol), Store: st}, httplimit.Options{
		Path: func(r *http.Request, key string, path []string) []string { return append(path, "api") },
		OnDecision: func(r *http.Request, d *policy.Decision) {
			for _, l := range d.Levels {
				outcome := "allowed"
				switch {
				case !l.Result.Allowed && l.Shadow:
					outcome = "shadow_limited"
				case !l.Result.Allowed:
					outcome = "limited"
				}
				decisions.WithLabelValues(l.Pattern, outcome).Inc()
			}
		},
	})
	h := limiter.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	fmt.Println("allowed", testutil.ToFloat64(decisions.WithLabelValues("api", "allowed")))
	fmt.Println("limited", testutil.ToFloat64(decisions.WithLabelValues("api", "limited")))
	// Output:
	// allowed 2
	// limited 1
}
