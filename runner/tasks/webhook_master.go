package tasks

import (
	"fmt"
	"os"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// ReadWebhookMaster reads the operator's webhook secret (-webhook-secret-file): the file's content without
// surrounding white space, at least wire.MinWebhookMaster bytes. Errors name the file, never its content.
func ReadWebhookMaster(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	master := []byte(strings.TrimSpace(string(b)))
	if len(master) < wire.MinWebhookMaster {
		return nil, fmt.Errorf("webhook secret in %s: want at least %d bytes", path, wire.MinWebhookMaster)
	}
	return master, nil
}
