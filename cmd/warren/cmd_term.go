package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	warren "github.com/warren-mesh/warren/sdk"
)

// detachKey (Ctrl-]) typed at the local terminal detaches from the remote one, which keeps running.
const detachKey = 0x1d

// execTerminal is warren exec -t: create a terminal running argv (an interactive shell when empty), or
// re-attach to attachID, and connect the local terminal to it. The local terminal is in raw mode, so every
// key (Ctrl-C included) goes to the remote program as a byte; its size follows the window (SIGWINCH). The
// exit code is the remote program's. Without a local terminal (a pipe), standard input is sent as is.
func execTerminal(ctx context.Context, c *warren.Client, attachID string, req warren.TerminalRequest, stdout, stderr io.Writer) error {
	in, _ := clientStdin.(*os.File)
	isTTY := in != nil && term.IsTerminal(int(in.Fd()))
	if isTTY {
		if w, h, err := term.GetSize(int(in.Fd())); err == nil {
			req.Cols, req.Rows = min(w, 1000), min(h, 1000)
		}
	}
	id, tc, err := openTerminal(ctx, c.Sandbox(), attachID, req)
	if err != nil {
		return err
	}
	defer tc.Close()
	if isTTY {
		restore, err := rawTerminal(in, tc)
		if err != nil {
			return err
		}
		defer restore()
	}
	detached := pumpInput(tc, isTTY)
	_, err = io.Copy(stdout, tc)
	select {
	case <-detached:
		fmt.Fprintf(stderr, "\r\nwarren exec: detached; the terminal runs on: warren exec -t -attach %s\r\n", id)
		return nil
	default:
	}
	if err != nil {
		return clientError{err}
	}
	code, ok := tc.ExitCode()
	if !ok {
		return errors.New("the terminal connection ended without an exit status")
	}
	if code < 0 || code > 255 {
		code = 1
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// openTerminal creates the terminal of req, or takes attachID's, and attaches to it.
func openTerminal(ctx context.Context, sb *warren.Sandbox, attachID string, req warren.TerminalRequest) (string, *warren.TerminalConn, error) {
	id := attachID
	if id == "" {
		info, err := sb.CreateTerminal(ctx, req)
		if err != nil {
			return "", nil, clientError{err}
		}
		id = info.ID
	}
	tc, err := sb.AttachTerminal(ctx, id)
	if err != nil {
		return "", nil, clientError{err}
	}
	return id, tc, nil
}

// rawTerminal puts the local terminal in raw mode and makes the remote one follow its size (SIGWINCH);
// restore undoes both.
func rawTerminal(in *os.File, tc *warren.TerminalConn) (restore func(), err error) {
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, fmt.Errorf("raw mode for the local terminal: %w", err)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	winch <- syscall.SIGWINCH // a re-attached terminal takes this window's size too
	go func() {
		for range winch {
			if w, h, err := term.GetSize(int(in.Fd())); err == nil {
				_ = tc.Resize(min(max(w, 1), 1000), min(max(h, 1), 1000))
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		_ = term.Restore(int(in.Fd()), old)
	}, nil
}

// pumpInput sends standard input to the terminal until it ends; on a local terminal, detachKey closes the
// connection and the returned channel.
func pumpInput(tc *warren.TerminalConn, isTTY bool) <-chan struct{} {
	detached := make(chan struct{})
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := clientStdin.Read(b)
			if n > 0 {
				chunk := b[:n]
				if isTTY {
					if i := bytes.IndexByte(chunk, detachKey); i >= 0 {
						_, _ = tc.Write(chunk[:i])
						close(detached)
						_ = tc.Close()
						return
					}
				}
				if _, werr := tc.Write(chunk); werr != nil {
					return
				}
			}
			if err != nil {
				return // end of input: the terminal runs on until it exits
			}
		}
	}()
	return detached
}
