package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// The middleware in front of an http.ServeMux: each API key gets 2 requests
// at once and 1 more every 60 s (redis-cell's CL.THROTTLE key 1 1 60). The
// third request in a row is denied with 429, Retry-After and a problem
// body.
func Example() {
	pol, err := policy.Parse("limits.yaml", []byte(`
schema:
  api:
    children:
      "*":                # every API key
        limits: [1, 1, 60]
`))
	if err != nil {
		panic(err)
	}
	st := memory.New()
	defer st.Close()
	checker := &policy.Checker{Policy: policy.NewCurrent(pol), Store: st}
	limiter := httplimit.New(checker, httplimit.Options{
		Key: httplimit.Header("X-API-Key", nil),
		Path: func(r *http.Request, key string, path []string) []string {
			return append(path, "api", key)
		},
	})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := httptest.NewServer(limiter.Wrap(mux))
	defer srv.Close()

	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/hello", nil)
		req.Header.Set("X-API-Key", "alex")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After", "Content-Type"} {
			if v := resp.Header.Get(k); v != "" {
				fmt.Printf("  %s: %s\n", k, v)
			}
		}
		fmt.Printf("  %s\n", strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "api/*";q=2;w=120
	//   RateLimit: "api/*";r=1;t=60
	//   Content-Type: text/plain; charset=utf-8
	//   hello
	// 200 OK
	//   RateLimit-Policy: "api/*";q=2;w=120
	//   RateLimit: "api/*";r=0;t=120
	//   Content-Type: text/plain; charset=utf-8
	//   hello
	// 429 Too Many Requests
	//   RateLimit-Policy: "api/*";q=2;w=120
	//   RateLimit: "api/*";r=0;t=60
	//   Retry-After: 60
	//   Content-Type: application/problem+json
	//   {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Quota exceeded: retry in 60 seconds.","violated-policies":["api/*"],"limit":2,"retry_after":60}
}
