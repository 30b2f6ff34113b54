package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ShoutMCPScript (python3) is a minimal MCP server over stdio (newline-delimited JSON-RPC): one tool, shout, that
// answers its text argument upper-cased with "!" appended, tagged so tests can tell it reached the model.
const ShoutMCPScript = `import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, res = msg.get("method"), None
    if method == "initialize":
        res = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
               "serverInfo": {"name": "shout", "version": "1.0.0"}}
    elif method == "tools/list":
        res = {"tools": [{"name": "shout", "description": "Shouts the text back",
                          "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}
    elif method == "tools/call":
        text = msg["params"].get("arguments", {}).get("text", "")
        res = {"content": [{"type": "text", "text": "stdio-mcp:" + text.upper() + "!"}]}
    out = {"jsonrpc": "2.0", "id": msg["id"]}
    if res is None:
        out["error"] = {"code": -32601, "message": "method not found"}
    else:
        out["result"] = res
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
`

// ShoutMCPServer writes a stdio MCP server script (run with python3) into dir and returns its file name.
// Its one tool, shout, answers {"text": T} with "stdio-mcp:" + upper(T) + "!". The test fails when
// python3 is missing from /usr/bin (the sandbox sees only the system's directories).
func ShoutMCPServer(t testing.TB, dir string) string {
	t.Helper()
	NeedPython3(t)
	if err := os.WriteFile(filepath.Join(dir, "shout_mcp.py"), []byte(ShoutMCPScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return "shout_mcp.py"
}

// NeedPython3 fails the test when /usr/bin/python3, which runs ShoutMCPScript in a sandbox, is missing.
func NeedPython3(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Fatalf("python3 is needed in /usr/bin for the stdio MCP server: apt-get install python3: %v", err)
	}
}

// HTTPMCPServer is a minimal MCP server over streamable HTTP on loopback (POST /mcp answers JSON-RPC with
// JSON; GET and DELETE are 405, so the client keeps no stream) with the same shout tool as ShoutMCPScript,
// tagged "http-mcp:". Auths lists the Authorization header of every request it got.
type HTTPMCPServer struct {
	URL string // the endpoint, http://127.0.0.1:PORT/mcp

	mu    sync.Mutex
	auths []string
}

// Auths is the Authorization header of each request received, in order.
func (s *HTTPMCPServer) Auths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auths...)
}

// StartHTTPMCPServer starts an HTTPMCPServer until the test ends.
func StartHTTPMCPServer(t testing.TB) *HTTPMCPServer {
	t.Helper()
	s := &HTTPMCPServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if r.URL.Path != "/mcp" || r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Arguments       struct {
					Text string `json:"text"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&msg); err != nil {
			http.Error(w, "bad JSON-RPC", http.StatusBadRequest)
			return
		}
		if len(msg.ID) == 0 {
			w.WriteHeader(http.StatusAccepted) // a notification
			return
		}
		out := map[string]any{"jsonrpc": "2.0", "id": msg.ID}
		switch msg.Method {
		case "initialize":
			out["result"] = map[string]any{"protocolVersion": msg.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "shout-http", "version": "1.0.0"}}
		case "tools/list":
			out["result"] = map[string]any{"tools": []any{map[string]any{"name": "shout", "description": "Shouts the text back",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}}}
		case "tools/call":
			out["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": "http-mcp:" + strings.ToUpper(msg.Params.Arguments.Text) + "!"}}}
		default:
			out["error"] = map[string]any{"code": -32601, "message": "method not found"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/mcp"
	return s
}
