package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/tools"
)

// probeTimeout bounds the CLI's answer to the model probe.
const probeTimeout = 20 * time.Second

// pinnedModels is what the pinned CLI (tools.ClaudeCodeVersion) answers to an Agent SDK initialize
// request: each model choice and the model it resolves to, with no setting or variable steering the
// model. TestPinnedModelsAreTheCLIs asks the installed CLI and compares, so a CLI bump that changes the
// answer fails until this table follows.
var pinnedModels = map[string]string{
	"default": "claude-opus-5-5",
	"opus":    "claude-opus-5-5",
	"fable":   "claude-fable-5-2",
	"sonnet":  "claude-sonnet-5-5",
	"haiku":   "claude-haiku-5-5",
}

// PinnedModel is the model the pinned CLI resolves name to when name is one of its aliases ("sonnet",
// "default", ...), by the table the driver uses (pinnedModels); any other name, a full model name
// included, is answered as is. It gives a token's permissions.model its meaning: an alias there allows the
// model it names here and nothing else, and the agent is told that full name, whichever CLI is installed.
func PinnedModel(name string) string {
	if m := pinnedModels[name]; m != "" {
		return m
	}
	return name
}

// maxPackageJSON bounds the package.json read to tell the CLI's version.
const maxPackageJSON = 1 << 20

// modelTable resolves what a session names as its model ("" for the CLI's default, or an alias such as
// "sonnet") to the model the CLI actually calls, which is what its system/init event names. For the pinned
// CLI the answer is known (pinnedModels), so no process starts before ready. Any other CLI says so itself:
// its answer to an Agent SDK initialize request lists each model choice with its resolvedModel, asked once
// per driver, the first time a name needs it. Full model names pass through.
type modelTable struct {
	once     sync.Once
	done     chan struct{}
	resolved map[string]string // written before done is closed, or at New (pinned)
	pinned   bool              // resolved is pinnedModels; no probe
}

// newModelTable knows the pinned CLI's answer when cliPath is that CLI and env steers no model (the
// model variables change the answer: ANTHROPIC_DEFAULT_SONNET_MODEL renames what sonnet resolves to).
func newModelTable(cliPath string, env map[string]string) (*modelTable, string) {
	v := cliVersion(cliPath)
	if v != tools.ClaudeCodeVersion || steersModel(env) {
		return &modelTable{}, v
	}
	return &modelTable{resolved: pinnedModels, pinned: true}, v
}

// steersModel reports whether env sets a variable that may change how the CLI resolves a model: those a
// client may not set (ANTHROPIC_*, CLAUDE_CODE_USE_*, ...) other than ANTHROPIC_CUSTOM_HEADERS.
func steersModel(env map[string]string) bool {
	for k := range env {
		if k == "ANTHROPIC_CUSTOM_HEADERS" {
			continue
		}
		if slices.Contains(clientRefused, k) || slices.ContainsFunc(clientRefusedPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			return true
		}
	}
	return false
}

// cliVersion is the version of the npm package the CLI binary at path comes from ("" when unknown): the
// package.json beside the binary (@anthropic-ai/claude-code-<platform>) or one directory up (the
// @anthropic-ai/claude-code package's bin/).
func cliVersion(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	for _, dir := range []string{filepath.Dir(real), filepath.Dir(filepath.Dir(real))} {
		f, err := os.Open(filepath.Join(dir, "package.json"))
		if err != nil {
			continue
		}
		var pkg struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		}
		err = json.NewDecoder(io.LimitReader(f, maxPackageJSON)).Decode(&pkg)
		f.Close()
		if err == nil && strings.HasPrefix(pkg.Name, "@anthropic-ai/claude-code") {
			return pkg.Version
		}
	}
	return ""
}

// resolve returns the model the CLI uses for name, waiting for the probe (of a CLI other than the pinned
// one) until ctx ends; when the CLI cannot tell, name itself ("default" for "").
func (t *modelTable) resolve(ctx context.Context, d *Driver, name string) string {
	key := name
	if key == "" {
		key = "default"
	}
	if strings.HasPrefix(key, "claude-") {
		return key
	}
	if t.pinned {
		if m := t.resolved[key]; m != "" {
			return m
		}
		return key
	}
	t.once.Do(func() {
		t.done = make(chan struct{})
		go func() {
			defer close(t.done)
			t.resolved = d.probeModels()
		}()
	})
	select {
	case <-t.done:
		if m := t.resolved[key]; m != "" {
			return m
		}
	case <-ctx.Done():
	}
	return key
}

// probeModels starts the CLI in the sandbox, as a session would but with no model endpoint and no
// transcript, asks it for its initialize answer and maps each model choice to its resolved model.
func (d *Driver) probeModels() map[string]string {
	ctx, cancel := context.WithTimeout(d.life, probeTimeout)
	defer cancel()
	args := []string{"-p", "--input-format=stream-json", "--output-format=stream-json", "--verbose",
		"--no-session-persistence", "--permission-mode=" + DefaultPermissionMode}
	// The probe never calls the model: an unroutable endpoint and a dummy key.
	p, err := startCLI(ctx, d.sb, d.spec(args, nil, "http://127.0.0.1:9", "warren-model-probe"), nil, d.log)
	if err != nil {
		d.log.Warn("cannot ask the agent for its models", "err", err)
		return nil
	}
	defer p.shutdown(0)
	if err := p.write([]byte(`{"type":"control_request","request_id":"warren-models","request":{"subtype":"initialize"}}`), writeTimeout); err != nil {
		d.log.Warn("cannot ask the agent for its models", "err", err)
		return nil
	}
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				d.log.Warn("the agent exited before naming its models", "reason", p.exitReason())
				return nil
			}
			var resp struct {
				Type     string `json:"type"`
				Response struct {
					RequestID string `json:"request_id"`
					Response  struct {
						Models []struct {
							Value         string `json:"value"`
							ResolvedModel string `json:"resolvedModel"`
						} `json:"models"`
					} `json:"response"`
				} `json:"response"`
			}
			if strictjson.Unmarshal(line, &resp, strictjson.AllowInvalidUTF8) != nil || resp.Type != "control_response" || resp.Response.RequestID != "warren-models" {
				continue
			}
			out := make(map[string]string)
			for _, m := range resp.Response.Response.Models {
				if m.Value != "" && m.ResolvedModel != "" {
					out[m.Value] = m.ResolvedModel
				}
			}
			d.log.Debug("agent models", "models", out)
			return out
		case <-ctx.Done():
			d.log.Warn("the agent did not name its models in time", "timeout", probeTimeout)
			return nil
		}
	}
}

// transcriptHas reports whether the transcript at path has an entry with this uuid. It reads the file in
// chunks: transcripts grow large.
func transcriptHas(path, uuid string) bool {
	if path == "" {
		return false
	}
	// Not through a symlink (transcriptPath found a regular file; one swapped in since is not followed).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	needle := []byte(`"uuid":"` + uuid + `"`)
	buf := make([]byte, 0, 1<<20+len(needle))
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, needle) {
			return true
		}
		if err != nil {
			return false
		}
		if keep := len(needle) - 1; len(buf) > keep {
			buf = buf[:copy(buf, buf[len(buf)-keep:])]
		}
	}
}
