package s3

// WithListPageSize sets List's page size, so a test sees several pages without thousands of objects.
func WithListPageSize(c Config, n int32) Config {
	c.listPageSize = n
	return c
}
