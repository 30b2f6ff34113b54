// Package warren is the Go client of Warren: it opens agent sessions in an end user's sandbox and drives the
// sandbox's REST API (commands, files), speaking the protocol of docs/PROTOCOL.md in the Warren repository.
//
// A Client is bound to one edge and one end user's token (a JWT minted by your backend):
//
//	c, err := warren.New("https://warren.example.com", token)
//	if err != nil { ... }
//	s, err := c.Dial(ctx, &warren.SessionOptions{Model: "claude-sonnet-4-5"})
//	if err != nil { ... } // e.g. warren.IsCode(err, warren.CodeBudgetExceeded)
//	defer s.Close()
//	for ev, err := range s.Prompt(ctx, "write hello.py and run it") {
//		if err != nil { ... } // e.g. the server ended the session; s.LastSeq() resumes it
//		if a, ok := ev.Assistant(); ok {
//			fmt.Print(a.Text())
//		}
//		if r, ok := ev.Result(); ok {
//			fmt.Printf("\n%s, $%.4f\n", r.Subtype, r.CostUSD())
//		}
//	}
//
//	res, err := c.Sandbox().Exec(ctx, warren.ExecRequest{Command: "ls -la"})
//
// Every server message is an Event; the agent's events are Claude Code's stream-json messages, decoded by
// Event.System, Assistant, User, StreamEvent and Result, and Warren's own by Control, SessionInfo, Ready,
// ToolCall and Err. Event.Raw keeps the whole message for anything the typed views leave out.
//
// A session can survive the loss of its edge: with WithFailover (or DialOptions.Failover) it reconnects
// through the next of a list of edges, possibly in another region, resumes with the seq of the last message
// it received, and Next and Events go on as one stream, no event lost or repeated; final errors
// (unauthenticated, budget_exceeded, ...) are not retried, and attempts that run out end the session with a
// *FailoverError:
//
//	c, err := warren.New(euURL, token, warren.WithFailover(warren.Failover{Edges: []string{usURL},
//		OnEvent: func(ev warren.FailoverEvent) { log.Print(ev) }})) // "reconnected to ... at seq 42"
//
// Sessions run over WebSocket by default; WithTransport(TransportAuto, 0) uses WebTransport (HTTP/3 over
// QUIC) when the edge lists it in GET /v1/regions and UDP gets through, and falls back to WebSocket after
// the WebTransport dial timeout (3 s by default); Session.Transport says which one a session uses.
//
// Errors that come from the platform are *Error values carrying a code (CodeUnauthenticated,
// CodeBudgetExceeded, ...), whether they arrived as an HTTP body, an error message, a WebSocket close or a
// WebTransport session's close.
package warren
