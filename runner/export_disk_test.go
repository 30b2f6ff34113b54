package runner

// WalkUsage is walkUsage for the tests of runner_test: the workspace's bytes as the size guard counts them.
var WalkUsage = walkUsage
