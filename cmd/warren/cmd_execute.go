package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("execute", "run a one-shot agent task in your sandbox: warren execute [-no-wait] [-webhook URL] PROMPT | -id ID | -list", runExecute)
}

func runExecute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("execute", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	noWait := fs.Bool("no-wait", false, "return at once with the task's id instead of waiting for its result")
	timeout := fs.Duration("timeout", 0, "interrupt the task after this long (0: the deployment's default)")
	webhook := fs.String("webhook", "", "`URL` POSTed the finished task, signed with your issuer's webhook secret")
	key := fs.String("idempotency-key", "", "a retry with the same `KEY` returns the same task instead of running it again")
	model := fs.String("model", "", "the model of the task's session")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	id := fs.String("id", "", "fetch the task `ID` instead of running one")
	list := fs.Bool("list", false, "list your newest tasks instead of running one")
	help.Set(fs, `usage: warren execute [flags] PROMPT
       warren execute -id ID
       warren execute -list

Runs PROMPT as a one-shot task: the agent works in your sandbox until it is done, then the result, the
files it changed and the cost are printed (and kept: fetch them later with -id). A failed task exits
non-zero with its error.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch {
	case *list:
		tasks, err := c.Tasks(ctx, 0)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(tasks)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATUS\tCREATED\tPROMPT")
		for _, t := range tasks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Status, showTime(t.CreatedAt), oneLine(t.Prompt, 60))
		}
		return tw.Flush()
	case *id != "":
		t, err := c.Task(ctx, *id)
		if err != nil {
			return err
		}
		return printTask(stdout, t, *asJSON)
	}
	prompt := strings.Join(fs.Args(), " ")
	if strings.TrimSpace(prompt) == "" {
		fs.Usage()
		return errors.New("no prompt given: warren execute PROMPT")
	}
	if *timeout < 0 {
		return errors.New("-timeout must not be negative")
	}
	o := &warren.ExecuteOptions{Wait: !*noWait, Timeout: *timeout, WebhookURL: *webhook, IdempotencyKey: *key}
	if *model != "" {
		o.Session = &warren.SessionOptions{Model: *model}
	}
	t, err := c.Execute(ctx, prompt, o)
	if err != nil {
		return err
	}
	return printTask(stdout, t, *asJSON)
}

// printTask prints a task for people (or as JSON); a failed task is also the command's error.
func printTask(w io.Writer, t *warren.Task, asJSON bool) error {
	if asJSON {
		if err := json.NewEncoder(w).Encode(t); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "task %s: %s\n", t.ID, t.Status)
		if t.Result != "" {
			fmt.Fprintf(w, "\n%s\n\n", strings.TrimSpace(t.Result))
		}
		for _, f := range t.FilesChanged {
			fmt.Fprintf(w, "%-9s %s\n", f.Change, f.Path)
		}
		if t.FilesChangedTruncated {
			fmt.Fprintln(w, "(more files changed than listed)")
		}
		if t.Cost != nil {
			fmt.Fprintf(w, "cost: $%.6f, %.1fs of compute\n", t.TotalCostUSD, t.Cost.ComputeSeconds)
		}
	}
	if t.Status == warren.TaskFailed && t.Error != nil {
		return fmt.Errorf("task %s failed: %w", t.ID, t.Error)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
