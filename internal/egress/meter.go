package egress

import (
	"errors"
	"io"
	"net"
)

// meterChunk is how many bytes a connection relays between two calls of its Meter: what a connection
// may overshoot a budget by, each way.
const meterChunk = 256 << 10

// Meter counts a sandbox's egress bytes as they are relayed and holds them to its user's budget
// (max_egress_bytes). Add is called from many goroutines at once, with the bytes relayed since the last
// call (up: from the sandbox; 0, 0 before a connection is opened) and returns an error once the budget
// is spent: the gateway then refuses new connections and ends the open ones (reason "budget exceeded").
type Meter interface {
	Add(up, down int64) error
}

// errBudget marks the end of a connection by its Meter.
var errBudget = errors.New("egress budget exceeded")

// meter passes n bytes (up or down) to the Meter, if any.
func (g *Gateway) meter(n int64, up bool) error {
	if g.cfg.Meter == nil {
		return nil
	}
	var err error
	if up {
		err = g.cfg.Meter.Add(n, 0)
	} else {
		err = g.cfg.Meter.Add(0, n)
	}
	if err != nil {
		return errors.Join(errBudget, err)
	}
	return nil
}

// copyMetered copies src to dst as io.Copy does (spliced between TCP sockets), in chunks of meterChunk
// passed to the Meter; it stops at the Meter's error. EOF is no error.
func (g *Gateway) copyMetered(dst io.Writer, src net.Conn, up bool) (int64, error) {
	if g.cfg.Meter == nil {
		return io.Copy(dst, src)
	}
	var total int64
	for {
		n, err := io.CopyN(dst, src, meterChunk)
		total += n
		if merr := g.meter(n, up); merr != nil {
			return total, merr
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			return total, err
		}
	}
}

// meteredWriter writes to w, counting and metering what it writes (up).
type meteredWriter struct {
	g *Gateway
	w io.Writer
	n int64
}

func (m *meteredWriter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	m.n += int64(n)
	if merr := m.g.meter(int64(n), true); merr != nil && err == nil {
		err = merr
	}
	return n, err
}
