package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probeTimeout bounds the CLI's answer to the model probe.
const probeTimeout = 20 * time.Second

// modelTable resolves what a session names as its model ("" for the CLI's default, or an alias such as
// "sonnet") to the model the CLI actually calls, which is what its system/init event names. The CLI says
// so itself: its answer to an Agent SDK initialize request lists each model choice with its resolvedModel.
// The table is asked for once per driver, the first time a name needs it; full model names pass through.
type modelTable struct {
	once     sync.Once
	done     chan struct{}
	resolved map[string]string // written before done is closed
}

// resolve returns the model the CLI uses for name, waiting for the probe until ctx ends; when the CLI
// cannot tell, name itself ("default" for "").
func (t *modelTable) resolve(ctx context.Context, d *Driver, name string) string {
	key := name
	if key == "" {
		key = "default"
	}
	if strings.HasPrefix(key, "claude-") {
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
			if json.Unmarshal(line, &resp) != nil || resp.Type != "control_response" || resp.Response.RequestID != "warren-models" {
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
