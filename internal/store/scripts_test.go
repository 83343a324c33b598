package store

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptHeaderDeclaresItsFragmentsAndKeys(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		keys      int
		variadic  bool
		err       string
	}{
		{name: "fixed keys", src: "-- fragments: split\n-- KEYS[1] a\n-- KEYS[2] b\n-- ARGV[1] c\n\nreturn {split(ARGV[1])}", keys: 2},
		{name: "no fragments", src: "-- fragments: none\n-- KEYS[1] a\n\nreturn 1", keys: 1},
		{name: "variable keys", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2..1+G] b\n-- KEYS[2+G..1+2G] c\n\nreturn 1", keys: 1, variadic: true},
		{name: "only variable keys", src: "-- fragments: none\n-- KEYS[1..] a\n\nreturn 1", variadic: true},
		{name: "KEYS lines after the header are not the header's", src: "-- fragments: none\n-- KEYS[1] a\n\n-- KEYS[3] b\nreturn 1", keys: 1},
		{name: "no fragments line", src: "-- KEYS[1] a\n\nreturn 1", err: `no line "-- fragments: ..."`},
		{name: "two fragments lines", src: "-- fragments: none\n-- fragments: split\n\nreturn 1", err: "two fragments lines"},
		{name: "unknown fragment", src: "-- fragments: no_such\n\nreturn 1", err: `unknown fragment "no_such"`},
		{name: "fragment used but not listed", src: "-- fragments: none\n\nreturn {split(ARGV[1])}", err: `uses split of fragment "split", which its header does not list`},
		{name: "fragment needed but not listed", src: "-- fragments: drop_parked\n\nreturn drop_parked(KEYS[1]) + drop(KEYS[1])", err: `uses drop of fragment "drop"`},
		{name: "fragment listed but not used", src: "-- fragments: split, head\n\nreturn {split(ARGV[1])}", err: `lists fragment "head" in its header, but uses none of its names`},
		{name: "a comment is no use", src: "-- fragments: head\n\n-- head(KEYS[1])\nreturn 1", err: `lists fragment "head"`},
		{name: "keys not from 1", src: "-- fragments: none\n-- KEYS[2] a\n\nreturn 1", err: "want KEYS[1]"},
		{name: "a key skipped", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[3] b\n\nreturn 1", err: "want KEYS[2]"},
		{name: "a key twice", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[1] b\n\nreturn 1", err: "want KEYS[2]"},
		{name: "variable keys not after the last", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[3..2+G] b\n\nreturn 1", err: "the variable keys from KEYS[2..]"},
		{name: "variable keys without a start", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[1+G..2G] b\n\nreturn 1", err: "the variable keys from KEYS[2..]"},
		{name: "a key after the variable keys", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2..] b\n-- KEYS[3] c\n\nreturn 1", err: "comes after the variable keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, code, err := assembleCode("test", tc.src)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.keys, h.keys)
			assert.Equal(t, tc.variadic, h.variadic)
			assert.True(t, strings.HasSuffix(code, tc.src))
		})
	}
}

