package warren

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// Host tools (docs/PROTOCOL.md#host-tools, possession mode): tools the agent in the sandbox calls to work
// on the user's own machine, confined to one directory. HostTools builds them as a ToolServer named "host"
// (the agent sees mcp__host__HostBash, ...); a host connection declares it (SessionOptions.Role "host") and
// answers the calls with Session.HandleToolCall, as `warren possess` does.
//
// Every path is resolved inside the root through os.Root: "..", absolute paths outside the root and
// symlinks leading out are refused by construction. HostBash is a shell on the user's machine: it starts
// in the root but is not confined to it — the confirmation is what guards it.

// HostServerName is the MCP server name of the host tools.
const HostServerName = "host"

// Bounds of the host tools (documented in docs/PROTOCOL.md#host-tools).
const (
	HostBashDefaultTimeout = 2 * time.Minute
	HostBashMaxTimeout     = 10 * time.Minute
	HostBashMaxOutput      = 30_000    // bytes of stdout and stderr kept; the rest is counted
	HostBashMaxCommand     = 64 << 10  // bytes of a command (a confirmation shows it whole)
	HostReadDefaultLines   = 2000      // lines a read returns without a limit
	HostMaxLineBytes       = 2000      // bytes of one line shown by HostRead and HostGrep
	HostMaxOutput          = 256 << 10 // bytes of text a HostRead, HostGlob or HostGrep returns
	HostMaxFileBytes       = 10 << 20  // files HostEdit rewrites and HostGrep searches
	HostMaxEntries         = 100_000   // directory entries one HostGlob or HostGrep visits
	HostMaxMatches         = 1000      // paths HostGlob returns
	HostMaxPattern         = 4096      // bytes of a glob or regular expression
	hostToolTimeout        = 30 * time.Minute
	hostBinarySniff        = 8 << 10
	hostMaxCount           = 100_000 // matches HostGrep counts in one file (more show as 100000+)
)

// HostCall is one call of a host tool, as the confirmation sees it.
type HostCall struct {
	Tool  string          // HostBash, HostRead, ...
	Input json.RawMessage // validated against the tool's shape
}

// HostTools returns the host tools working in root (a directory, made absolute). confirm is asked before
// every call whose input is valid; false denies it and the agent gets an error result. A nil confirm
// allows every call.
func HostTools(root string, confirm func(ctx context.Context, call HostCall) bool) (*ToolServer, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("host tools: root %q: %w", root, err)
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("host tools: root %q: %w", root, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("host tools: root %q is not a directory", root)
	}
	h := &hostTools{root: abs, confirm: confirm}
	tool := func(name, desc, schema string, run func(context.Context, *os.Root, hostInput) (string, error)) Tool {
		return Tool{Name: name, Description: desc, InputSchema: json.RawMessage(schema), Timeout: hostToolTimeout,
			Handler: func(ctx context.Context, input json.RawMessage) (ToolResult, error) {
				return h.run(ctx, name, input, run)
			}}
	}
	return &ToolServer{Name: HostServerName, Version: "1.0.0", Tools: []Tool{
		tool("HostBash", "Runs a shell command (/bin/sh -c) on the user's machine, in "+abs+". Output over "+
			strconv.Itoa(HostBashMaxOutput)+" bytes is cut; timeout in milliseconds (default 120000, at most 600000).",
			`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number"},"description":{"type":"string"}},"required":["command"],"additionalProperties":false}`,
			h.bash),
		tool("HostRead", "Reads a text file on the user's machine, under "+abs+", with line numbers (offset: first line, 1-based; limit: lines, default 2000).",
			`{"type":"object","properties":{"file_path":{"type":"string"},"offset":{"type":"number"},"limit":{"type":"number"}},"required":["file_path"],"additionalProperties":false}`,
			h.read),
		tool("HostWrite", "Writes a file on the user's machine, under "+abs+" (parents created, an existing file replaced).",
			`{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"],"additionalProperties":false}`,
			h.write),
		tool("HostEdit", "Replaces old_string by new_string in a file on the user's machine, under "+abs+"; old_string must be unique unless replace_all.",
			`{"type":"object","properties":{"file_path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}},"required":["file_path","old_string","new_string"],"additionalProperties":false}`,
			h.edit),
		tool("HostGlob", "Lists the files under "+abs+" (or path, inside it) matching a glob pattern (*, **, ?, [..], {a,b}).",
			`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"],"additionalProperties":false}`,
			h.glob),
		tool("HostGrep", "Searches the files under "+abs+" (or path, inside it) for a regular expression (RE2). output_mode: files_with_matches (default), content or count; glob filters files.",
			`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"},"glob":{"type":"string"},"output_mode":{"type":"string","enum":["content","files_with_matches","count"]},"-i":{"type":"boolean"},"-n":{"type":"boolean"},"head_limit":{"type":"number"}},"required":["pattern"],"additionalProperties":false}`,
			h.grep),
	}}, nil
}

