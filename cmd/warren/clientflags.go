package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// clientStdin is what client commands read as standard input (warren exec -stdin, warren files put -).
var clientStdin io.Reader = os.Stdin

// clientFlags are the flags every client command takes: which edge, and as whom.
type clientFlags struct {
	url   string
	token string
}

// newClientFlags starts from $WARREN_URL and $WARREN_TOKEN.
func newClientFlags() *clientFlags {
	cf := &clientFlags{url: withScheme(os.Getenv("WARREN_URL")), token: os.Getenv("WARREN_TOKEN")}
	if cf.url == "" {
		cf.url = "http://127.0.0.1:8080"
	}
	return cf
}

// register defines -url and -token on fs. They are Func flags so that defining them again on a
// subcommand's flag set keeps what was parsed before the subcommand's name, and so that -h never prints the
// token.
func (cf *clientFlags) register(fs *flag.FlagSet) {
	fs.Func("url", "the edge's base `URL`; without a scheme, http:// on loopback, else https:// (default $WARREN_URL or http://127.0.0.1:8080)", func(s string) error {
		cf.url = withScheme(s)
		return nil
	})
	fs.Func("token", "the end user's `JWT` (default $WARREN_TOKEN; mint one with 'warren token')", func(s string) error {
		cf.token = s
		return nil
	})
}

// client builds an SDK client from the flags, with opts.
func (cf *clientFlags) client(opts ...warren.Option) (*warren.Client, error) {
	if cf.token == "" {
		return nil, errors.New("no token: pass -token or set WARREN_TOKEN (mint one with `warren token`)")
	}
	c, err := warren.New(cf.url, cf.token, append([]warren.Option{warren.WithUserAgent("warren-cli/" + version)}, opts...)...)
	if err != nil {
		return nil, badURL(cf.url)
	}
	return c, nil
}

// withScheme gives a URL written without a scheme (127.0.0.1:8080, edge.example.com) one: http:// for a
// loopback host, where warren dev listens, https:// for any other. "" stays "".
func withScheme(s string) string {
	if s == "" || strings.Contains(s, "://") {
		return s
	}
	hostport, _, _ := strings.Cut(s, "/")
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); host == "localhost" || (err == nil && ip.IsLoopback()) {
		return "http://" + s
	}
	return "https://" + s
}

// badURL is the error for a -url that is no URL, in a person's words rather than the parser's.
func badURL(u string) error {
	return fmt.Errorf("bad -url %q: want host:port or http(s)://host:port (with an optional path)", u)
}

// clientError is an SDK error as the CLI shows it: describeError's text, the original underneath.
type clientError struct{ err error }

func (e clientError) Error() string { return describeError(e.err) }
func (e clientError) Unwrap() error { return e.err }

// describeError turns an error of a client command into a sentence for a person: what went wrong and,
// where there is one, what to do about it.
func describeError(err error) string {
	if err == nil {
		return ""
	}
	var we *warren.Error
	if errors.As(err, &we) {
		m := wire.BareMessage(we.Code, we.Message) // the code is said below in the CLI's words
		switch we.Code {
		case warren.CodeUnauthenticated:
			return fmt.Sprintf("the token was rejected: %s (mint one with `warren token`)", m)
		case warren.CodePermissionDenied:
			return fmt.Sprintf("not allowed: %s (the token's permissions do not cover this)", m)
		case warren.CodeBudgetExceeded:
			return fmt.Sprintf("%s (raise the user's quota with `warren admin quota set`, or wait for the window to reset)", m)
		case warren.CodeRateLimited:
			if s, ok := retryAfter(we); ok {
				return fmt.Sprintf("rate limited: %s (retry in %ds)", m, s)
			}
			return fmt.Sprintf("rate limited: %s (wait a moment and retry)", m)
		case warren.CodeConcurrencyLimit:
			return fmt.Sprintf("too many sessions at once: %s (close one, or raise max_concurrent_sessions in the quota)", m)
		case warren.CodeUnavailable:
			return fmt.Sprintf("the platform could not start your sandbox: %s (is `warren dev` running?)", m)
		case warren.CodeTimeout:
			return fmt.Sprintf("timed out: %s", m)
		case warren.CodeNotFound:
			return fmt.Sprintf("not found: %s", m)
		case warren.CodeInvalidArgument:
			return fmt.Sprintf("invalid request: %s", m)
		case warren.CodeConflict:
			return fmt.Sprintf("conflict: %s", m)
		case warren.CodePayloadTooLarge:
			return fmt.Sprintf("too large: %s", m)
		case warren.CodeInternal:
			return fmt.Sprintf("the platform failed: %s (the edge's log has the cause)", m)
		}
		return fmt.Sprintf("%s: %s", we.Code, m)
	}

	edge := "the edge"
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			edge = "the edge at " + u.Scheme + "://" + u.Host
		}
	}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("cannot reach %s — is `warren dev` running? (or pass -url)", edge)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot reach %s: no such host %q (check -url or WARREN_URL)", edge, dnsErr.Name)
	case errors.As(err, &certErr), errors.As(err, &unknownCA):
		return fmt.Sprintf("cannot verify the TLS certificate of %s: %v", edge, err)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Sprintf("cannot reach %s: %v", edge, opErr.Err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("the connection to %s broke off: %v", edge, err)
	}
	return err.Error()
}

// retryAfter reads details.retry_after_seconds, a number once decoded from JSON.
func retryAfter(e *warren.Error) (int, bool) {
	switch v := e.Details["retry_after_seconds"].(type) {
	case float64:
		return int(v + 0.5), v > 0
	case int:
		return v, v > 0
	}
	return 0, false
}
