package egress

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is what a record is about.
type Kind string

// The kinds of record.
const (
	KindDNS Kind = "dns" // a query to the sandbox's resolver
	KindTCP Kind = "tcp" // a TCP connection
)

// Verdict is what the gateway did.
type Verdict string

// The verdicts.
const (
	Allowed Verdict = "allowed" // let through (a record of a connection is written when it ends)
	Refused Verdict = "refused" // refused by policy or by a rule of the gateway; Reason says which
	Failed  Verdict = "failed"  // allowed, but the destination could not be reached
	// Injected: allowed, TLS terminated and a credential put into the requests.
	Injected Verdict = "injected"
)

// Reasons of the gateway's own refusals, beside the policy's (Decision.Reason).
const (
	ReasonFronting      = "name does not match destination" // SNI or Host not a name the address came from
	ReasonConnect       = "connect method"                  // an HTTP CONNECT request
	ReasonRebinding     = "answer in hard deny list"        // a DNS answer's address dropped
	ReasonQueryRate     = "query rate"                      // over the resolver's rate bound
	ReasonNameLength    = "name too long"                   // over the resolver's name bound
	ReasonQueryType     = "query type"                      // not A or AAAA: answered empty, not forwarded
	ReasonMalformed     = "malformed"                       // not a query, or a hello or request cut short
	ReasonTooMany       = "too many connections"            // over the gateway's connection bound
	ReasonNotRedirected = "not redirected"                  // a connection made to the gateway itself
	ReasonPlaceholder   = "placeholder"                     // a credential's placeholder where it is not injected
	ReasonUpgrade       = "upgrade"                         // a plain HTTP upgrade (ws://, h2c)
	ReasonLateHello     = "late hello"                      // a TLS hello for a brokered host after the peek
	ReasonBudget        = "budget exceeded"                 // the user's egress budget is spent (Meter)
	ReasonHeadTooLarge  = "request head too large"          // an HTTP request head past maxPeek
	ReasonTrace         = "trace method"                    // TRACE or TRACK to a brokered host (echoes the secret)
)

// Record is one decision of the gateway: who (sandbox, user), what (kind, the name asked for, the
// destination), the verdict and its reason, and for a connection its bytes and duration.
type Record struct {
	Time      time.Time      `json:"time"`
	Sandbox   string         `json:"sandbox"`
	User      string         `json:"user"`
	Kind      Kind           `json:"kind"`
	Name      string         `json:"name,omitempty"`
	Dest      netip.AddrPort `json:"dest,omitzero"`
	Verdict   Verdict        `json:"verdict"`
	Reason    string         `json:"reason,omitempty"`
	BytesUp   int64          `json:"bytesUp,omitempty"`
	BytesDown int64          `json:"bytesDown,omitempty"`
	Duration  time.Duration  `json:"duration,omitempty"`
}

// Sink receives the gateway's records. Record is called from many goroutines at once and must not block
// for long (buffer, or drop and count); the gateway never waits for a record to be stored.
type Sink interface {
	Record(Record)
}

// Metrics are the gateway's counters, shared by every gateway of a runner.
type Metrics struct {
	decisions *prometheus.CounterVec
	bytes     *prometheus.CounterVec
}

// NewMetrics makes the counters and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_egress_decisions_total",
			Help: "Egress gateway decisions, by kind (dns, tcp), verdict (allowed, injected, refused, failed) and reason.",
		}, []string{"kind", "verdict", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_egress_bytes_total",
			Help: "Bytes relayed by the egress gateway, by direction (up: from the sandbox, down: to it).",
		}, []string{"direction"}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.bytes)
	}
	return m
}

func (m *Metrics) count(r Record) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(string(r.Kind), string(r.Verdict), r.Reason).Inc()
	if r.BytesUp > 0 {
		m.bytes.WithLabelValues("up").Add(float64(r.BytesUp))
	}
	if r.BytesDown > 0 {
		m.bytes.WithLabelValues("down").Add(float64(r.BytesDown))
	}
}
