// Package warren is the Go client of Warren: it opens agent sessions in an end user's sandbox and drives
// the sandbox's REST API (commands, files), speaking the protocol of PROTOCOL.md.
//
// A Client is bound to one edge and one end user's token (a JWT minted by your backend):
//
//	c, err := warren.New("https://warren.example.com", token)
//	if err != nil { ... }
//	s, err := c.Dial(ctx, &warren.SessionOptions{Model: "claude-sonnet-4-5"})
//	if err != nil { ... } // e.g. warren.IsCode(err, warren.CodeBudgetExceeded)
//	defer s.Close()
//	if err := s.Send(ctx, "write hello.py and run it"); err != nil { ... }
//	for ev, err := range s.Events() {
//		if err != nil { ... } // the server ended the session with an error; s.LastSeq() resumes it
//		fmt.Println(ev.Type, ev.Subtype)
//		if ev.Type == "result" {
//			break
//		}
//	}
//
//	res, err := c.Sandbox().Exec(ctx, warren.ExecRequest{Command: "ls -la"})
//
// Errors that come from the platform are *Error values carrying a code (CodeUnauthenticated,
// CodeBudgetExceeded, ...), whether they arrived as an HTTP body, an error message or a WebSocket close.
package warren
