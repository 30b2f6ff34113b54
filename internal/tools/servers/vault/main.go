//go:debug x509negativeserial=1

// Command vault is Vault v1.14.2 built for Warren's tests (`vault server -dev`); it mirrors the upstream
// main.go except for the SHA-1 x509 patch, which lives in an internal package and is not needed here.
//
// The go:debug line: a linked database plugin (gosnowflake) parses a CA certificate with a negative serial
// number at init, which Go 1.23+ refuses; without it the binary panics at start.
package main

import (
	"os"

	"github.com/hashicorp/vault/command"
)

func main() { os.Exit(command.Run(os.Args[1:])) }
