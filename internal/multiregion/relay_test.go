package multiregion_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// relay is the distance to a region: a TCP proxy in front of its edge that delivers every byte, each way,
// a configurable one-way delay after it arrived (the kernel's netem is not available here). Bytes keep
// their order and throughput is not limited: a chunk read at t is written at t+delay.
type relay struct {
	ln     net.Listener
	target atomic.Pointer[string]
	delay  atomic.Int64 // one way, nanoseconds

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startRelay(t *testing.T) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, conns: map[net.Conn]struct{}{}}
	go r.serve()
	t.Cleanup(r.close)
	return r
}

// URL is the base URL clients reach the region's edge at.
func (r *relay) URL() string { return "http://" + r.ln.Addr().String() }

// setTarget points new connections at addr (host:port of the edge).
func (r *relay) setTarget(addr string) { r.target.Store(&addr) }

// setDelay sets the one-way delay of every byte relayed from now on.
func (r *relay) setDelay(d time.Duration) { r.delay.Store(int64(d)) }

func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		_ = c.Close()
	}
}

func (r *relay) track(c net.Conn, add bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if add {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.relay(c)
	}
}

// relay connects client c to the target; when either side ends, both do.
func (r *relay) relay(c net.Conn) {
	defer c.Close()
	target := r.target.Load()
	if target == nil {
		return
	}
	u, err := net.DialTimeout("tcp", *target, 5*time.Second)
	if err != nil {
		return // the edge is down: the client sees its connection closed
	}
	defer u.Close()
	r.track(c, true)
	r.track(u, true)
	defer r.track(c, false)
	defer r.track(u, false)
	done := make(chan struct{}, 2)
	go func() { r.pipe(u, c); done <- struct{}{} }()
	go func() { r.pipe(c, u); done <- struct{}{} }()
	<-done
	// One direction ended (EOF or error): close both, which ends the other.
	_ = c.Close()
	_ = u.Close()
	<-done
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk delay after it was read.
func (r *relay) pipe(dst, src net.Conn) {
	q := make(chan chunk, 256) // backpressure: a full queue stops reading
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at.Add(time.Duration(r.delay.Load()))))
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close() // unblocks the reader
			for range q {
			}
			return
		}
	}
}
