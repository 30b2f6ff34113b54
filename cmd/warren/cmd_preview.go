package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	warren "github.com/warren-mesh/warren/sdk"
)

const previewUsage = `usage: warren preview [-url U] [-token T] COMMAND ...

commands:
  create [-public] [-ttl D] PORT
                        make a URL that reaches PORT of the sandbox (a server listening on its loopback)
                        from the internet, HTTP and WebSocket; prints the URL. Private unless -public:
                        open it once with ?token=<your token> (a cookie then keeps you in) or send
                        Authorization: Bearer. -ttl: how long it lives (default 1h, at most the edge's max)
  ls [-json]            list your live preview URLs
  rm ID                 revoke one, at once, at every edge
`

func init() {
	register("preview", "preview URLs of ports of your sandbox: warren preview create|ls|rm", runPreview)
}

func runPreview(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSubcommands(ctx, "preview", previewUsage, args, stdout, stderr, map[string]subcommand{
		"create": previewCreate, "ls": previewList, "rm": previewRevoke,
	})
}

func previewCreate(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("preview", "create [-public] [-ttl D] [-json] PORT", cf, stderr)
	public := fs.Bool("public", false, "reachable by anyone with the URL, without your token")
	ttl := fs.Duration("ttl", 0, "lifetime (default: the edge's, one hour)")
	asJSON := fs.Bool("json", false, "print the preview as JSON")
	pos, c, err := connect(fs, cf, args, 1, "a PORT")
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(pos[0])
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("PORT must be 1 to 65535, got %q", pos[0])
	}
	if *ttl < 0 || *ttl > 0 && *ttl < time.Second {
		return fmt.Errorf("-ttl must be at least 1s")
	}
	p, err := c.Sandbox().CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: *public, TTLSeconds: int64(*ttl / time.Second)})
	if err != nil {
		return clientError{err}
	}
	if *asJSON {
		return printJSON(stdout, p)
	}
	fmt.Fprintln(stdout, p.URL)
	return nil
}

func previewList(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("preview", "ls [-json]", cf, stderr)
	asJSON := fs.Bool("json", false, "print the previews as JSON")
	_, c, err := connect(fs, cf, args, 0, "no arguments")
	if err != nil {
		return err
	}
	list, err := c.Sandbox().Previews(ctx)
	if err != nil {
		return clientError{err}
	}
	if *asJSON {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPORT\tVISIBILITY\tEXPIRES\tURL")
	for _, p := range list {
		vis := "private"
		if p.Public {
			vis = "public"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.ID, p.Port, vis, showTime(p.Expires), p.URL)
	}
	return tw.Flush()
}

func previewRevoke(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("preview", "rm ID", cf, stderr)
	pos, c, err := connect(fs, cf, args, 1, "an ID")
	if err != nil {
		return err
	}
	if err := c.Sandbox().RevokePreview(ctx, pos[0]); err != nil {
		return clientError{err}
	}
	return nil
}
