// Package roles wires warren's server roles from flags and WARREN_* variables: edge, scheduler, billing,
// runner, dev (all of them in one process) and modelserver. Each role's flags are a struct with register
// (define them on a flag set) and config (the role package's Config, checked); the adapters are opened
// here and handed to the role packages. The client commands (admin, exec, files, chat, ...) live in
// package main beside the dispatch.
package roles

import (
	"context"
	"io"
)

// Command is one role's subcommand: warren NAME [flags].
type Command struct {
	Name, Summary string
	Run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the roles, in the order their files register them.
var commands []Command

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands = append(commands, Command{Name: name, Summary: summary, Run: run})
}

// Commands are the roles' subcommands, for main to dispatch.
func Commands() []Command { return commands }
