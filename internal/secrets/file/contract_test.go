package file_test

import (
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/secrets/secretstest"
)

func TestContract(t *testing.T) {
	secretstest.Run(t, func(t *testing.T) secretstest.Subject {
		s, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
		if err != nil {
			t.Fatal(err)
		}
		return secretstest.Subject{
			Store:        s,
			CreateIssuer: s.CreateIssuer,
			Rotate:       s.Rotate,
			ErrExists:    file.ErrIssuerExists,
			ErrInvalid:   file.ErrInvalidIssuer,
		}
	})
}
