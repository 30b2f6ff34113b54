package devstack_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// browserSamples is what sdk/js/bench/browser.ts measures over one transport.
type browserSamples struct {
	Ping    []float64 `json:"ping"`    // round trips, ms
	Connect []float64 `json:"connect"` // connect → ready, ms
	Events  int       `json:"events"`
	BusyMs  float64   `json:"busyMs"`
}

// benchCount is the n of -benchtime nx (100 otherwise): how many pings, connects and turns the browser makes,
// as many as BenchmarkAgentChannel's iterations in the same run.
func benchCount() int {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x")); err == nil && strings.HasSuffix(f.Value.String(), "x") && n > 0 {
			return n
		}
	}
	return 100
}

// BenchmarkBrowserAgentChannel is BenchmarkAgentChannel from the browser: headless Chromium loads the
// TypeScript SDK's browser build and measures, over the browser's own WebSocket and over WebTransport
// through a real edge and runner (the Claude Code CLI against the scripted model, its "long" scenario):
//
//   - ping: JSON ping → pong round trips on one session (p50, p99);
//   - connect: a fresh session from connect to its first event (ready), then closed (p50, p99);
//   - events: turns with includePartialMessages (about 200 stream events each): events per second.
//
// The browser makes n of each, n from -benchtime nx (100 otherwise), in one page (sdk/js/bench/browser.ts);
// the sub-benchmarks report its figures (their ns/op means nothing). Times come from the page's
// performance.now(), coarsened by Chromium to 0.1 ms. With BenchmarkAgentChannel, in the same run:
//
//	go test ./internal/devstack -run '^$' -bench AgentChannel -benchtime 100x
func BenchmarkBrowserAgentChannel(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	node, chromium := buildSDKJS(b, ctx)
	st := benchStack(b)
	n := strconv.Itoa(benchCount())
	run := exec.CommandContext(ctx, node, "dist/bench/browser.js")
	run.Dir = sdkJSDir
	run.Env = append(os.Environ(),
		"WARREN_URL="+st.URL(),
		"WARREN_TOKEN="+mint(b, st, "bench-browser"),
		"WARREN_CHROMIUM="+chromium,
		"WARREN_BENCH_PINGS="+n, "WARREN_BENCH_CONNECTS="+n, "WARREN_BENCH_TURNS="+n,
		"WARREN_BENCH_PROMPT="+benchPrompt,
	)
	run.Stderr = os.Stderr
	out, err := run.Output()
	if err != nil {
		b.Fatalf("node dist/bench/browser.js: %v\n%s", err, out)
	}
	var res map[string]browserSamples
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("the browser's figures: %v\n%s", err, out)
	}
	ms := func(xs []float64) []time.Duration {
		ds := make([]time.Duration, len(xs))
		for i, x := range xs {
			ds[i] = time.Duration(x * float64(time.Millisecond))
		}
		return ds
	}
	for _, tr := range []string{"websocket", "webtransport"} {
		r, ok := res[tr]
		if !ok || r.Events == 0 {
			b.Fatalf("no figures over %s: %s", tr, out)
		}
		b.Run(tr+"/ping", func(b *testing.B) { reportQuantiles(b, ms(r.Ping)) })
		b.Run(tr+"/connect", func(b *testing.B) { reportQuantiles(b, ms(r.Connect)) })
		b.Run(tr+"/events", func(b *testing.B) { b.ReportMetric(float64(r.Events)/(r.BusyMs/1000), "events/s") })
	}
}
