package edge

import (
	"context"
	"io"
	"testing"

	"github.com/warren-mesh/warren/internal/termtest"
	warren "github.com/warren-mesh/warren/sdk"
)

// A terminal's WebSocket passes through the edge: attached through the edge of the region holding the
// user (a plain reverse proxy upgrade) and through the other region's edge (the upgrade forwarded over the
// mesh), typed input and resize go in, output and the exit come back.
func TestForwardTerminal(t *testing.T) {
	rn := realRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	ctx := testCtx(t)
	sandbox := func(url string) *warren.Sandbox {
		c, err := warren.New(url, "alice")
		if err != nil {
			t.Fatal(err)
		}
		return c.Sandbox()
	}
	sa, sb := sandbox(a.url), sandbox(b.url)
	in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "sh", Args: []string{"-i"}, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatalf("create through b: %v", err)
	}
	for _, side := range []struct {
		name string
		s    *warren.Sandbox
	}{{"a (local)", sa}, {"b (forwarded)", sb}} {
		t.Run(side.name, func(t *testing.T) {
			tc, err := side.s.AttachTerminal(ctx, in.ID)
			if err != nil {
				t.Fatalf("attach: %v", err)
			}
			defer tc.Close()
			scr := termtest.Watch(tc)
			if _, err := io.WriteString(tc, "echo thr''ough\n"); err != nil {
				t.Fatal(err)
			}
			scr.WaitFor(t, "through")
			if err := tc.Resize(77, 33); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(tc, "stty size\n"); err != nil {
				t.Fatal(err)
			}
			scr.WaitFor(t, "33 77")
		})
	}
	tc, err := sb.AttachTerminal(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	scr := termtest.Watch(tc)
	if _, err := io.WriteString(tc, "exit 4\n"); err != nil {
		t.Fatal(err)
	}
	if err := scr.Wait(t); err != io.EOF {
		t.Fatalf("end = %v", err)
	}
	if code, ok := tc.ExitCode(); !ok || code != 4 {
		t.Fatalf("exit = %d, %v", code, ok)
	}
	if _, err := sb.AttachTerminal(context.Background(), "nope"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("attach to unknown through b: %v", err)
	}
}
