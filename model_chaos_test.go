//go:build chaos

package redisdelay_test

// The chaos build tag runs the model-based test ten times longer than REDISDELAY_LONG=1, with or
// without it: go test -race -tags chaos -run TestModelBasedSequences .
func init() {
	modelLongOps, modelLongSeconds = 100000, 900
	modelQuickOps, modelQuickSeconds = modelLongOps, modelLongSeconds
}
