package warren_test

import (
	"context"
	"fmt"
	"log"
	"os"

	warren "github.com/warren-mesh/warren/sdk"
)

func ExampleClient_Dial() {
	ctx := context.Background()
	c, err := warren.New("http://127.0.0.1:8080", os.Getenv("WARREN_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Dial(ctx, &warren.SessionOptions{MaxTurns: 10})
	if warren.IsCode(err, warren.CodeBudgetExceeded) {
		log.Fatal("this user's budget is spent")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(ctx, "write a haiku to haiku.txt"); err != nil {
		log.Fatal(err)
	}
	for ev, err := range s.Events() {
		if err != nil {
			log.Fatalf("session ended: %v (resume after seq %d)", err, s.LastSeq())
		}
		if ev.Type == "result" {
			fmt.Println(string(ev.Raw))
			break
		}
	}
}

func ExampleSession_Prompt() {
	ctx := context.Background()
	c, err := warren.New("http://127.0.0.1:8080", os.Getenv("WARREN_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	// SessionID resumes an earlier conversation; ForkSession continues it under a new id.
	s, err := c.Dial(ctx, &warren.SessionOptions{IncludePartialMessages: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for ev, err := range s.Prompt(ctx, "write hello.py and run it") {
		if err != nil {
			log.Fatal(err)
		}
		if se, ok := ev.StreamEvent(); ok {
			if text, ok := se.TextDelta(); ok {
				fmt.Print(text) // the answer as it is written; the complete AssistantEvent follows
			}
		}
		if a, ok := ev.Assistant(); ok {
			for _, use := range a.ToolUses() {
				fmt.Printf("\n[%s %s]\n", use.Name, use.Input)
			}
		}
		if r, ok := ev.Result(); ok {
			fmt.Printf("\n%s after %d turns, $%.4f\n", r.Subtype, r.NumTurns, r.CostUSD())
		}
	}
}

func ExampleSandbox_ExecStream() {
	c, err := warren.New("http://127.0.0.1:8080", os.Getenv("WARREN_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Sandbox().ExecStream(context.Background(), warren.ExecRequest{Command: "go test ./..."}) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case warren.ExecStdout:
			os.Stdout.WriteString(ev.Data)
		case warren.ExecStderr:
			os.Stderr.WriteString(ev.Data)
		case warren.ExecExit:
			fmt.Println("exit code", ev.Result.ExitCode)
		}
	}
}
