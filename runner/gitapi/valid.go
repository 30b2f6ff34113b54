package gitapi

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/text"
)

// Validators of what a client hands the git routes, and parsers of git's machine output (which names files
// and authors the tenant chose). Each is fuzzed (git_fuzz_test.go).

const (
	maxRevLen      = 256
	maxCloneURLLen = 2048
	maxIdentLen    = 256
	maxSecretLen   = 4096
)

// validRev accepts a revision a client names (a branch, tag, commit id, HEAD, optionally with ~N or ^
// suffixes): 1..256 bytes of [A-Za-z0-9._/~^-], not starting with "-" (an option) and without "..",
// "//", a leading or trailing "/" or "." element, or ".lock" at the end. Everything else (ranges, reflog
// and path syntax, spaces, control characters) is refused.
func validRev(s string) error {
	bad := func(why string) error {
		return wire.Errorf(wire.InvalidArgument, "revision %q: %s", trimForMsg(s), why)
	}
	switch {
	case s == "":
		return bad("is empty")
	case len(s) > maxRevLen:
		return bad("is longer than 256 bytes")
	case s[0] == '-':
		return bad("must not start with -")
	case strings.Contains(s, ".."), strings.Contains(s, "//"), strings.Contains(s, "/."):
		return bad("must not contain .., // or /.")
	case s[0] == '/' || s[0] == '.' || s[len(s)-1] == '/' || s[len(s)-1] == '.':
		return bad("must not start or end with / or .")
	case strings.HasSuffix(s, ".lock"):
		return bad("must not end with .lock")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._/~^-", c) >= 0) {
			return bad("may only contain letters, digits and . _ / ~ ^ -")
		}
	}
	return nil
}

// validBranch accepts a branch name: a revision without ~ or ^, and not HEAD.
func validBranch(s string) error {
	if err := validRev(s); err != nil {
		return err
	}
	if strings.ContainsAny(s, "~^") || s == "HEAD" {
		return wire.Errorf(wire.InvalidArgument, "branch name %q: must not contain ~ or ^ or be HEAD", s)
	}
	return nil
}

// validCloneURL accepts an https://, http:// or git:// URL with a host and no credentials (they go in the
// request's credential, never in a URL git would keep in .git/config), at most 2 KiB, without spaces or
// control characters. Transports like ext:: and file://, local paths, scp-like host:path (ssh) and
// anything starting with "-" are refused.
func validCloneURL(s string) error {
	bad := func(why string) error { return wire.Errorf(wire.InvalidArgument, "clone url: %s", why) }
	if s == "" {
		return bad("is required")
	}
	if len(s) > maxCloneURLLen {
		return bad("is longer than 2048 bytes")
	}
	if !utf8.ValidString(s) {
		return bad("is not valid UTF-8")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '\\' {
			return bad("must not contain spaces, control characters or backslashes")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("is not a URL")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "git":
		return bad("only https://, http:// and git:// URLs are allowed")
	case !strings.HasPrefix(s, u.Scheme+"://"):
		return bad("must start with https://, http:// or git:// (lower case)")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return bad("must name a host (scheme://host/path)")
	case u.User != nil:
		return bad("must not contain credentials: pass them as the request's credential")
	case strings.HasPrefix(u.Hostname(), "-"):
		return bad("host must not start with -")
	}
	return nil
}

// validCredential checks a clone's credential: a password (or token) of at most 4 KiB and a username of at
// most 256 bytes without ":" , neither with control characters.
func validCredential(c wire.GitCredential) error {
	bad := func(why string) error { return wire.Errorf(wire.InvalidArgument, "credential: %s", why) }
	switch {
	case c.Password == "":
		return bad("password is required")
	case len(c.Password) > maxSecretLen || len(c.Username) > maxIdentLen:
		return bad("too long")
	case strings.Contains(c.Username, ":"):
		return bad("username must not contain :")
	case hasControl(c.Password) || hasControl(c.Username):
		return bad("must not contain control characters")
	}
	return nil
}

// validIdent checks an author name or email: 1..256 bytes of UTF-8 without control characters, < or >.
func validIdent(field, s string) error {
	switch {
	case s == "" || len(s) > maxIdentLen:
		return wire.Errorf(wire.InvalidArgument, "%s must be 1 to 256 bytes", field)
	case !utf8.ValidString(s) || hasControl(s) || strings.ContainsAny(s, "<>"):
		return wire.Errorf(wire.InvalidArgument, "%s must be UTF-8 without control characters, < or >", field)
	}
	return nil
}

// identPart makes a token's user or issuer usable in an author ident: control characters, <, > and
// spaces become _.
func identPart(s string) string {
	s = strings.ToValidUTF8(s, "_")
	s = strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f || r == '<' || r == '>' {
			return '_'
		}
		return r
	}, s)
	if len(s) > 100 {
		s = text.Truncate(s, 100)
	}
	if s == "" {
		s = "_"
	}
	return s
}

