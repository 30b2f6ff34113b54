// Package modelserver is a scripted server that speaks the Anthropic Messages API. Tests drive the real
// Claude Code CLI against it, and `warren dev` uses it when no ANTHROPIC_API_KEY is set: the model API is
// the one process boundary the project cannot reach, so this is the one fake it keeps.
//
// A request picks a scenario with the X-Warren-Scenario header (the CLI sends it through
// ANTHROPIC_CUSTOM_HEADERS). Scenarios are stateless: the step to play is read from the request's own
// messages, so retries, restarts and multi-turn conversations replay deterministically. README.md records
// what the CLI sends and how it reacts to errors.
package modelserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
)

// HeaderScenario selects a scenario per request; the CLI sends it with
// ANTHROPIC_CUSTOM_HEADERS="X-Warren-Scenario: write".
const HeaderScenario = "X-Warren-Scenario"

// DefaultDelay is the pause between the SSE events of the "long" scenario when Options.Delay is zero.
const DefaultDelay = 50 * time.Millisecond

// Options configures a Server. The zero value is usable.
type Options struct {
	// DefaultScenario answers requests without the HeaderScenario header; "auto" when empty.
	DefaultScenario string
	// Logger receives one line per request; nothing is logged when nil.
	Logger *slog.Logger
	// Delay separates the SSE events of the "long" scenario; DefaultDelay when zero.
	Delay time.Duration
}

// Request is one request the server received, as recorded for tests.
type Request struct {
	Time      time.Time
	Path      string // "/v1/messages" or "/v1/messages/count_tokens"
	Scenario  string // the scenario that answered (header or default)
	Model     string
	Stream    bool
	MaxTokens int
	Header    http.Header
	Body      json.RawMessage   // the whole body; nil when it was not valid JSON
	Messages  []json.RawMessage // the body's messages, as sent
	System    json.RawMessage   // the body's system prompt: a string or blocks
	Tools     []string          // names of the tools offered
	// Main reports whether the request belongs to the agent loop and so was answered from the scenario.
	// Heuristic: a POST to /v1/messages that offers at least one tool and allows more than 1 output token.
	// The CLI's side requests (title or topic detection with a small model and no tools, quota or warm-up
	// probes with max_tokens 1) get a short plain answer instead and never consume a Fault.
	Main bool
}

// Fault makes upcoming main requests fail. Faults queue in the order injected.
type Fault struct {
	// Status answers with an Anthropic error JSON with this HTTP status (429, 500, 529, 400 ...); 500 when
	// zero and Drop is false.
	Status int
	// Type overrides the error type of the body; by default it follows Status (429 rate_limit_error,
	// 529 overloaded_error, 400 invalid_request_error, other 5xx api_error ...).
	Type string
	// Message overrides the error message.
	Message string
	// Header is added to the error response (e.g. "retry-after", "x-should-retry").
	Header http.Header
	// Drop starts the stream (message_start and a first delta) and then cuts the connection. A
	// non-streaming request is cut before any answer.
	Drop bool
	// Count is how many upcoming main requests the fault applies to; 1 when zero.
	Count int
}

// Server is the scripted model server. Its methods are safe for concurrent use.
type Server struct {
	defaultScenario string
	log             *slog.Logger
	delay           time.Duration
	handler         http.Handler
	nextID          atomic.Uint64

	mu       sync.Mutex
	requests []Request
	faults   []Fault

	srvMu     sync.Mutex
	srv       *http.Server
	handlers  sync.WaitGroup // requests in flight on srv
	url       string
	serveDone chan struct{}
	serveErr  error
	closed    bool
}

// New returns a Server; Start it or mount Handler.
func New(opts Options) *Server {
	s := &Server{
		defaultScenario: opts.DefaultScenario,
		log:             opts.Logger,
		delay:           opts.Delay,
	}
	if s.defaultScenario == "" {
		s.defaultScenario = "auto"
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.delay <= 0 {
		s.delay = DefaultDelay
	}
	s.handler = s.routes()
	return s
}

// Handler serves the Messages API.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background until Close. It returns the
// base URL, like "http://127.0.0.1:PORT", for ANTHROPIC_BASE_URL.
func (s *Server) Start(addr string) (string, error) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if s.srv != nil {
		return "", ErrStarted
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	s.srv = httpx.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		s.handler.ServeHTTP(w, r)
	}), httpx.Config{Logger: s.log})
	s.url = "http://" + ln.Addr().String()
	s.serveDone = make(chan struct{})
	go func() {
		defer close(s.serveDone)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = fmt.Errorf("serve %s: %w", s.url, err)
		}
	}()
	s.log.Info("model server listening", "url", s.url, "scenario", s.defaultScenario)
	return s.url, nil
}

// URL is the base URL Start returned ("" before Start).
func (s *Server) URL() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.url
}

// Close stops a started server and waits for its handlers. Open connections are cut at once, streams
// included: a test that closes the server is done with it. Close is idempotent.
func (s *Server) Close() error {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.serveDone
	s.handlers.Wait()
	if err != nil {
		return fmt.Errorf("close model server: %w", err)
	}
	return s.serveErr
}

// Requests returns a copy of every request to /v1/messages and /v1/messages/count_tokens so far, in
// arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = r.clone()
	}
	return out
}

// LastMessage is the last entry of "messages" of the last main request (Request.Main), as sent (nil when
// there is none), and how many main requests were recorded: after a tool call, the tool_result the model
// was given.
func (s *Server) LastMessage() (json.RawMessage, int) {
	var last json.RawMessage
	n := 0
	for _, r := range s.Requests() {
		if r.Main {
			n++
			last = nil
			if len(r.Messages) > 0 {
				last = r.Messages[len(r.Messages)-1]
			}
		}
	}
	return last, n
}

// Reset forgets the recorded requests and the pending faults.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
	s.faults = nil
}

// Inject queues a fault for the next f.Count main requests.
func (s *Server) Inject(f Fault) {
	if f.Count <= 0 {
		f.Count = 1
	}
	if f.Status == 0 && !f.Drop {
		f.Status = http.StatusInternalServerError
	}
	f.Header = f.Header.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// takeFault consumes one use of the oldest pending fault.
func (s *Server) takeFault() (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}, false
	}
	f := s.faults[0]
	s.faults[0].Count--
	if s.faults[0].Count <= 0 {
		s.faults = s.faults[1:]
	}
	return f, true
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

func (r Request) clone() Request {
	c := r
	c.Header = r.Header.Clone()
	c.Body = cloneRaw(r.Body)
	c.System = cloneRaw(r.System)
	if r.Messages != nil {
		c.Messages = make([]json.RawMessage, len(r.Messages))
		for i, m := range r.Messages {
			c.Messages[i] = cloneRaw(m)
		}
	}
	if r.Tools != nil {
		c.Tools = append([]string(nil), r.Tools...)
	}
	return c
}

func cloneRaw(m json.RawMessage) json.RawMessage {
	if m == nil {
		return nil
	}
	return append(json.RawMessage(nil), m...)
}