// DialHost connects to the agent channel as the host (SessionOptions.Role "host"), declaring tools (from
// HostTools) and reporting root. With sessionID it attaches to that session, whoever opened it: the agent
// has the tools from its next turn. With "" it opens a new session, which other clients join by its ID.
// Answer the calls with ServeHost.
func (c *Client) DialHost(ctx context.Context, sessionID, root string, tools *ToolServer) (*Session, error) {
	return c.Dial(ctx, &SessionOptions{Role: wire.RoleHost, Root: root, SessionID: sessionID,
		MCPServers: MCPServerList{tools.MCPServer()}})
}

// ServeHost answers the session's calls of tools, one at a time, until the session ends (nil after a
// normal close, else the error that ended it) or ctx is done. Every event is passed to seen first (nil:
// none); calls of tools the host did not declare are left to the clients that did.
func (s *Session) ServeHost(ctx context.Context, tools *ToolServer, seen func(Event)) error {
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if seen != nil {
			seen(ev)
		}
		if _, err := s.HandleToolCall(ctx, ev, tools); err != nil {
			return err
		}
	}
}

type hostTools struct {
	root    string // absolute, symlinks resolved
	confirm func(context.Context, HostCall) bool
}

// errDenied is the result of a call the user refused.
var errDenied = errors.New("the user denied this call")

// run validates the input (by decoding it in the tool), asks for confirmation and runs the tool.
func (h *hostTools) run(ctx context.Context, name string, input json.RawMessage, tool func(context.Context, *os.Root, hostInput) (string, error)) (ToolResult, error) {
	in, err := ParseHostInput(name, input)
	if err != nil {
		return ToolResult{}, err
	}
	if h.confirm != nil && !h.confirm(ctx, HostCall{Tool: name, Input: input}) {
		return ToolResult{}, errDenied
	}
	r, err := os.OpenRoot(h.root)
	if err != nil {
		return ToolResult{}, fmt.Errorf("open %s: %w", h.root, err)
	}
	defer r.Close()
	out, err := tool(ctx, r, in.(hostInput))
	if err != nil {
		return ToolResult{}, err
	}
	return TextResult(out), nil
}

// Inputs of the host tools. Unknown fields are refused.
type (
	bashInput struct {
		Command     string  `json:"command"`
		Timeout     float64 `json:"timeout,omitempty"`
		Description string  `json:"description,omitempty"`
	}
	readInput struct {
		FilePath string  `json:"file_path"`
		Offset   float64 `json:"offset,omitempty"`
		Limit    float64 `json:"limit,omitempty"`
	}
	writeInput struct {
		FilePath string  `json:"file_path"`
		Content  *string `json:"content"`
	}
	editInput struct {
		FilePath   string  `json:"file_path"`
		OldString  string  `json:"old_string"`
		NewString  *string `json:"new_string"`
		ReplaceAll bool    `json:"replace_all,omitempty"`
	}
	globInput struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path,omitempty"`
	}
	grepInput struct {
		Pattern    string  `json:"pattern"`
		Path       string  `json:"path,omitempty"`
		Glob       string  `json:"glob,omitempty"`
		OutputMode string  `json:"output_mode,omitempty"`
		I          bool    `json:"-i,omitempty"`
		N          bool    `json:"-n,omitempty"`
		HeadLimit  float64 `json:"head_limit,omitempty"`
	}
)

