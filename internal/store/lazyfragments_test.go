package store

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A plain publish call defines no function of a feature it does not use: the publish script's
// body, run on every call, holds only the functions of the plain path (publish_to), and
// load_fragments holds those of every other call (publish_call: the new-group window, keyed
// messages, batches) and of the compact tier.
func TestAPlainPublishDefinesNoFunctionOfAFeatureItDoesNotUse(t *testing.T) {
	src, err := luaFiles.ReadFile("lua/publish.lua")
	require.NoError(t, err)
	_, code, err := assembleCode("publish", string(src))
	require.NoError(t, err)
	at := strings.Index(code, "load_fragments = function()")
	require.Positive(t, at, "the publish script has a load_fragments")
	everyCall, loaded := code[:at], code[at:]
	defined := regexp.MustCompile(`(?m)^\s*local function (\w+)\(`)
	var always []string
	for _, m := range defined.FindAllStringSubmatch(everyCall, -1) {
		always = append(always, m[1])
	}
	assert.ElementsMatch(t, []string{"int", "now_us", "next_ids", "each_chunk", "head", "wake", "schedule",
		"stale", "publish_score", "call_holders", "publish_plain_call", "publish_to"}, always)
	for _, lazy := range []string{"publish_call", "publish_window", "publish_plain", "publish_flush", "publish_keyed", "publish_duplicate", "publish_replace", "debounce_cap", "batch_item", "publish_far", "far_put", "drop_parked", "drop", "split"} {
		assert.Contains(t, loaded, "local function "+lazy+"(", "%s is defined only when a call needs it", lazy)
		assert.Contains(t, loaded, "lazy_fragments."+lazy+" = "+lazy, "load_fragments returns %s", lazy)
	}
}
