package runner_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// A tenant races its per-user limits: with max_background_processes and max_terminals 1 in its grant, it
// sends many starts at once, so that each might count the running ones before any other is added. Exactly
// one of each is started; every other is resource_exhausted.
func TestQuotaLimitsHoldUnderConcurrentStarts(t *testing.T) {
	h := startRunner(t)
	g := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
		Limits: &wire.SandboxLimits{BackgroundProcesses: 1, Terminals: 1}}
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/v1/sandbox/procs", wire.ProcStartRequest{Command: "sleep 1000"}},
		{"/v1/sandbox/terminals", wire.TermCreateRequest{Command: "sleep", Args: []string{"1000"}}},
	} {
		b, _ := json.Marshal(tc.body)
		const n = 8
		codes := make(chan int, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, h.url+tc.path, bytes.NewReader(b))
				req.Header.Set("Authorization", "Bearer "+h.key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(wire.HeaderGrant, g.Encode())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			})
		}
		wg.Wait()
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		if count[http.StatusCreated] != 1 || count[wire.ResourceExhausted.HTTPStatus()] != n-1 {
			t.Errorf("%s: %d starts at once with a limit of 1 answered %v; want one %d and %d %d", tc.path, n, count,
				http.StatusCreated, n-1, wire.ResourceExhausted.HTTPStatus())
		}
	}
}