// validCommitMessage: non-blank UTF-8 of at most 64 KiB without NUL.
func validCommitMessage(m string) error {
	switch {
	case strings.TrimSpace(m) == "":
		return wire.Errorf(wire.InvalidArgument, "message is required")
	case len(m) > maxCommitMsg:
		return wire.Errorf(wire.InvalidArgument, "message is longer than %d bytes", maxCommitMsg)
	case !utf8.ValidString(m) || strings.IndexByte(m, 0) >= 0:
		return wire.Errorf(wire.InvalidArgument, "message must be UTF-8 without NUL")
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

func trimForMsg(s string) string {
	if len(s) > 64 {
		return text.Truncate(s, 64) + "…"
	}
	return s
}

// parseGitStatus parses `git status --porcelain=v2 --branch -z`: headers "# branch.*" and entries "1 ...",
// "2 ..." (followed by the old path), "u ...", "? path", "! path", each NUL-terminated. At most maxEntries
// entries are kept (0: none); the rest set Truncated. Malformed input is an internal error.
func parseGitStatus(out []byte, maxEntries int) (wire.GitStatus, error) {
	st := wire.GitStatus{Entries: []wire.GitStatusEntry{}}
	bad := func(what string) (wire.GitStatus, error) {
		return wire.GitStatus{}, wire.Errorf(wire.Internal, "unexpected git status output: %s", what)
	}
	recs := bytes.Split(out, []byte{0})
	if len(recs) > 0 && len(recs[len(recs)-1]) == 0 {
		recs = recs[:len(recs)-1]
	}
	add := func(e wire.GitStatusEntry) {
		if len(st.Entries) >= maxEntries {
			st.Truncated = true
			return
		}
		st.Entries = append(st.Entries, e)
	}
	for i := 0; i < len(recs); i++ {
		r := string(recs[i])
		if len(r) < 2 || r[1] != ' ' {
			return bad("short record")
		}
		switch r[0] {
		case '#':
			k, v, _ := strings.Cut(r[2:], " ")
			switch k {
			case "branch.oid":
				if v != "(initial)" {
					st.Commit = v
				}
			case "branch.head":
				if v != "(detached)" {
					st.Branch = v
				}
			case "branch.upstream":
				st.Upstream = v
			case "branch.ab":
				a, b, ok := strings.Cut(v, " ")
				ahead, err1 := strconv.Atoi(strings.TrimPrefix(a, "+"))
				behind, err2 := strconv.Atoi(strings.TrimPrefix(b, "-"))
				if !ok || err1 != nil || err2 != nil {
					return bad("branch.ab")
				}
				st.Ahead, st.Behind = ahead, behind
			}
		case '1', '2', 'u':
			n := map[byte]int{'1': 9, '2': 10, 'u': 11}[r[0]]
			f := strings.SplitN(r, " ", n)
			if len(f) != n || len(f[1]) != 2 {
				return bad("entry fields")
			}
			e := wire.GitStatusEntry{Index: f[1][:1], Worktree: f[1][1:], Path: f[n-1]}
			if r[0] == '2' {
				if i+1 >= len(recs) {
					return bad("rename without its old path")
				}
				i++
				e.From = string(recs[i])
			}
			add(e)
		case '?', '!':
			add(wire.GitStatusEntry{Index: r[:1], Worktree: r[:1], Path: r[2:]})
		default:
			return bad("unknown record")
		}
	}
	st.Clean = len(st.Entries) == 0 && !st.Truncated
	return st, nil
}

// gitLogFormat is the format of `git log -z`: six NUL-separated fields per commit (git separates commits
// with another NUL).
const gitLogFormat = "%H%x00%P%x00%an%x00%ae%x00%at%x00%s"

// parseGitLog parses `git log -z --format=gitLogFormat`. Malformed input (a field count off, a commit id
// that is not hex, a time that is not a number) is an internal error. With partial (the output was cut
// at the cap) an incomplete last commit is dropped.
func parseGitLog(out []byte, partial bool) ([]wire.GitLogEntry, error) {
	commits := []wire.GitLogEntry{}
	if len(out) == 0 {
		return commits, nil
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if partial {
		f = f[:len(f)-len(f)%6]
	}
	if len(f)%6 != 0 {
		return nil, wire.Errorf(wire.Internal, "unexpected git log output: %d fields", len(f))
	}
	for i := 0; i < len(f); i += 6 {
		t, err := strconv.ParseInt(f[i+4], 10, 64)
		if !isHexID(f[i]) || err != nil {
			return nil, wire.Errorf(wire.Internal, "unexpected git log output: commit %q", trimForMsg(f[i]))
		}
		e := wire.GitLogEntry{Commit: f[i], AuthorName: f[i+2], AuthorEmail: f[i+3], Time: t, Subject: f[i+5]}
		if f[i+1] != "" {
			e.Parents = strings.Split(f[i+1], " ")
			for _, p := range e.Parents {
				if !isHexID(p) {
					return nil, wire.Errorf(wire.Internal, "unexpected git log output: parent %q", trimForMsg(p))
				}
			}
		}
		commits = append(commits, e)
	}
	return commits, nil
}

// isHexID reports whether s is a full SHA-1 or SHA-256 object id in lower-case hex.
func isHexID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}
