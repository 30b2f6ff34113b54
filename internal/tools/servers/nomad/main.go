// Command nomad is Nomad v1.6.1's CLI (agent, job validate/plan, ...) built for Warren's tests. It mirrors
// the upstream main.go: the early imports matter because those packages take over os.Args when Nomad
// re-executes itself for a task's executor, log monitor or artifact getter.
package main

import (
	"fmt"
	"os"

	_ "github.com/hashicorp/nomad/client/allocrunner/taskrunner/getter"
	_ "github.com/hashicorp/nomad/client/logmon"
	_ "github.com/hashicorp/nomad/drivers/docker/docklog"
	_ "github.com/hashicorp/nomad/drivers/shared/executor"

	"github.com/hashicorp/nomad/command"
	"github.com/hashicorp/nomad/version"
	"github.com/mitchellh/cli"
)

func main() {
	meta := new(command.Meta)
	meta.SetupUi(os.Args[1:])
	agentUI := &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}
	c := &cli.CLI{
		Name:       "nomad",
		Version:    version.GetVersion().FullVersionNumber(true),
		Args:       os.Args[1:],
		Commands:   command.Commands(meta, agentUI),
		HelpFunc:   cli.BasicHelpFunc("nomad"),
		HelpWriter: os.Stdout,
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error executing CLI: %s\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}
