//go:build chaos

package redisdelay_test

// The chaos build tag runs the model-based test ten times longer:
// go test -race -tags chaos -run TestModelBasedSequences .
func init() { modelDefaultOps, modelDefaultSeconds = 100000, 900 }
