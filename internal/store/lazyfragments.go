package store

// This file puts a script's fragments together, the lazy ones inside load_fragments.

import "strings"

// libCode puts a script's fragments together, in fragmentOrder: those it defines on every call
// (level 0), then, when a fragment loads others, lazyCode with the deeper levels.
func libCode(included map[string]int, frags map[string]fragment) string {
	var core strings.Builder
	var lazy [][]string
	loader := false
	for _, name := range fragmentOrder {
		level, ok := included[name]
		switch {
		case !ok:
			continue
		case level == 0:
			core.WriteString(frags[name].body + "\n")
		default:
			for len(lazy) < level {
				lazy = append(lazy, nil)
			}
			lazy[level-1] = append(lazy[level-1], name)
		}
		loader = loader || (level == 0 && len(frags[name].loads) > 0)
	}
	if !loader {
		return core.String()
	}
	return lazyCode(lazy, frags, core.String())
}

// Lazy fragments. A Redis script runs its whole body on every call, and each function it
// defines is a closure made anew, bound to every local of the script it uses: the publish
// script's 44 functions cost a fifth of a one-message call. A fragment that only some calls
// use (the publish calls other than plain ones, a keyed message's, a batch's, the compact
// tier's) is listed by its caller after "; loads:" instead of in "needs:", and the caller
// reaches it through load_fragments(), which defines the lazy fragments on the first call of a
// script run that needs them and returns a table of their names:
// load_fragments().publish_keyed(...). The fragments that a lazy fragment loads in turn are a
// level deeper: the table defines them on the first lookup of a name it lacks (its metatable's
// __index), inside the loader of the level above, so that a call that needs only the first
// level (a publish with the new-group window open) does not define the second (keyed messages,
// batches).

// lazyCode returns the fragments in core followed by load_fragments, which defines those of
// levels[0] and, nested, those of the deeper levels.
func lazyCode(levels [][]string, frags map[string]fragment, core string) string {
	var code strings.Builder
	code.WriteString("-- load_fragments defines the fragments only some calls use (see scripts.go).\n")
	code.WriteString("local load_fragments, lazy_fragments\n")
	code.WriteString(core)
	code.WriteString("load_fragments = function()\n  if lazy_fragments then return lazy_fragments end\n")
	code.WriteString("  lazy_fragments = {}\n")
	writeLevels(&code, levels, frags)
	code.WriteString("  return lazy_fragments\nend\n")
	return code.String()
}

// writeLevels writes the fragments of levels[0], their names into lazy_fragments, and, when
// there are deeper levels, the metatable whose __index defines them.
func writeLevels(code *strings.Builder, levels [][]string, frags map[string]fragment) {
	var names []string
	for _, name := range levels[0] {
		code.WriteString(frags[name].body + "\n")
		for _, def := range frags[name].defines {
			names = append(names, "  lazy_fragments."+def+" = "+def+"\n")
		}
	}
	code.WriteString(strings.Join(names, ""))
	if len(levels) == 1 {
		return
	}
	code.WriteString("  setmetatable(lazy_fragments, {__index = function(_, name)\n  setmetatable(lazy_fragments, nil)\n")
	writeLevels(code, levels[1:], frags)
	code.WriteString("  return lazy_fragments[name]\n  end})\n")
}
