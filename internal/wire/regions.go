package wire

// CertificateHash is a certificate's hash as GET /v1/regions publishes it and a browser's WebTransport
// serverCertificateHashes takes it: {"algorithm": "sha-256", "value": standard base64 of the SHA-256 of the
// certificate's DER}.
type CertificateHash struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}
