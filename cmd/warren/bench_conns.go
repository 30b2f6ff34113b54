package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/devstack"
)

// connsJob is what the parent of `warren bench -conns` sends its dialing child on stdin: open N agent
// channels to URL, C at once, the i-th with Tokens[i % len(Tokens)].
type connsJob struct {
	URL    string   `json:"url"`
	Tokens []string `json:"tokens"`
	N      int      `json:"n"`
	C      int      `json:"c"`
}

// connsResult is the child's answer once every channel is ready (or failed): connect → ready latencies in
// nanoseconds, and the first failures.
type connsResult struct {
	Nanos  []int64  `json:"nanos"`
	Failed int      `json:"failed"`
	Errors []string `json:"errors,omitempty"`
	NoFile string   `json:"nofile"`
}

// raiseNoFile raises RLIMIT_NOFILE to want where it can: the soft limit to the hard one, and the hard one
// too when the process may (root). It says what it got.
func raiseNoFile(want uint64) string {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	was := lim.Cur
	if lim.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	if lim.Cur < min(want, lim.Max) {
		lim.Cur = min(want, lim.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return fmt.Sprintf("%d (was %d, wanted %d)", lim.Cur, was, want)
}

// procSample is the bench process's own footprint: Go heap and stacks in use, goroutines, open fds, CPU.
type procSample struct {
	heap, stack uint64
	goroutines  int
	fds         int
	cpu         time.Duration
}

// sampleSelf reads the CPU before the collection it forces, so the collections of the samples stay
// outside the window measured between two of them.
func sampleSelf() procSample {
	cpu := selfCPU()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, _ := os.ReadDir("/proc/self/fd")
	return procSample{heap: ms.HeapInuse, stack: ms.StackInuse, goroutines: runtime.NumGoroutine(), fds: len(fds), cpu: cpu}
}

// selfCPU is the user and system CPU this process has used (/proc/self/stat, clock ticks of 10 ms).
func selfCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// benchConns holds n idle agent channels on the in-process edge (users sandboxes share them, each first
// started), dialed by a child process so that the clients' memory is not the edge's, and prints what each
// costs the edge process: heap and stacks, goroutines and fds, its CPU while they idle for idle, and the
// connect → ready latencies while they arrive.
func benchConns(ctx context.Context, stdout io.Writer, st *devstack.Stack, mint func(string) (string, error), n, users, conc int, idle time.Duration, nofile, profile string) error {
	tokens := make([]string, users)
	for i := range users {
		tok, err := mint(fmt.Sprintf("conns-user-%d", i))
		if err != nil {
			return err
		}
		tokens[i] = tok
	}
	// Each user's sandbox is started first, so that the channels measured are connections, not starts.
	if _, err := dialConns(ctx, connsJob{URL: st.URL(), Tokens: tokens, N: users, C: conc}, nil); err != nil {
		return fmt.Errorf("start the users' sandboxes: %w", err)
	}
	before := sampleSelf()
	job := connsJob{URL: st.URL(), Tokens: tokens, N: n, C: conc}
	hold := make(chan struct{})
	res, err := dialConns(ctx, job, hold)
	if err != nil {
		return err
	}
	defer close(hold)
	mid := sampleSelf()
	if profile != "" {
		if err := writeHeapProfile(profile); err != nil {
			return err
		}
	}
	if profile != "" {
		f, err := os.Create(profile + ".cpu")
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return ctx.Err()
	}
	if profile != "" {
		pprof.StopCPUProfile()
	}
	after := sampleSelf()
	up := n - res.Failed
	fmt.Fprintf(stdout, "warren bench -conns: %d idle agent channels on one edge (%d users, %d dialing at once), RLIMIT_NOFILE %s, dialer's %s\n\n",
		n, users, conc, nofile, res.NoFile)
	if up == 0 {
		return fmt.Errorf("no channel opened: %s", strings.Join(res.Errors, "; "))
	}
	lat := make([]time.Duration, len(res.Nanos))
	for i, ns := range res.Nanos {
		lat[i] = time.Duration(ns)
	}
	report(stdout, "connect → ready while they arrive", lat)
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(up) / 1024 }
	fmt.Fprintf(stdout, "%-44s heap %.1f KiB + stacks %.1f KiB = %.1f KiB → %d channels in %.2f GiB\n", "edge memory per idle channel",
		per(after.heap, before.heap), per(after.stack, before.stack), per(after.heap+after.stack, before.heap+before.stack),
		20000, per(after.heap+after.stack, before.heap+before.stack)*20000/(1<<20))
	fmt.Fprintf(stdout, "%-44s %.2f goroutines, %.2f fds\n", "edge per idle channel",
		float64(after.goroutines-before.goroutines)/float64(up), float64(after.fds-before.fds)/float64(up))
	fmt.Fprintf(stdout, "%-44s %.2f %% of a core over %s\n", "edge process CPU while they idle",
		100*float64(after.cpu-mid.cpu)/float64(idle), idle)
	if res.Failed > 0 {
		fmt.Fprintf(stdout, "%-44s %d, first: %s\n", "channels that failed to open", res.Failed, strings.Join(res.Errors, "; "))
	}
	return nil
}

// writeHeapProfile writes the heap profile (go tool pprof) of the edge process holding its channels to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dialConns runs the dialing child on job and returns its result. With hold nil the channels are closed
// at once; otherwise they stay open until hold is closed.
func dialConns(ctx context.Context, job connsJob, hold chan struct{}) (connsResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return connsResult{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "bench", "-conns-dialer")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return connsResult{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return connsResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return connsResult{}, err
	}
	if err := json.NewEncoder(in).Encode(job); err != nil {
		return connsResult{}, err
	}
	var res connsResult
	if err := json.NewDecoder(out).Decode(&res); err != nil {
		_ = cmd.Wait()
		return res, fmt.Errorf("dialer: %w", err)
	}
	end := func() { _ = in.Close(); _ = cmd.Wait() }
	if hold == nil {
		end()
	} else {
		go func() { <-hold; end() }()
	}
	if res.Failed == job.N {
		return res, fmt.Errorf("no channel opened: %s", strings.Join(res.Errors, "; "))
	}
	return res, nil
}

// runConnsDialer is the dialing child: it reads a connsJob on stdin, opens its channels, writes a
// connsResult on stdout, and holds them (reading, so pings are answered) until stdin closes.
func runConnsDialer(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var job connsJob
	r := bufio.NewReader(stdin)
	if err := json.NewDecoder(r).Decode(&job); err != nil {
		return err
	}
	nofile := raiseNoFile(uint64(job.N) + 1024)
	var mu sync.Mutex
	res := connsResult{NoFile: nofile}
	var conns []*websocket.Conn
	sem := make(chan struct{}, max(1, job.C))
	var wg sync.WaitGroup
	for i := range job.N {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			u := i % len(job.Tokens)
			c, err := dialReady(ctx, job.URL, job.Tokens[u], fmt.Sprintf("conns-%d", u))
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				if len(res.Errors) < 3 {
					res.Errors = append(res.Errors, err.Error())
				}
				return
			}
			res.Nanos = append(res.Nanos, int64(d))
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	for _, c := range conns {
		go func() { // reading answers the edge's pings
			for {
				if _, _, err := c.Read(ctx); err != nil {
					return
				}
			}
		}()
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, r) // until the parent closes stdin
	for _, c := range conns {
		_ = c.CloseNow()
	}
	return nil
}

// dialReady opens an agent channel with tok on session and waits for its ready. A user's channels share
// one session: a sandbox holds few live sessions (runner/session.HubConfig.MaxLive), but any number of
// clients on each.
func dialReady(ctx context.Context, url, tok, session string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/ws", &websocket.DialOptions{
		HTTPHeader: map[string][]string{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"init","payload":{"sessionId":"`+session+`"}}`)); err != nil {
		c.CloseNow()
		return nil, err
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			c.CloseNow()
			return nil, err
		}
		if bytes.Contains(data, []byte(`"type":"error"`)) {
			c.CloseNow()
			return nil, errors.New(string(data))
		}
		if bytes.Contains(data, []byte(`"ready"`)) {
			return c, nil
		}
	}
}
