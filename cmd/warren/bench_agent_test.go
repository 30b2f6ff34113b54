package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
)

// TestBenchFirstEvents runs `warren bench -first-events` once, with the real CLI and the scripted model:
// the three first-event lines side by side, then the user's memory with a client and after the release,
// which holds no agent process.
func TestBenchFirstEvents(t *testing.T) {
	testenv.ClaudeCLI(t)
	// The bench starts runners from its own executable: the warren binary, not this test's.
	binary := filepath.Join(t.TempDir(), "warren")
	if b, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		t.Fatalf("build warren: %v\n%s", err, b)
	}
	var out bytes.Buffer
	cmd := exec.Command(binary, "bench", "-users", "3", "-execs", "1", "-first-events", "2", "-agent-idle", "200ms")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"first agent event: session open 1s", "first agent event: prompt with the init",
		"floor: the CLI alone, spawn → first line", "user PSS, a client attached (agent started)",
		"idle user PSS after the agent's release",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the output:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), ", 0 of them the agent's") {
		t.Errorf("no agent process while a client is attached:\n%s", out.String())
	}
}
