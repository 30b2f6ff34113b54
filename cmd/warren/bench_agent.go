package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// agentMount is where the sandbox mounts the agent's binary (claude.CLIMount): its processes name it.
const agentMount = "/opt/warren/claude"

// benchFirstEvent measures the first agent event of n pairs of new sessions of one user, side by side in
// one run: a prompt sent to a session open for openFor (its agent process was started in the background
// when the session opened), a prompt sent with the init, and the floor, the CLI alone spawned with the
// prompt on its stdin to its first line. Then the user's memory with no client once its agent processes
// are released (the runner's -agent-idle after the last client left).
func benchFirstEvent(ctx context.Context, stdout io.Writer, st *devstack.Stack, mint func(string) (string, error), cli string, n int, openFor time.Duration) error {
	const user = "bench-first-event"
	tok, err := mint(user)
	if err != nil {
		return err
	}
	c, err := warren.New(st.URL(), tok)
	if err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "warren-bench-cli-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	var open, withInit, floor []time.Duration
	for i := range n {
		d, err := firstEvent(ctx, c, openFor, i)
		if err != nil {
			return fmt.Errorf("prompt to an open session: %w", err)
		}
		open = append(open, d)
		if d, err = firstEvent(ctx, c, 0, i); err != nil {
			return fmt.Errorf("prompt with the init: %w", err)
		}
		withInit = append(withInit, d)
		if d, err = cliFirstLine(ctx, cli, home, st.Model.URL()); err != nil {
			return fmt.Errorf("the CLI alone: %w", err)
		}
		floor = append(floor, d)
	}
	report(stdout, fmt.Sprintf("first agent event: session open %s", openFor), open)
	report(stdout, "first agent event: prompt with the init", withInit)
	report(stdout, "floor: the CLI alone, spawn → first line", floor)
	fmt.Fprintf(stdout, "%-44s %.2f× the floor's p50\n", "prompt with the init, p50", float64(p50(withInit))/float64(p50(floor)))
	return userMemory(ctx, stdout, st, c, user, cli, openFor)
}

// userMemory prints the PSS of user's sandbox (the runner and every process under it) with a client
// attached to a session open for openFor (its agent process started), then with no client once the agent
// processes are released (the runner's -agent-idle after the last client left).
func userMemory(ctx context.Context, stdout io.Writer, st *devstack.Stack, c *warren.Client, user, cli string, openFor time.Duration) error {
	entry, err := st.Registry.Lookup(ctx, devstack.DevIssuer, user)
	if err != nil {
		return err
	}
	s, err := c.Dial(ctx, &wire.SessionOptions{})
	if err != nil {
		return err
	}
	time.Sleep(openFor)
	kib, procs, err := treesPSSKiB([]string{entry.Alloc})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-44s %d KiB in %d processes, %d of them the agent's\n",
		"user PSS, a client attached (agent started)", kib, procs, len(agentPIDs(entry.Alloc, cli)))
	_ = s.Close()
	return idleUserMemory(ctx, stdout, entry.Alloc, cli)
}

// firstEvent opens a new session, waits wait, sends a prompt and returns the time from the prompt to the
// first agent event (the first message that is not the hub's own control).
func firstEvent(ctx context.Context, c *warren.Client, wait time.Duration, i int) (time.Duration, error) {
	s, err := c.Dial(ctx, &wire.SessionOptions{})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	time.Sleep(wait)
	t0 := time.Now()
	var first time.Duration
	for ev, err := range s.Prompt(ctx, fmt.Sprintf("say something %d", i)) {
		if err != nil {
			return 0, err
		}
		if first == 0 && ev.Type != wire.TypeControl {
			first = time.Since(t0)
		}
		if r, ok := ev.Result(); ok && r.IsError {
			return 0, fmt.Errorf("turn failed: %s", r.Result)
		}
	}
	return first, nil
}

// cliFirstLine spawns the CLI in stream-json mode as the agent driver does (outside the sandbox), writes
// a prompt to its stdin at once and returns the time from the spawn to its first line of output.
func cliFirstLine(ctx context.Context, cli, home, modelURL string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "-p", "--input-format=stream-json", "--output-format=stream-json", "--verbose")
	cmd.Dir = home
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + modelURL, "ANTHROPIC_API_KEY=scripted", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "IS_SANDBOX=1"}
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := io.WriteString(in, `{"type":"user","message":{"role":"user","content":"say something"},"parent_tool_use_id":null,"session_id":""}`+"\n"); err != nil {
		return 0, err
	}
	if _, err := bufio.NewReader(out).ReadBytes('\n'); err != nil {
		return 0, fmt.Errorf("no output: %w", err)
	}
	return time.Since(t0), nil
}

// idleUserMemory waits until the sandbox whose runner is root has no agent process left (its clients are
// gone) and prints its PSS: the runner and every process under it.
func idleUserMemory(ctx context.Context, stdout io.Writer, root, cli string) error {
	t0 := time.Now()
	deadline := t0.Add(5 * time.Minute)
	for agents := agentPIDs(root, cli); len(agents) > 0; agents = agentPIDs(root, cli) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent processes %v still running %s after the last client left", agents, time.Since(t0).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	kib, procs, err := treesPSSKiB([]string{root})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-44s %d KiB in %d processes, no agent process (released %s after the last client left)\n",
		"idle user PSS after the agent's release", kib, procs, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// agentPIDs are the agent processes under the process root: those naming the CLI, by its path in the
// sandbox (the CLI and its bubblewrap) or on the host (without the sandbox).
func agentPIDs(root, cli string) []string {
	tree, _ := treePIDs([]string{root})
	var pids []string
	for _, pid := range tree[1:] { // the runner names the CLI in its flags
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err == nil && (strings.Contains(string(b), agentMount) || strings.Contains(string(b), cli)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
