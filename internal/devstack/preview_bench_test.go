package devstack_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	warren "github.com/warren-mesh/warren/sdk"
)

// BenchmarkPreview measures one small GET (keep-alive, sequential) to the same Python server three ways:
// direct (a copy of the server on this host's loopback, no Warren), runner (the runner's preview relay,
// with its key: the hop into the sandbox's network namespace), and edge (the public preview URL: the edge's
// verification against the store, then the runner). edge − direct is what a preview URL costs.
//
//	go test ./internal/devstack -run '^$' -bench BenchmarkPreview -benchtime 2000x
func BenchmarkPreview(b *testing.B) {
	st := startStack(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := warren.New(st.URL(), mint(b, st, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	const port = 18795
	startPreviewServer(b, ctx, c.Sandbox(), port)
	p, err := c.Sandbox().CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: true})
	if err != nil {
		b.Fatal(err)
	}
	entry, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "bench")
	if err != nil {
		b.Fatal(err)
	}
	direct := hostPreviewServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	run := func(b *testing.B, url string, header ...string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		b.ResetTimer()
		for range b.N {
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d", url, resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, direct+"/bench") })
	b.Run("runner", func(b *testing.B) {
		run(b, "http://"+entry.Addr+"/v1/preview/"+strconv.Itoa(port)+"/bench", "Authorization", "Bearer "+entry.Key)
	})
	b.Run("edge", func(b *testing.B) { run(b, pathURL(st, p.Token)+"bench") })
}

// hostPreviewServer runs testdata/previewserver.py on this host's loopback and returns its base URL.
func hostPreviewServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("python3", "testdata/previewserver.py", strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make([]byte, len("serving\n"))
	if _, err := io.ReadFull(out, line); err != nil {
		b.Fatal(err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(port)
}