// hostInput is the decoded input of one host tool.
type hostInput interface {
	check() error // shapes and bounds, without touching the file system
}

func newHostInput(name string) hostInput {
	switch name {
	case "HostBash":
		return &bashInput{}
	case "HostRead":
		return &readInput{}
	case "HostWrite":
		return &writeInput{}
	case "HostEdit":
		return &editInput{}
	case "HostGlob":
		return &globInput{}
	case "HostGrep":
		return &grepInput{}
	}
	return nil
}

// ParseHostInput decodes and checks the input of host tool name (untrusted: written by the model), without
// touching the file system: shapes, unknown and required fields, bounds, patterns. It returns the decoded
// input (a pointer to the tool's input struct); errors name the tool.
func ParseHostInput(name string, input json.RawMessage) (any, error) {
	in := newHostInput(name)
	if in == nil {
		return nil, fmt.Errorf("no host tool %q", name)
	}
	if err := wire.DecodeStrict(input, in); err != nil {
		return nil, fmt.Errorf("%s: invalid input: %v", name, err)
	}
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return in, nil
}

func checkPath(field, p string, required bool) error {
	switch {
	case p == "" && required:
		return fmt.Errorf("%s is required", field)
	case strings.IndexByte(p, 0) >= 0 || len(p) > 4096:
		return fmt.Errorf("%s must be at most 4096 bytes without NUL", field)
	}
	return nil
}

func checkCount(field string, v, limit float64) error {
	if v < 0 || v != float64(int64(v)) || v > limit {
		return fmt.Errorf("%s must be a whole number from 0 to %.0f", field, limit)
	}
	return nil
}

func (in *bashInput) check() error {
	if strings.TrimSpace(in.Command) == "" || strings.IndexByte(in.Command, 0) >= 0 || len(in.Command) > HostBashMaxCommand {
		return fmt.Errorf("command is required, at most %d bytes, without NUL", HostBashMaxCommand)
	}
	return checkCount("timeout", in.Timeout, float64(HostBashMaxTimeout.Milliseconds()))
}

func (in *readInput) check() error {
	return errors.Join(checkPath("file_path", in.FilePath, true), checkCount("offset", in.Offset, 1<<31),
		checkCount("limit", in.Limit, 1<<31))
}

func (in *writeInput) check() error {
	if in.Content == nil {
		return errors.New("content is required")
	}
	return checkPath("file_path", in.FilePath, true)
}

func (in *editInput) check() error {
	switch {
	case in.NewString == nil:
		return errors.New("new_string is required")
	case in.OldString == "":
		return errors.New("old_string must not be empty")
	case in.OldString == *in.NewString:
		return errors.New("old_string and new_string are the same")
	}
	return checkPath("file_path", in.FilePath, true)
}

func (in *globInput) check() error {
	_, err := globRegexp(in.Pattern)
	return errors.Join(err, checkPath("path", in.Path, false))
}

func (in *grepInput) check() error {
	if in.Pattern == "" || len(in.Pattern) > HostMaxPattern {
		return fmt.Errorf("pattern must be 1 to %d bytes", HostMaxPattern)
	}
	if _, err := regexp.Compile(in.Pattern); err != nil {
		return fmt.Errorf("pattern: %v", err)
	}
	if in.Glob != "" {
		if _, err := globRegexp(in.Glob); err != nil {
			return fmt.Errorf("glob: %v", err)
		}
	}
	if !slices.Contains([]string{"", "content", "files_with_matches", "count"}, in.OutputMode) {
		return errors.New("output_mode must be content, files_with_matches or count")
	}
	return errors.Join(checkCount("head_limit", in.HeadLimit, 1<<31), checkPath("path", in.Path, false))
}

