package mem_test

import (
	"testing"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/internal/registry/registrytest"
)

func TestContract(t *testing.T) {
	registrytest.Run(t, func(*testing.T) registry.Registry { return mem.New() })
}
