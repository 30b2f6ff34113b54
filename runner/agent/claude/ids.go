package claude

import (
	"crypto/sha1"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// idNamespace is the UUID namespace of cliSessionID's name-based ids.
var idNamespace = [16]byte{0x6b, 0x1e, 0x0c, 0x52, 0x9f, 0x3a, 0x4d, 0x21, 0x8a, 0x57, 0x0e, 0x4c, 0x7d, 0x90, 0x33, 0x18}

// cliSessionID is the CLI's session id for a hub session id. The CLI requires UUIDs; the hub's own ids
// (session.NewID) are canonical lowercase UUIDs and are used as they are, so events, transcripts and the hub
// agree. Other client-chosen ids map to a name-based (version 5) UUID, stable across processes and runners.
func cliSessionID(id string) string {
	if isUUID(id) {
		return id
	}
	h := sha1.New()
	h.Write(idNamespace[:])
	h.Write([]byte(id))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// isUUID reports whether s is a canonical lowercase UUID (8-4-4-4-12 hex digits).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// transcriptPath finds the CLI's transcript of a session under home ($CLAUDE_CONFIG_DIR/projects/<cwd
// slug>/<id>.jsonl); "" when there is none. The home is the agent's, and so the tenant's: it is searched
// through an os.Root (a .claude, projects or slug symlink leading out of the home is not followed) and only
// a regular file, not a symlink, is a transcript.
func transcriptPath(home, cliID string) string {
	if ts := transcripts(home, cliID+".jsonl"); len(ts) > 0 {
		return filepath.Join(home, filepath.FromSlash(ts[0].rel))
	}
	return ""
}

// homeTranscript is a transcript file found under home.
type homeTranscript struct {
	rel string // slash path under home
	fi  fs.FileInfo
}

// transcripts lists the regular files matching .claude/projects/*/name (a glob) under home, through an
// os.Root.
func transcripts(home, name string) []homeTranscript {
	root, err := os.OpenRoot(home)
	if err != nil {
		return nil
	}
	defer root.Close()
	matches, _ := fs.Glob(root.FS(), ".claude/projects/*/"+name)
	var out []homeTranscript
	for _, m := range matches {
		if fi, err := root.Lstat(m); err == nil && fi.Mode().IsRegular() {
			out = append(out, homeTranscript{rel: m, fi: fi})
		}
	}
	return out
}

// latestTranscript is the session id of the most recently written transcript under home other than
// except; "" when there is none.
func latestTranscript(home, except string) string {
	var (
		best   string
		bestAt time.Time
	)
	for _, t := range transcripts(home, "*.jsonl") {
		id := strings.TrimSuffix(path.Base(t.rel), ".jsonl")
		if !isUUID(id) || id == except {
			continue
		}
		if best == "" || t.fi.ModTime().After(bestAt) {
			best, bestAt = id, t.fi.ModTime()
		}
	}
	return best
}