// rel makes p (relative to the root, or absolute inside it) a path os.Root takes; "" is the root.
// os.Root still refuses what leads out (".." through a symlink, a symlink pointing out).
func (h *hostTools) rel(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(h.root, filepath.Clean(p))
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("%s is outside %s", p, h.root)
		}
		return r, nil
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%s is outside %s", p, h.root)
	}
	return c, nil
}

// pathErr says what went wrong with a path without the root's internals.
func (h *hostTools) pathErr(p string, err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%s leads outside %s", p, h.root)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %v", cmp.Or(p, "."), err)
}

func (h *hostTools) bash(ctx context.Context, _ *os.Root, input hostInput) (string, error) {
	in := input.(*bashInput)
	timeout := HostBashDefaultTimeout
	if in.Timeout > 0 {
		timeout = time.Duration(in.Timeout) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", in.Command)
	cmd.Dir = h.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) } // the whole group
	cmd.WaitDelay = 2 * time.Second                                                      // a child holding the pipes open
	out := &capped{max: HostBashMaxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what the shell left running in the background
	}
	text := out.String()
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return "", fmt.Errorf("command timed out after %s\n%s", timeout, text)
	case ctx.Err() != nil:
		return "", fmt.Errorf("command cancelled\n%s", text)
	case errors.As(err, &ee):
		return text + "\nExit code " + strconv.Itoa(ee.ExitCode()), nil
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		return "", fmt.Errorf("run the command: %w", err)
	}
	return text, nil
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	n := min(len(p), c.max-c.buf.Len())
	c.buf.Write(p[:n])
	c.dropped += int64(len(p) - n)
	return len(p), nil
}

func (c *capped) String() string {
	s := strings.ToValidUTF8(c.buf.String(), "\uFFFD")
	if c.dropped > 0 {
		s += fmt.Sprintf("\n... (%d more bytes cut)", c.dropped)
	}
	return s
}

// isBinary says whether the start of a file looks binary (a NUL byte).
func isBinary(head []byte) bool { return bytes.IndexByte(head, 0) >= 0 }

func (h *hostTools) read(_ context.Context, r *os.Root, input hostInput) (string, error) {
	in := input.(*readInput)
	p, err := h.rel(in.FilePath)
	if err != nil {
		return "", err
	}
	if err := regular(r, p, false); err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	f, err := r.Open(p)
	if err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(hostBinarySniff); isBinary(head) {
		return "", fmt.Errorf("%s is a binary file", in.FilePath)
	}
	offset, limit := max(int64(in.Offset), 1), int64(in.Limit)
	if limit == 0 {
		limit = HostReadDefaultLines
	}
	out := &capped{max: HostMaxOutput}
	for n := int64(1); n < offset+limit; n++ {
		line, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", h.pathErr(in.FilePath, err)
		}
		if n >= offset {
			fmt.Fprintf(out, "%6d\t%s\n", n, line)
		}
	}
	return out.String(), nil
}

// readLine reads one line, keeping at most HostMaxLineBytes of it (the rest is skipped, not buffered).
func readLine(br *bufio.Reader) (string, error) {
	var line []byte
	cut := false
	for {
		frag, err := br.ReadSlice('\n')
		if len(line) < HostMaxLineBytes {
			line = append(line, frag[:min(len(frag), HostMaxLineBytes-len(line))]...)
		} else if len(frag) > 0 {
			cut = true
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && (err != io.EOF || len(line) == 0) {
			return "", err
		}
		s := strings.TrimRight(string(line), "\r\n")
		if cut || len(line) == HostMaxLineBytes && !bytes.HasSuffix(line, []byte("\n")) {
			s += " ... (line cut)"
		}
		return strings.ToValidUTF8(s, "\uFFFD"), nil
	}
}

func (h *hostTools) write(_ context.Context, r *os.Root, input hostInput) (string, error) {
	in := input.(*writeInput)
	p, err := h.rel(in.FilePath)
	if err != nil {
		return "", err
	}
	if dir := filepath.Dir(p); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return "", h.pathErr(in.FilePath, err)
		}
	}
	if err := regular(r, p, true); err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	if err := r.WriteFile(p, []byte(*in.Content), 0o644); err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(*in.Content), filepath.Join(h.root, p)), nil
}

