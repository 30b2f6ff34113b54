package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
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
