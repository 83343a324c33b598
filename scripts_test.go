package redisdelay

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptTableRefusesAFragmentThatIsUsedButNotListed(t *testing.T) {
	_, err := assemble(scriptSpec{file: "nack", fragments: []string{"now_us", "split", "member", "schedule"}, keys: 5})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"drop"`)
	_, err = assemble(scriptSpec{file: "ack", fragments: []string{"no_such"}, keys: 3})
	assert.ErrorContains(t, err, "unknown fragment")
}

func TestScriptsIncludeOnlyTheFragmentsTheyNeedOnce(t *testing.T) {
	sc, err := assemble(scriptSpec{file: "register", fragments: []string{"split", "hmget", "each_chunk", "head", "wake", "drop_parked"}, keys: 7})
	require.NoError(t, err)
	// assemble is deterministic: the same table gives the same script.
	assert.Equal(t, registerScript.plain.Hash(), sc.plain.Hash())
	code := registerFlaggedSource(t)
	require.Equal(t, registerScript.flagged.Hash(), redis.NewScript(code).Hash(), "the source checked below is the script's")
	assert.True(t, strings.HasPrefix(code, "#!lua flags=allow-oom\n"))
	assert.Equal(t, 1, strings.Count(code, "local function head("))
	assert.NotContains(t, code, "local function publish_to(")
}

func TestScriptCallWithTheWrongNumberOfKeysIsRefused(t *testing.T) {
	assert.ErrorContains(t, claimScript.checkKeys([]string{"a"}), "script claim: 1 keys, want 10")
	assert.NoError(t, publishScript.checkKeys(make([]string, 9)))
	assert.Error(t, publishScript.checkKeys(make([]string, 5)))
}

// registerFlaggedSource rebuilds the flagged source of register.lua to look at it.
func registerFlaggedSource(t *testing.T) string {
	body, err := luaFiles.ReadFile("lua/register.lua")
	require.NoError(t, err)
	var lib strings.Builder
	for _, name := range []string{"split", "each_chunk", "hmget", "head", "wake", "drop", "drop_parked"} {
		f, err := readFragment(name)
		require.NoError(t, err)
		lib.WriteString(f.body + "\n")
	}
	return "#!lua flags=allow-oom\n" + lib.String() + string(body)
}