func (h *hostTools) edit(_ context.Context, r *os.Root, input hostInput) (string, error) {
	in := input.(*editInput)
	p, err := h.rel(in.FilePath)
	if err != nil {
		return "", err
	}
	b, err := readSmall(r, p, HostMaxFileBytes)
	if err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	text := string(b)
	n := strings.Count(text, in.OldString)
	switch {
	case n == 0:
		return "", fmt.Errorf("old_string was not found in %s", in.FilePath)
	case n > 1 && !in.ReplaceAll:
		return "", fmt.Errorf("old_string occurs %d times in %s: give more context to make it unique, or set replace_all", n, in.FilePath)
	}
	if in.ReplaceAll {
		text = strings.ReplaceAll(text, in.OldString, *in.NewString)
	} else {
		text = strings.Replace(text, in.OldString, *in.NewString, 1)
	}
	if len(text) > HostMaxFileBytes {
		return "", fmt.Errorf("%s would exceed %d bytes", in.FilePath, HostMaxFileBytes)
	}
	if err := r.WriteFile(p, []byte(text), 0o644); err != nil {
		return "", h.pathErr(in.FilePath, err)
	}
	if !in.ReplaceAll {
		n = 1
	}
	return fmt.Sprintf("replaced %d occurrence(s) in %s", n, filepath.Join(h.root, p)), nil
}

// regular checks that p is a regular file before it is opened (opening a FIFO or a device could block or
// have effects); a missing file is fine when mayBeMissing.
func regular(r *os.Root, p string, mayBeMissing bool) error {
	fi, err := r.Stat(p)
	switch {
	case mayBeMissing && errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	}
	return nil
}

// readSmall reads a regular file of at most limit bytes.
func readSmall(r *os.Root, p string, limit int64) ([]byte, error) {
	if err := regular(r, p, false); err != nil {
		return nil, err
	}
	f, err := r.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return b, err
}

// walk visits the regular files under dir (a path from rel) through the root, at most HostMaxEntries
// entries, without following symlinks. visit gets each file's slash path relative to the root; false stops.
func (h *hostTools) walk(ctx context.Context, r *os.Root, dir string, visit func(p string) bool) (truncated bool, err error) {
	seen := 0
	err = fs.WalkDir(r.FS(), filepath.ToSlash(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == filepath.ToSlash(dir) {
				return err
			}
			return nil // an unreadable entry is skipped
		}
		if seen++; seen > HostMaxEntries {
			truncated = true
			return fs.SkipAll
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Type().IsRegular() && !visit(p) {
			truncated = true
			return fs.SkipAll
		}
		return nil
	})
	return truncated, err
}

func (h *hostTools) glob(ctx context.Context, r *os.Root, input hostInput) (string, error) {
	in := input.(*globInput)
	dir, err := h.rel(in.Path)
	if err != nil {
		return "", err
	}
	re, _ := globRegexp(in.Pattern) // validated
	var matches []string
	truncated, err := h.walk(ctx, r, dir, func(p string) bool {
		relDir, _ := filepath.Rel(dir, p)
		if re.MatchString(filepath.ToSlash(relDir)) {
			matches = append(matches, p)
		}
		return len(matches) < HostMaxMatches
	})
	if err != nil {
		return "", h.pathErr(in.Path, err)
	}
	if len(matches) == 0 {
		return "No files found", nil
	}
	out := &capped{max: HostMaxOutput}
	for _, m := range matches {
		fmt.Fprintln(out, filepath.Join(h.root, m))
	}
	if truncated {
		fmt.Fprintf(out, "(results cut at %d files or %d entries visited)\n", HostMaxMatches, HostMaxEntries)
	}
	return out.String(), nil
}

