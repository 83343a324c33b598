//go:build chaos

package redisdelay_test

// The chaos build tag runs the model-based test ten times longer:
// go test -race -tags chaos -run TestModelBasedSequences .
// It includes crashed consumers (see modelDefaultSkip).
func init() { modelDefaultOps, modelDefaultSeconds, modelDefaultSkip = 100000, 900, "" }
