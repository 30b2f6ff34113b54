// Command consul is Consul v1.16.3's CLI (agent -dev, ...) built for Warren's tests; it mirrors the upstream
// main.go.
package main

import (
	"fmt"
	"io"
	"log"
	"os"

	mcli "github.com/mitchellh/cli"

	"github.com/hashicorp/consul/command"
	"github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/command/version"
	_ "github.com/hashicorp/consul/service_os"
)

func main() {
	log.SetOutput(io.Discard)
	ui := &cli.BasicUI{BasicUi: mcli.BasicUi{Writer: os.Stdout, ErrorWriter: os.Stderr}}
	cmds := command.RegisteredCommands(ui)
	c := &mcli.CLI{
		Args:        os.Args[1:],
		Commands:    cmds,
		Name:        "consul",
		HelpFunc:    mcli.BasicHelpFunc("consul"),
		HelpWriter:  os.Stdout,
		ErrorWriter: os.Stderr,
	}
	if c.IsVersion() {
		os.Exit(version.New(ui).Run(nil))
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error executing CLI: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}