func (h *hostTools) grep(ctx context.Context, r *os.Root, input hostInput) (string, error) {
	in := input.(*grepInput)
	dir, err := h.rel(in.Path)
	if err != nil {
		return "", err
	}
	pat := in.Pattern
	if in.I {
		pat = "(?i)" + pat
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return "", err
	}
	var fileRe *regexp.Regexp
	if in.Glob != "" {
		fileRe, _ = globRegexp(in.Glob)
	}
	limit := int(in.HeadLimit)
	if limit == 0 {
		limit = HostMaxMatches
	}
	out := &capped{max: HostMaxOutput}
	results := 0
	visitFile := func(p string) bool {
		if fileRe != nil && !fileRe.MatchString(path.Base(p)) && !fileRe.MatchString(p) {
			return true
		}
		b, err := readSmall(r, p, HostMaxFileBytes)
		if err != nil || isBinary(b[:min(len(b), hostBinarySniff)]) {
			return true // unreadable, too large or binary: skipped
		}
		full := filepath.Join(h.root, p)
		switch in.OutputMode {
		case "content":
			i := -1
			for rest := b; rest != nil; {
				// Line by line, without splitting the whole file first (10 MB of newlines is 10M lines).
				var line []byte
				if j := bytes.IndexByte(rest, '\n'); j >= 0 {
					line, rest = rest[:j], rest[j+1:]
				} else {
					line, rest = rest, nil
				}
				i++
				if re.Match(line) {
					line := string(line)
					if len(line) > HostMaxLineBytes {
						line = line[:HostMaxLineBytes] + " ... (line cut)"
					}
					if in.N {
						fmt.Fprintf(out, "%s:%d:%s\n", full, i+1, strings.ToValidUTF8(line, "\uFFFD"))
					} else {
						fmt.Fprintf(out, "%s:%s\n", full, strings.ToValidUTF8(line, "\uFFFD"))
					}
					if results++; results >= limit {
						return false
					}
				}
			}
		case "count":
			// At most hostMaxCount matches are found: a pattern matching the empty string would otherwise
			// make one index pair per byte of a 10 MB file.
			if n := len(re.FindAllIndex(b, hostMaxCount+1)); n > hostMaxCount {
				fmt.Fprintf(out, "%s:%d+\n", full, hostMaxCount)
				results++
			} else if n > 0 {
				fmt.Fprintf(out, "%s:%d\n", full, n)
				results++
			}
		default:
			if re.Match(b) {
				fmt.Fprintln(out, full)
				results++
			}
		}
		return results < limit
	}
	truncated, err := h.walk(ctx, r, dir, visitFile)
	if err != nil {
		return "", h.pathErr(in.Path, err)
	}
	if results == 0 {
		return "No matches found", nil
	}
	if truncated {
		fmt.Fprintf(out, "(results cut at %d or %d entries visited)\n", limit, HostMaxEntries)
	}
	return out.String(), nil
}

// globRegexp compiles a glob (a slash path pattern: * within a name, ** across directories, ?, [...],
// {a,b}) into an anchored regular expression. Patterns over HostMaxPattern bytes, unbalanced braces or
// brackets, nested braces and NUL are refused.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	if pattern == "" || len(pattern) > HostMaxPattern || strings.IndexByte(pattern, 0) >= 0 {
		return nil, fmt.Errorf("glob pattern must be 1 to %d bytes without NUL", HostMaxPattern)
	}
	pattern = strings.TrimPrefix(pattern, "./")
	var b strings.Builder
	b.WriteString("^")
	inBrace := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*' && strings.HasPrefix(pattern[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case c == '*' && strings.HasPrefix(pattern[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 0 {
				return nil, errors.New("glob pattern: unclosed [")
			}
			class := pattern[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" || strings.ContainsAny(class, "[\\") {
				return nil, errors.New("glob pattern: bad [...] class")
			}
			b.WriteString("[" + class + "]")
			i += end + 1
		case c == '{':
			if inBrace {
				return nil, errors.New("glob pattern: nested {")
			}
			inBrace = true
			b.WriteString("(?:")
		case c == '}' && inBrace:
			inBrace = false
			b.WriteString(")")
		case c == ',' && inBrace:
			b.WriteString("|")
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	if inBrace {
		return nil, errors.New("glob pattern: unclosed {")
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("glob pattern: %v", err)
	}
	return re, nil
}
