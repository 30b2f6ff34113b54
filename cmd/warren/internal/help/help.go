// Package help prints warren's command help: a usage line and the flags, wrapped to Width columns, in
// place of the flag package's bare "Usage of NAME:" and its unwrapped descriptions.
package help

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Width is the most columns a line of help takes.
const Width = 100

// indent is where a flag's description starts, under its name.
const indent = "        "

// Set makes fs print head (the usage line, and any text after it; wrapped) and then its flags when it
// meets -h or a bad flag; output is where.
func Set(fs *flag.FlagSet, head string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, Wrap(strings.TrimRight(head, "\n"), ""))
		fmt.Fprintln(w, "\n\nflags:")
		PrintDefaults(w, fs)
	}
}

// PrintDefaults writes fs's flags as flag.PrintDefaults does, each description wrapped to Width.
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		if d := shownDefault(f, name); d != "" {
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(w, "%s\n%s\n", line, Wrap(usage, indent))
	})
}

// shownDefault is the default worth printing: nothing for the zero values.
func shownDefault(f *flag.Flag, typ string) string {
	switch f.DefValue {
	case "", "0", "false", "[]", "0s", "map[]":
		return ""
	}
	if typ == "string" || strings.ContainsAny(f.DefValue, " \t") {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// Wrap puts prefix before every line of text and keeps it within Width columns. Consecutive lines that
// start in column 0 are a paragraph, reflowed as one; an indented line that is too long breaks at spaces
// and continues under its description column (the text after its last run of two spaces, as in a table
// of commands) or else under its own indentation. A line that fits is kept as it is.
func Wrap(text, prefix string) string {
	var out, para []string
	flush := func() {
		if len(para) > 0 {
			out = append(out, wrapLine(prefix, strings.Join(para, " "), prefix)...)
			para = nil
		}
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case line != "" && line[0] != ' ':
			para = append(para, line)
		case cols(prefix+line) <= Width:
			flush()
			out = append(out, prefix+line)
		default:
			flush()
			body := strings.TrimLeft(line, " ")
			hang := len(line) - len(body)
			if i := strings.LastIndex(body, "  "); i >= 0 {
				hang += i + len(body[i:]) - len(strings.TrimLeft(body[i:], " "))
			}
			out = append(out, wrapLine(prefix+line[:hang], line[hang:], prefix+strings.Repeat(" ", hang))...)
		}
	}
	flush()
	return strings.Join(out, "\n")
}

// wrapLine breaks first+text at spaces into lines of at most Width columns (a longer word stays whole),
// the continuation lines starting with next.
func wrapLine(first, text, next string) []string {
	var out []string
	lead := first
	cur := lead
	for _, word := range strings.Fields(text) {
		if cur != lead && cols(cur)+1+cols(word) > Width {
			out = append(out, cur)
			lead = next
			cur = lead
		}
		if cur != lead {
			cur += " "
		}
		cur += word
	}
	return append(out, cur)
}

// cols is how many columns s takes on a terminal (one a rune).
func cols(s string) int { return utf8.RuneCountInString(s) }
