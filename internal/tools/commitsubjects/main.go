// Command commitsubjects checks the messages of the commits since a base commit (make lint): a subject
// "area: summary" of at most 72 characters, and a blank line between it and the body, so that
// `git log --oneline` stays readable. History before the base stays as it is.
//
//	go run ./internal/tools/commitsubjects d9eac01
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxSubject is the longest subject allowed, in characters.
const MaxSubject = 72

// area is one or more areas (a package path, a file, a document; several joined by ", ") and a colon.
var area = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9/_.+-]*(, [A-Za-z0-9][A-Za-z0-9/_.+-]*)*: \S`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: commitsubjects BASE")
		os.Exit(2)
	}
	base := os.Args[1]
	rng := base + "..HEAD"
	if err := exec.Command("git", "cat-file", "-e", base+"^{commit}").Run(); err != nil {
		// A shallow clone (CI's, say) cut after the base holds only commits made since: check them all.
		shallow, _ := exec.Command("git", "rev-parse", "--is-shallow-repository").Output()
		if strings.TrimSpace(string(shallow)) != "true" {
			fmt.Fprintf(os.Stderr, "commitsubjects: commit %s is not in this history\n", base)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "commitsubjects: a shallow clone without %s: checking the commits it holds\n", base)
		rng = "HEAD"
	}
	out, err := exec.Command("git", "log", "--no-merges", "--format=%h%x00%B%x00", rng).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "commitsubjects: git log:", err)
		os.Exit(2)
	}
	bad := 0
	fields := bytes.Split(out, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		hash := strings.TrimSpace(string(fields[i]))
		if err := check(string(fields[i+1])); err != nil {
			fmt.Printf("%s: %v\n", hash, err)
			bad++
		}
	}
	if bad > 0 {
		fmt.Printf("commitsubjects: %d commits since %s need their message reworded (git rebase -i, reword)\n", bad, base)
		os.Exit(1)
	}
}

// check returns why msg, a commit message, is not "area: summary" of at most MaxSubject characters,
// followed by nothing or a blank line and the body.
func check(msg string) error {
	subject, body, _ := strings.Cut(strings.TrimLeft(msg, "\n"), "\n")
	switch n := utf8.RuneCountInString(subject); {
	case n == 0:
		return errors.New("empty subject")
	case n > MaxSubject:
		return fmt.Errorf("subject of %d characters, at most %d: %q", n, MaxSubject, subject)
	case !area.MatchString(subject):
		return fmt.Errorf("subject %q is not \"area: summary\"", subject)
	case strings.TrimSpace(body) != "" && !strings.HasPrefix(body, "\n"):
		return fmt.Errorf("no blank line between the subject %q and the body", subject)
	}
	return nil
}
