package claude

import (
	"os"
	"path/filepath"
	"testing"
)

// The agent's home is the tenant's: a .claude (or a transcript) that is a symlink to a file or directory of
// the host is not a transcript the runner finds, resumes or reads (resumeSessionAt would otherwise say
// whether any host file the runner can read holds "uuid":"X").
func TestTranscriptsStayInTheHome(t *testing.T) {
	const id, msg = "0b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f", "1b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f"
	home, other := t.TempDir(), t.TempDir()
	victim := filepath.Join(other, ".claude", "projects", "-workspace", id+".jsonl")
	if err := os.MkdirAll(filepath.Dir(victim), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte(`{"uuid":"`+msg+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(other, ".claude"), filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	if p := transcriptPath(home, id); p != "" {
		t.Fatalf("found %s through a .claude symlink", p)
	}
	if got := latestTranscript(home, ""); got != "" {
		t.Fatalf("latest transcript %s through a .claude symlink", got)
	}
	// A transcript that is itself a symlink to the host file.
	if err := os.Remove(filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, ".claude", "projects", "-workspace", id+".jsonl")
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if p := transcriptPath(home, id); p != "" {
		t.Fatalf("found the symlink %s", p)
	}
	if transcriptHas(link, msg) {
		t.Fatal("read the host file through the symlink")
	}
	// The real thing still works.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link, []byte(`{"uuid":"`+msg+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p := transcriptPath(home, id); p != link || !transcriptHas(p, msg) || latestTranscript(home, "") != id {
		t.Fatalf("transcript %q", p)
	}
}
