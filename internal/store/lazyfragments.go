package store

// This file puts a script's fragments together, the lazy ones inside load_fragments.

import "strings"

// libCode puts a script's fragments together, in fragmentOrder: those it defines on every call
// (included true), then, when a fragment loads others, lazyCode.
func libCode(included map[string]bool, frags map[string]fragment) string {
	var core strings.Builder
	var lazy []string
	loader := false
	for _, name := range fragmentOrder {
		always, ok := included[name]
		switch {
		case !ok:
			continue
		case always:
			core.WriteString(frags[name].body + "\n")
		default:
			lazy = append(lazy, name)
		}
		loader = loader || (always && len(frags[name].loads) > 0)
	}
	if !loader {
		return core.String()
	}
	return lazyCode(lazy, frags, core.String())
}

// Lazy fragments. A Redis script runs its whole body on every call, and each function it
// defines is a closure made anew, bound to every local of the script it uses: the publish
// script's 44 functions cost a fifth of a one-message call. A fragment that only some calls
// use (a keyed message's, a batch's, the compact tier's) is listed by its caller after
// "; loads:" instead of in "needs:", and the caller reaches it through load_fragments(), which
// defines the lazy fragments on the first call of a script run that needs them and returns a
// table of their names: load_fragments().publish_keyed(...). Its closure is bound only to the
// names the lazy fragments take from the others.

// lazyCode returns the fragments in core followed by load_fragments, which defines those in
// lazy.
func lazyCode(lazy []string, frags map[string]fragment, core string) string {
	var code strings.Builder
	code.WriteString("-- load_fragments defines the fragments only some calls use (see scripts.go).\n")
	code.WriteString("local load_fragments, lazy_fragments\n")
	code.WriteString(core)
	code.WriteString("load_fragments = function()\n  if lazy_fragments then return lazy_fragments end\n")
	var names []string
	for _, name := range lazy {
		code.WriteString(frags[name].body + "\n")
		for _, def := range frags[name].defines {
			names = append(names, def+" = "+def)
		}
	}
	code.WriteString("  lazy_fragments = {" + strings.Join(names, ", ") + "}\n  return lazy_fragments\nend\n")
	return code.String()
}