func TestScriptKeyReadsMatchItsHeader(t *testing.T) {
	publishKeys := "-- fragments: publish_to\n"
	for i := 1; i <= 10; i++ {
		publishKeys += fmt.Sprintf("-- KEYS[%d] k\n", i)
	}
	for _, tc := range []struct {
		name, src, err string
	}{
		{name: "every key read", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2] b\n\nreturn redis.call('MGET', KEYS[2], KEYS[1])"},
		{name: "a key past the last", src: "-- fragments: none\n-- KEYS[1] a\n\nreturn redis.call('MGET', KEYS[1], KEYS[2])", err: "reads KEYS[2], past KEYS[1]"},
		{name: "a key never read", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2] b\n\nreturn redis.call('GET', KEYS[1])", err: "declares KEYS[2] but never reads it"},
		{name: "a read in a comment is no read", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2] b\n\nreturn redis.call('GET', KEYS[1]) -- KEYS[2]", err: "declares KEYS[2] but never reads it"},
		{name: "variable keys read", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2..1+G] b\n\nfor g = 1, 2 do redis.call('GET', KEYS[1 + g]) end\nreturn redis.call('GET', KEYS[1])"},
		{name: "variable keys never read", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2..1+G] b\n\nreturn redis.call('GET', KEYS[1])", err: "declares variable keys but never reads them"},
		{name: "variable keys read by a fixed script", src: "-- fragments: none\n-- KEYS[1] a\n\nfor g = 1, 2 do redis.call('GET', KEYS[1 + g]) end\nreturn redis.call('GET', KEYS[1])", err: "reads a key after KEYS[1], past KEYS[1]"},
		{name: "a fixed index past the fixed keys of a variadic script", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2..] b\n\nreturn redis.call('MGET', KEYS[1], KEYS[2])", err: "reads KEYS[2], past KEYS[1]"},
		{name: "an index the check cannot place may read any key", src: "-- fragments: none\n-- KEYS[1] a\n-- KEYS[2] b\n\nfor i = 1, #KEYS do redis.call('GET', KEYS[i]) end"},
		{name: "a fragment reads the keys from the index it is given", src: publishKeys + "-- KEYS[11..] g\n\nreturn publish_to(1, 1)"},
		{name: "a fragment given a later index reads later keys", src: publishKeys + "-- KEYS[11..] g\n\nreturn publish_to(2, 1)", err: "reads KEYS[11], past KEYS[10]"},
		{name: "a fragment's variable keys", src: publishKeys + "\nreturn publish_to(1, 1)", err: "reads a key after KEYS[10], past KEYS[10]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkKeyReads("test", tc.src)
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// TestScriptHeadersOfEveryScriptMatchTheirBodies runs the checks of the two tests above over
// every script in lua/.
func TestScriptHeadersOfEveryScriptMatchTheirBodies(t *testing.T) {
	// flushbatch.lua is passed the history prefix (Store.BatchOp in bykey.go) but never reads it;
	// dropping the key changes its caller too.
	knownUnread := map[string]string{"flushbatch": "script flushbatch declares KEYS[7] but never reads it"}
	files, err := luaFiles.ReadDir("lua")
	require.NoError(t, err)
	scripts := 0
	for _, f := range files {
		name, ok := strings.CutSuffix(f.Name(), ".lua")
		if f.IsDir() || !ok {
			continue
		}
		scripts++
		src, err := luaFiles.ReadFile(path.Join("lua", f.Name()))
		require.NoError(t, err)
		_, _, err = assembleCode(name, string(src))
		assert.NoError(t, err)
		if want := knownUnread[name]; want != "" {
			assert.EqualError(t, checkKeyReads(name, string(src)), want)
		} else {
			assert.NoError(t, checkKeyReads(name, string(src)))
		}
	}
	assert.Equal(t, 34, scripts, "the scripts in lua/")
}

func TestScriptsIncludeOnlyTheFragmentsTheyNeedOnce(t *testing.T) {
	sc, err := assemble(scriptSpec{file: "register", allowOOM: true})
	require.NoError(t, err)
	// assemble is deterministic: the same file gives the same script.
	assert.Equal(t, registerScript.flagged, sc.flagged)
	assert.Equal(t, registerScript.plain, sc.plain)
	code := registerFlaggedSource(t)
	require.Equal(t, code, registerScript.flagged.src, "the source checked below is the script's")
	// EVALSHA names a script by the SHA1 that Redis (and go-redis) compute of its source.
	require.Equal(t, redis.NewScript(code).Hash(), registerScript.flagged.sha)
	assert.True(t, strings.HasPrefix(code, "#!lua flags=allow-oom\n"))
	assert.Equal(t, 1, strings.Count(code, "local function head("))
	assert.NotContains(t, code, "local function publish_to(")
}

func TestScriptCallWithTheWrongNumberOfKeysIsRefused(t *testing.T) {
	assert.ErrorContains(t, claimScript.checkKeys(1), "script claim: 1 keys, want 12")
	assert.Error(t, claimScript.checkKeys(13))
	assert.NoError(t, claimScript.checkKeys(12))
	assert.NoError(t, publishScript.checkKeys(10))
	assert.NoError(t, publishScript.checkKeys(14))
	assert.Error(t, publishScript.checkKeys(9))
	assert.Error(t, deadLetterScript.checkKeys(14))
	assert.NoError(t, deadLetterScript.checkKeys(15))
	assert.Error(t, statsScript.checkKeys(3))
	assert.NoError(t, statsScript.checkKeys(8))
}

// registerFlaggedSource rebuilds the flagged source of register.lua to look at it.
func registerFlaggedSource(t *testing.T) string {
	body, err := luaFiles.ReadFile("lua/register.lua")
	require.NoError(t, err)
	var lib strings.Builder
	for _, name := range []string{"int", "now_us", "next_ids", "split", "each_chunk", "hmget", "exists_count", "head", "wake", "drop", "drop_parked", "move_set"} {
		f, err := readFragment(name)
		require.NoError(t, err)
		lib.WriteString(f.body + "\n")
	}
	return "#!lua flags=allow-oom\n" + lib.String() + string(body)
}

var (
	keyIndex = regexp.MustCompile(`KEYS\[([^\]]*)\]`)
	// keyBase finds the fragment functions whose first parameter, k, is the index of the first
	// of the keys they read (publish_to, publish_call, publish_plain_call).
	keyBase = regexp.MustCompile(`(?m)^local function (\w+)\(k[,)]`)
)

// checkKeyReads reports a script that reads a key past those its header declares, or that
// declares a key it never reads. It places a read whose index is a number (KEYS[3]), and a
// number plus an expression (KEYS[6 + g], some key after KEYS[6]); in a fragment function
// whose first parameter is k, the index of its first key, k stands for the number the script
// calls it with (publish_to(6, 4): KEYS[k + 2] reads KEYS[8]). Any other index (KEYS[g + 1],
// KEYS[i]) may read any key, so a script with such a read is not checked for keys it never
// reads.
func checkKeyReads(file, src string) error {
	h, err := parseHeader(file, src)
	if err != nil {
		return err
	}
	frags, err := readFragments()
	if err != nil {
		return err
	}
	included, err := includedFragments(file, h.fragments, frags)
	if err != nil {
		return err
	}
	body := lineComment.ReplaceAllString(src, "")
	r := keyReads{at: map[int]bool{}}
	for _, m := range keyIndex.FindAllStringSubmatch(body, -1) {
		r.add(m[1], "", 0)
	}
	// The fragment functions whose first parameter is k pass it on to each other (publish_to to
	// publish_call and publish_plain_call): the reads of each stand for every call the script
	// makes to any of them.
	var kReads [][]string
	var bases []string
	for _, name := range fragmentOrder {
		code := lineComment.ReplaceAllString(frags[name].body, "")
		reads := keyIndex.FindAllStringSubmatch(code, -1)
		if _, in := included[name]; !in {
			continue
		}
		fns := keyBase.FindAllStringSubmatch(code, -1)
		if len(fns) == 0 {
			for _, m := range reads {
				r.add(m[1], "", 0)
			}
			continue
		}
		kReads = append(kReads, reads...)
		for _, fn := range fns {
			for _, call := range regexp.MustCompile(`\b`+fn[1]+`\(([^,)]*)`).FindAllStringSubmatch(body, -1) {
				bases = append(bases, call[1])
			}
		}
	}
	for _, b := range bases {
		base, err := strconv.Atoi(b)
		for _, m := range kReads {
			if err != nil {
				r.anywhere = true
			} else {
				r.add(m[1], "k", base)
			}
		}
	}
	last := fmt.Sprintf("KEYS[%d]", h.keys)
	for n := range r.at {
		if n < 1 || n > h.keys {
			return fmt.Errorf("script %s reads KEYS[%d], past %s, the last key its header declares", file, n, last)
		}
	}
	readsVariable := false
	for _, n := range r.after {
		if n >= h.keys && !h.variadic {
			return fmt.Errorf("script %s reads a key after KEYS[%d], past %s, the last key its header declares", file, n, last)
		}
		readsVariable = readsVariable || n >= h.keys
		for i := n + 1; i <= h.keys; i++ {
			r.at[i] = true
		}
	}
	if r.anywhere {
		return nil
	}
	for n := 1; n <= h.keys; n++ {
		if !r.at[n] {
			return fmt.Errorf("script %s declares KEYS[%d] but never reads it", file, n)
		}
	}
	if h.variadic && !readsVariable {
		return fmt.Errorf("script %s declares variable keys but never reads them", file)
	}
	return nil
}

// keyReads are the keys a script reads: by number, after a number, or anywhere.
type keyReads struct {
	at       map[int]bool
	after    []int
	anywhere bool
}

// add places the read KEYS[index]; param, when not "", names a fragment function's parameter
// that stands for base.
func (r *keyReads) add(index, param string, base int) {
	terms := strings.Split(index, " + ")
	n, err := strconv.Atoi(terms[0])
	switch {
	case err == nil:
	case param != "" && terms[0] == param:
		n = base
	default:
		r.anywhere = true
		return
	}
	rest := terms[1:]
	if len(rest) > 0 {
		if d, err := strconv.Atoi(rest[0]); err == nil {
			n, rest = n+d, rest[1:]
		}
	}
	if len(rest) == 0 {
		r.at[n] = true
	} else {
		r.after = append(r.after, n)
	}
}

// A server that does not hold a script (a new or restarted server, or SCRIPT FLUSH) answers
// EVALSHA with NOSCRIPT: eval then sends the source, which the server keeps, and the call
// succeeds. On miniredis, which refuses the shebang line, the plain form runs instead.
func TestEvalSendsTheSourceWhenTheServerLacksTheScript(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "noscript"}
		publish := func() {
			outcomes, err := s.Publish(ctx, part, testCall(), nil, []Outgoing{{Data: []byte("m")}})
			require.NoError(t, err)
			require.Equal(t, "s", outcomes)
		}
		publish()
		form := publishScript.flagged
		if s.shebang.unsupported.Load() {
			form = publishScript.plain
		}
		require.NoError(t, client.ScriptFlush(ctx).Err())
		publish()
		held, err := client.ScriptExists(ctx, form.sha.(string)).Result()
		require.NoError(t, err)
		require.Equal(t, []bool{true}, held, "the server keeps the script it was sent")
	})
}
