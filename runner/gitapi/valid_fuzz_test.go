package gitapi

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
)

// FuzzGitRev: an accepted revision or branch name can never be taken for an option, a range, a path or
// reflog syntax, and holds only the documented characters; refusals are invalid_argument.
func FuzzGitRev(f *testing.F) {
	for _, s := range []string{"HEAD", "main", "feature/x", "HEAD~2^", "v1.0", "-p", "--output=x", "a..b", "HEAD@{1}",
		"HEAD:f", "x.lock", "/x", "x/", ".x", "a//b", "a/.b", "a b", "\x00", "é", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := validRev(s)
		berr := validBranch(s)
		if err != nil {
			if wire.CodeOf(err) != wire.InvalidArgument || berr == nil {
				t.Fatalf("validRev(%q) = %v, validBranch = %v", s, err, berr)
			}
			return
		}
		if s == "" || s[0] == '-' || len(s) > maxRevLen || strings.Contains(s, "..") || strings.ContainsAny(s, " :@{}\\*?[\x00\n") {
			t.Fatalf("validRev accepted %q", s)
		}
		if berr == nil && (strings.ContainsAny(s, "~^") || s == "HEAD") {
			t.Fatalf("validBranch accepted %q", s)
		}
	})
}

// FuzzGitCloneURL: an accepted URL is https, http or git with a host, no credentials, no whitespace or
// control characters, and cannot be taken for an option or a local path.
func FuzzGitCloneURL(f *testing.F) {
	for _, s := range []string{"https://example.com/r.git", "http://127.0.0.1:8080/r", "git://h/r", "ext::sh -c x",
		"file:///etc", "/etc", "-uhttps://x", "https://u:p@h/r", "ssh://h/r", "h:r", "https:///r", "https://-x/r",
		"HTTPS://H/R", "https:h/r", "fd::3", "https://h/\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := validCloneURL(s)
		if err != nil {
			if wire.CodeOf(err) != wire.InvalidArgument {
				t.Fatalf("validCloneURL(%q) = %v", s, err)
			}
			return
		}
		if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "git://") {
			t.Fatalf("accepted %q", s)
		}
		if !utf8.ValidString(s) || strings.ContainsAny(s, " \t\r\n\x00\\") || strings.Contains(s, "::") && !strings.Contains(s, "://") {
			t.Fatalf("accepted %q", s)
		}
		u, perr := url.Parse(s)
		if perr != nil || u.User != nil || u.Host == "" || strings.HasPrefix(u.Hostname(), "-") {
			t.Fatalf("accepted %q (%+v, %v)", s, u, perr)
		}
	})
}

// FuzzGitIdent: accepted author names and emails cannot break git's "Name <email>" ident, and identPart
// always yields one that is accepted.
func FuzzGitIdent(f *testing.F) {
	for _, s := range []string{"Ada", "ada@example.com", "a<b", "a\nb", "", "\xff", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := validIdent("n", s); err == nil && (strings.ContainsAny(s, "<>\n\x00") || !utf8.ValidString(s) || s == "") {
			t.Fatalf("validIdent accepted %q", s)
		}
		if p := identPart(s); validIdent("n", p) != nil || strings.ContainsAny(p, " <>") {
			t.Fatalf("identPart(%q) = %q is not a valid ident", s, p)
		}
		if err := validCredential(wire.GitCredential{Username: s, Password: s}); err == nil && strings.ContainsAny(s, "\r\n\x00:") {
			t.Fatalf("validCredential accepted %q", s)
		}
	})
}

// FuzzGitStatus: parsing git status output (whose paths the tenant chose) never panics; what it returns
// is bounded by the entry cap and consistent (clean only without entries).
func FuzzGitStatus(f *testing.F) {
	for _, s := range []string{
		"# branch.oid 80f797be08e526fe51dba0afd1ad21ec846c69e2\x00# branch.head main\x00# branch.ab +1 -2\x00",
		"1 .M N... 100644 100644 100644 abc abc a.txt\x00? new file\x00",
		"2 R. N... 100644 100644 100644 abc abc R100 new\x00old\x00",
		"u UU N... 100644 100644 100644 100644 a b c conflict\x00! ignored\x00",
		"2 R. N... 100644 100644 100644 abc abc R100 new\x00", "1 x", "# branch.ab 1", "z z\x00", "",
	} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		max = max % 100
		if max < 0 {
			max = -max
		}
		st, err := parseGitStatus(b, max)
		if err != nil {
			if wire.CodeOf(err) != wire.Internal {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(st.Entries) > max || st.Clean != (len(st.Entries) == 0 && !st.Truncated) {
			t.Fatalf("status %+v for max %d", st, max)
		}
	})
}

// FuzzGitLog: parsing git log output never panics; every commit it returns has hex ids.
func FuzzGitLog(f *testing.F) {
	h := strings.Repeat("a", 40)
	for _, s := range []string{
		h + "\x00\x00Ada\x00ada@x\x001700000000\x00first",
		h + "\x00" + h + " " + h + "\x00A\x00a\x001\x00s\x00" + h + "\x00\x00B\x00b\x002\x00t",
		"x\x00\x00a\x00b\x00c\x00d", "", "\x00\x00\x00\x00\x00",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, partial bool) {
		commits, err := parseGitLog(b, partial)
		if err != nil {
			if wire.CodeOf(err) != wire.Internal {
				t.Fatalf("error %v", err)
			}
			return
		}
		for _, c := range commits {
			if !isHexID(c.Commit) {
				t.Fatalf("commit %q", c.Commit)
			}
			for _, p := range c.Parents {
				if !isHexID(p) {
					t.Fatalf("parent %q", p)
				}
			}
		}
	})
}
