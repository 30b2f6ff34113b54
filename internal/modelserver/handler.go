package modelserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxBodyBytes bounds a request body; the real API's limit is 32 MB.
const maxBodyBytes = 32 << 20

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	// The CLI checks connectivity with HEAD /api/hello at start-up unless
	// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC is set.
	mux.HandleFunc("GET /api/hello", s.handleHello)
	mux.HandleFunc("/", s.handleUnknown)
	return mux
}

func (s *Server) handleHello(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"message": "hello"}, nil)
}

// handleUnknown answers paths the server does not script with the API's 404 JSON.
func (s *Server) handleUnknown(w http.ResponseWriter, r *http.Request) {
	s.log.Warn("unscripted path", "method", r.Method, "path", r.URL.Path)
	writeError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.Method+" "+r.URL.Path, nil)
}

// readRequest reads and records a request to path; ok is false when an error answer was written.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request) (rec Request, body messagesBody, ok bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	rec = Request{
		Time:     time.Now(),
		Path:     r.URL.Path,
		Scenario: s.scenarioOf(r),
		Header:   r.Header.Clone(),
	}
	var parseErr error
	if err == nil {
		body, parseErr = parseBody(data)
		if json.Valid(data) {
			rec.Body = data
		}
		rec.Model, rec.Stream, rec.MaxTokens = body.Model, body.Stream, body.MaxTokens
		rec.Messages, rec.System, rec.Tools = body.Messages, body.System, body.toolNames()
		rec.Main = r.URL.Path == "/v1/messages" && isMain(r.Header, body)
	}
	s.record(rec)

	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.", nil)
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "could not read the request body", nil)
	case r.Header.Get("X-Api-Key") == "" && r.Header.Get("Authorization") == "":
		writeError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required", nil)
	case parseErr != nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "The request body is not valid JSON: "+parseErr.Error(), nil)
	default:
		return rec, body, true
	}
	return rec, body, false
}

func (s *Server) scenarioOf(r *http.Request) string {
	if name := strings.TrimSpace(r.Header.Get(HeaderScenario)); name != "" {
		return name
	}
	return s.defaultScenario
}

// isMain tells the agent loop from the CLI's side requests. A request is a side request when it allows at
// most one output token (quota and warm-up probes), or when it comes from Claude Code (x-app: cli or a
// claude-cli user agent) without offering tools (titles, topic detection, summaries). Requests from other
// clients without tools, e.g. a test's own HTTP call, stay main so they get the scenario.
func isMain(h http.Header, b messagesBody) bool {
	if b.MaxTokens == 1 {
		return false
	}
	fromCLI := h.Get("X-App") == "cli" || strings.HasPrefix(h.Get("User-Agent"), "claude-cli/")
	return len(b.Tools) > 0 || !fromCLI
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	rec, body, ok := s.readRequest(w, r)
	if !ok {
		return
	}
	scenario, known := scenarios[rec.Scenario]
	if !known {
		s.log.Warn("unknown scenario", "scenario", rec.Scenario)
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("unknown %s %q: want one of %s", HeaderScenario, rec.Scenario, strings.Join(Scenarios(), ", ")), nil)
		return
	}
	conv := readConversation(body)
	rep := text(sideText)
	if rec.Main {
		rep = scenario(conv)
	}
	model := body.Model
	if model == "" {
		model = "claude-sonnet-4-5"
	}
	n := s.nextID.Add(1)
	msg := buildMessage(rep, conv.step, fmt.Sprintf("msg_warren_%06d", n), model, estimateTokens(rec.Body), nonce(rec.Body, n))
	w.Header().Set("Request-Id", fmt.Sprintf("req_warren_%06d", n))
	s.log.Info("messages", "scenario", rec.Scenario, "main", rec.Main, "step", conv.step, "model", model,
		"stream", body.Stream, "stop_reason", msg.StopReason, "tools", len(rec.Tools))

	var fault Fault
	var faulted bool
	if rec.Main {
		fault, faulted = s.takeFault()
	}
	switch {
	case faulted && fault.Drop:
		s.log.Info("fault: dropping the connection", "stream", body.Stream)
		if body.Stream {
			_ = newStream(w, 0).start(r.Context(), msg)
		}
		// net/http closes the connection without ending the response: the client sees a cut stream.
		panic(http.ErrAbortHandler)
	case faulted:
		typ := fault.Type
		if typ == "" {
			typ = errorType(fault.Status)
		}
		message := fault.Message
		if message == "" {
			message = "Injected fault: " + typ
		}
		s.log.Info("fault: error answer", "status", fault.Status, "type", typ)
		writeError(w, fault.Status, typ, message, fault.Header)
	case body.Stream:
		delay := time.Duration(0)
		if rep.slow {
			delay = s.delay
		}
		if err := newStream(w, delay).send(r.Context(), msg, rep.slow); err != nil {
			s.log.Info("stream ended early", "err", err)
		}
	default:
		writeJSON(w, http.StatusOK, msg, nil)
	}
}

