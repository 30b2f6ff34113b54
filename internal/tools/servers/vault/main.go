// Command vault is Vault v1.14.2 built for Warren's tests (`vault server -dev`); it mirrors the upstream
// main.go except for the SHA-1 x509 patch, which lives in an internal package and is not needed here.
package main

import (
	"os"

	"github.com/hashicorp/vault/command"
)

func main() { os.Exit(command.Run(os.Args[1:])) }
