package main

import "github.com/warren-mesh/warren/cmd/warren/internal/roles"

// The server roles are wired in cmd/warren/internal/roles; main dispatches to them as to the client commands.
func init() {
	for _, c := range roles.Commands() {
		register(c.Name, c.Summary, c.Run)
	}
}