func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	rec, _, ok := s.readRequest(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": estimateTokens(rec.Body)}, nil)
}

// estimateTokens is a deterministic stand-in for a tokenizer: a quarter of the body's bytes, at least 1.
func estimateTokens(body []byte) int {
	return max(1, len(body)/4)
}

// nonce makes tool use ids unique per request yet reproducible for the same body.
func nonce(body []byte, n uint64) string {
	sum := sha256.Sum256(body)
	if len(body) == 0 {
		sum = sha256.Sum256(fmt.Appendf(nil, "%d", n))
	}
	return hex.EncodeToString(sum[:8])
}

// apiMessage is the Messages API response object, also the message of message_start.
type apiMessage struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"`
	Role         string       `json:"role"`
	Model        string       `json:"model"`
	Content      []contentOut `json:"content"`
	StopReason   string       `json:"stop_reason"`
	StopSequence *string      `json:"stop_sequence"`
	Usage        usage        `json:"usage"`
	inputJSON    [][]byte     // per content block, the tool input as sent in input_json_delta
}

type contentOut struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type usage struct {
	InputTokens              int    `json:"input_tokens"`
	CacheCreationInputTokens int    `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int    `json:"cache_read_input_tokens"`
	OutputTokens             int    `json:"output_tokens"`
	ServiceTier              string `json:"service_tier"`
}

func buildMessage(rep reply, step int, id, model string, inputTokens int, nonce string) apiMessage {
	m := apiMessage{
		ID: id, Type: "message", Role: "assistant", Model: model,
		StopReason: rep.stopReason(),
		Usage:      usage{InputTokens: inputTokens, ServiceTier: "standard"},
	}
	size := 0
	for i, b := range rep.blocks {
		if b.name == "" {
			t := b.text
			m.Content = append(m.Content, contentOut{Type: "text", Text: &t})
			m.inputJSON = append(m.inputJSON, nil)
			size += len(t)
			continue
		}
		in := marshalCompact(b.input)
		m.Content = append(m.Content, contentOut{Type: "tool_use", ID: toolID(step, i, nonce), Name: b.name, Input: in})
		m.inputJSON = append(m.inputJSON, in)
		size += len(b.name) + len(in)
	}
	m.Usage.OutputTokens = max(1, size/4)
	if rep.outputTokens > 0 {
		m.Usage.OutputTokens = rep.outputTokens
	}
	return m
}

// marshalCompact encodes v without HTML escaping, as the API does.
func marshalCompact(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("{}")
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func writeJSON(w http.ResponseWriter, status int, v any, extra http.Header) {
	for k, vs := range extra {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(marshalCompact(v))
}

// writeError answers with the API's error shape.
func writeError(w http.ResponseWriter, status int, typ, message string, extra http.Header) {
	body := map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": message},
	}
	if id := w.Header().Get("Request-Id"); id != "" {
		body["request_id"] = id
	}
	writeJSON(w, status, body, extra)
}

// errorType is the API's error type for an HTTP status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
