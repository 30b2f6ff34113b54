package egress

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// budget is a user's egress budget: refused once more than limit bytes went either way.
type budget struct {
	mu          sync.Mutex
	limit, used int64
}

func (b *budget) Add(up, down int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += up + down
	if b.used > b.limit {
		return wire.Errorf(wire.BudgetExceeded, "egress budget of %d bytes spent", b.limit)
	}
	return nil
}

// TestGatewayMetersEgress: an upload past the user's egress budget is cut within a chunk of the budget,
// recorded with its bytes, and the next connection is refused.
func TestGatewayMetersEgress(t *testing.T) {
	const limit = 1 << 20
	b := &budget{limit: limit}
	l := newLab(t, `{"mode":"open"}`, func(c *Config) { c.Meter = b })
	l.benchServers(t)
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, 1<<20)
	if _, err := io.WriteString(c, "BULK upload\n"); err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 64 && werr == nil; i++ { // far past what the sockets' buffers hold
		_, werr = c.Write(chunk)
	}
	if werr == nil {
		t.Fatal("64 MiB uploaded past a budget of 1 MiB")
	}
	r := l.sink.wait(t, "cut upload", refusedFor(KindTCP, pubWeb+":9", ReasonBudget))
	if r.BytesUp < limit || r.BytesUp > limit+meterChunk+64 {
		t.Errorf("cut after %d bytes up; budget %d, chunk %d", r.BytesUp, limit, meterChunk)
	}
	status, body, err := l.get(l.sandbox, pubWeb+":80", "allowed.test", false, "")
	if status != 403 || !strings.Contains(body, ReasonBudget) {
		t.Fatalf("a connection after the budget: %d %q %v", status, body, err)
	}
	l.sink.wait(t, "refused after the budget", refusedFor(KindTCP, pubWeb+":80", ReasonBudget))
}
