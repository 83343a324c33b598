package store

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// luaToken is one token of Lua source: a string or number literal, a name, or an operator.
type luaToken struct {
	kind byte // 's' string, 'n' number, 'w' name, 'o' operator
	text string
	line int
}

var (
	luaLongOpen   = regexp.MustCompile(`^\[(=*)\[`)
	luaNumber     = regexp.MustCompile(`^(0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)`)
	luaName       = regexp.MustCompile(`^[A-Za-z_]\w*`)
	luaOperator   = regexp.MustCompile(`^(\.\.\.|\.\.|==|~=|<=|>=|.)`)
	luaArithmetic = map[string]bool{"+": true, "-": true, "*": true, "/": true, "%": true, "^": true}
)

// luaTokens splits Lua source into tokens, without its comments and white space.
func luaTokens(src string) ([]luaToken, error) {
	var toks []luaToken
	line := 1
	for len(src) > 0 {
		n, kind := 0, byte('o')
		switch c := src[0]; {
		case c == '\n' || c == ' ' || c == '\t' || c == '\r':
			n, kind = 1, 0
		case strings.HasPrefix(src, "--"):
			n, kind = strings.IndexByte(src+"\n", '\n'), 0
			if m := luaLongOpen.FindString(src[2:]); m != "" {
				n = 2 + strings.Index(src[2:], "]"+m[1:len(m)-1]+"]") + len(m)
			}
		case c == '\'' || c == '"':
			n, kind = 1, 's'
			for n < len(src) && src[n] != c {
				if src[n] == '\\' {
					n++
				}
				n++
			}
			n++
		case luaLongOpen.MatchString(src):
			m := luaLongOpen.FindString(src)
			n, kind = strings.Index(src, "]"+m[1:len(m)-1]+"]")+len(m), 's'
		case luaNumber.MatchString(src) && (c != '.' || len(src) > 1 && src[1] != '.'):
			n, kind = len(luaNumber.FindString(src)), 'n'
		case luaName.MatchString(src):
			n, kind = len(luaName.FindString(src)), 'w'
		default:
			n = len(luaOperator.FindString(src))
		}
		if n <= 0 || n > len(src) {
			return nil, fmt.Errorf("line %d: unterminated comment or string", line)
		}
		if kind != 0 {
			toks = append(toks, luaToken{kind: kind, text: src[:n], line: line})
		}
		line += strings.Count(src[:n], "\n")
		src = src[n:]
	}
	return toks, nil
}

// textCalls are the functions whose result is text: int, the integer formatter, string.format
// (its format is checked apart), and Lua's and the fragments' string functions.
var textCalls = map[string]bool{"int": true, "string.format": true, "string.sub": true, "string.rep": true, "string.char": true, "table.concat": true, "member": true, "field": true}

// textNames are the names the scripts give only to text: keys, IDs, members, data and replies.
// A number never goes by one of these names; one that is not listed here must go through int
// to be concatenated.
var textNames = map[string]bool{
	"key": true, "id": true, "hex": true, "m": true, "data": true, "token": true, "reply": true,
	"far": true, "history": true, "debounce": true, "deadline": true, "epoch": true, "bk": true,
	"hfield": true, "b.hex": true, "b.hfield": true, "bucket": true, "outcome": true,
	"record": true, "reason": true, "mode": true, "name": true, "first_id": true, "h": true,
	"group.history": true, "first[1]": true, "b[1]": true, "b": true, "existing": true,
	"gone": true, "BATCH": true, "messages": true, "parked": true, "f": true, "score_text": true,
	"seq": true, "p.history": true, "p.debounce": true, "digit": true, "attempt_text": true,
}

// hexOnly is a string.format format literal whose only conversions are hexadecimal (%012x).
var hexOnly = regexp.MustCompile(`^(['"])([^%]|%%|%[-0-9]*[xX])*['"]$`)

// checkNumbersAsText reports every place where Lua code turns a value into text without int: an
// operand of ".." that is not a string literal, KEYS[...] or ARGV[...], a call of textCalls or a
// name of textNames; any call of tostring; and a string.format whose format is not a literal
// with hexadecimal conversions only.
// Lua's own number-to-text keeps 14 significant digits (LUA_NUMBER_FMT "%.14g"), which rounds
// a Unix time in µs to 100 µs; Redis's redis.call turns a number argument into text exactly.
func checkNumbersAsText(file, src string) error {
	toks, err := luaTokens(src)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for i, t := range toks {
		switch {
		case t.text == "tostring":
			errs = append(errs, fmt.Errorf("%s:%d: tostring; turn a number into text with int", file, t.line))
		case t.text == "format" && i > 1 && toks[i-2].text == "string" && i+2 < len(toks) && !hexOnly.MatchString(toks[i+2].text):
			errs = append(errs, fmt.Errorf("%s:%d: string.format(%s, ...): only %%x formats a number exactly; use int", file, t.line, toks[i+2].text))
		case t.text == "..":
			for _, operand := range []string{leftOperand(toks, i), rightOperand(toks, i)} {
				if !isText(operand) {
					errs = append(errs, fmt.Errorf("%s:%d: %q concatenated: a number must go through int (or, if it is text, add its name to textNames)", file, t.line, operand))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// isText tells whether an operand of "..", as leftOperand and rightOperand give it, is text.
func isText(operand string) bool {
	if strings.HasPrefix(operand, "'") || strings.HasPrefix(operand, `"`) || strings.HasPrefix(operand, "[") {
		return true
	}
	if strings.HasPrefix(operand, "KEYS[") || strings.HasPrefix(operand, "ARGV[") {
		return !strings.ContainsAny(strings.TrimRight(operand[5:], "]"), "[(")
	}
	if call, _, ok := strings.Cut(operand, "("); ok && strings.HasSuffix(operand, ")") {
		return textCalls[call]
	}
	return textNames[operand]
}

// leftOperand returns the operand before the ".." at toks[i], as text without spaces; an
// arithmetic expression or a length (#) comes back as "arithmetic ...".
func leftOperand(toks []luaToken, i int) string {
	j := i - 1
	for j > 0 {
		t := toks[j]
		if t.text == ")" || t.text == "]" {
			k := matchBack(toks, j)
			if k == 0 || t.text == ")" && toks[k-1].kind != 'w' && toks[k-1].text != "]" && toks[k-1].text != ")" {
				j = k
				break
			}
			j = k - 1
			continue
		}
		if t.kind == 'w' && (toks[j-1].text == "." || toks[j-1].text == ":") {
			j -= 2
			continue
		}
		break
	}
	j = max(j, 0)
	operand := joinTokens(toks[j:i])
	if j > 0 && (luaArithmetic[toks[j-1].text] || toks[j-1].text == "#") {
		return "arithmetic " + toks[j-1].text + operand
	}
	return operand
}

// rightOperand returns the operand after the ".." at toks[i], like leftOperand.
func rightOperand(toks []luaToken, i int) string {
	j := i + 1
	if j < len(toks) && (toks[j].text == "#" || toks[j].text == "-") {
		return "arithmetic " + toks[j].text
	}
	for j < len(toks) {
		if toks[j].text == "(" || toks[j].text == "[" {
			j = matchForward(toks, j)
		}
		j++
		if j+1 < len(toks) && (toks[j].text == "." || toks[j].text == ":") {
			j++
			continue
		}
		if j < len(toks) && (toks[j].text == "(" || toks[j].text == "[") {
			continue
		}
		break
	}
	operand := joinTokens(toks[i+1 : min(j, len(toks))])
	if j < len(toks) && luaArithmetic[toks[j].text] {
		return "arithmetic " + operand + toks[j].text
	}
	return operand
}

// matchBack returns the index of the bracket that opens the one that closes at toks[j].
func matchBack(toks []luaToken, j int) int {
	depth := 0
	for ; j >= 0; j-- {
		switch toks[j].text {
		case ")", "]":
			depth++
		case "(", "[":
			depth--
		}
		if depth == 0 {
			return j
		}
	}
	return 0
}

// matchForward returns the index of the bracket that closes the one that opens at toks[j].
func matchForward(toks []luaToken, j int) int {
	depth := 0
	for ; j < len(toks); j++ {
		switch toks[j].text {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		}
		if depth == 0 {
			return j
		}
	}
	return len(toks) - 1
}

func joinTokens(toks []luaToken) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString(t.text)
	}
	return b.String()
}

func TestNumbersBecomeTextOnlyThroughInt(t *testing.T) {
	for _, tc := range []struct{ name, src, err string }{
		{name: "text", src: "return KEYS[1] .. ':' .. ARGV[2] .. key .. string.sub(id, 1, 12) .. b.hex"},
		{name: "a number through int", src: "local now = 1\nreturn '(' .. int(now) .. int(#data) .. int(b.n + 1)"},
		{name: "a number", src: "local now = 1\nreturn '(' .. now", err: `test:2: "now" concatenated`},
		{name: "a number on the left", src: "return now .. ')'", err: `"now" concatenated`},
		{name: "a field", src: "return 'x' .. b.n", err: `"b.n" concatenated`},
		{name: "a length", src: "return #data .. ':' .. data", err: `"arithmetic #data" concatenated`},
		{name: "a sum", src: "return 'x' .. id + 1", err: `"arithmetic id+" concatenated`},
		{name: "a sum on the left", src: "return key - 1 .. 'x'", err: `"arithmetic -1" concatenated`},
		{name: "a call of another function", src: "return 'x' .. now_us()", err: `"now_us()" concatenated`},
		{name: "a number literal", src: "return 'x' .. 5", err: `"5" concatenated`},
		{name: "a key read by a computed index", src: "return 'x' .. KEYS[g + 1] .. ARGV[#ARGV]"},
		{name: "a key of a table read", src: "return 'x' .. KEYS[t[1]]", err: `"KEYS[t[1]]" concatenated`},
		{name: "in a comment or a string", src: "-- '(' .. now\nreturn '.. now'"},
		{name: "tostring", src: "return tostring(now)", err: "test:1: tostring"},
		{name: "format %d", src: "return string.format('%d', now)", err: "use int"},
		{name: "format %d in double quotes", src: `return string.format("x%d", now)`, err: "use int"},
		{name: "format %s", src: "return string.format('%s:%012x', now, id)", err: "use int"},
		{name: "format with a computed format", src: "return string.format(f, now)", err: "use int"},
		{name: "format %x is exact", src: "return string.format('%012x', now) .. string.format(\"%x%%\", n)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNumbersAsText("test", tc.src)
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// TestEveryScriptTurnsNumbersIntoTextThroughInt runs checkNumbersAsText over every script and
// fragment in lua/ (lib/int.lua, the formatter itself, aside).
func TestEveryScriptTurnsNumbersIntoTextThroughInt(t *testing.T) {
	checked := 0
	for _, dir := range []string{"lua", "lua/lib"} {
		files, err := luaFiles.ReadDir(dir)
		require.NoError(t, err)
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".lua") || dir == "lua/lib" && f.Name() == "int.lua" {
				continue
			}
			src, err := luaFiles.ReadFile(path.Join(dir, f.Name()))
			require.NoError(t, err)
			assert.NoError(t, checkNumbersAsText(path.Join(dir, f.Name()), string(src)))
			checked++
		}
	}
	assert.Greater(t, checked, 50, "scripts and fragments checked")
}

// The size limits of the Lua: every function at most maxLuaFunctionLines lines, from the line
// of its "function" to the line of its "end", comments and blank lines included; every file of
// lua/ and lua/lib at most maxLuaCodeLines code lines. A code line is a line of the file itself
// that holds something other than white space and comments: a script's fragments count in their
// own files, so a script and each fragment are read, and checked, on their own.
const (
	maxLuaFunctionLines = 60
	maxLuaCodeLines     = 150
)

// luaFunction is one function of Lua source: the line of its "function" and of its "end".
type luaFunction struct {
	name        string
	first, last int
}

// luaBlockOpen are the words that open a block closed by "end" (or, for repeat, "until"):
// "while" and "for" open theirs with "do", and "elseif"/"else" continue the block of an "if".
var luaBlockOpen = map[string]bool{"function": true, "if": true, "do": true, "repeat": true}

// luaFunctions returns the functions of Lua source, nested ones too, in the order they start.
func luaFunctions(src string) ([]luaFunction, error) {
	toks, err := luaTokens(src)
	if err != nil {
		return nil, err
	}
	var funcs []luaFunction
	var open []int // per open block, its function's index in funcs, or -1
	for i, t := range toks {
		switch {
		case t.kind != 'w':
		case luaBlockOpen[t.text]:
			fn := -1
			if t.text == "function" {
				name := "function"
				if i+1 < len(toks) && toks[i+1].kind == 'w' {
					name = toks[i+1].text
				} else if i > 1 && toks[i-1].text == "=" {
					name = toks[i-2].text
				}
				fn = len(funcs)
				funcs = append(funcs, luaFunction{name: name, first: t.line})
			}
			open = append(open, fn)
		case t.text == "end" || t.text == "until":
			if len(open) == 0 {
				return nil, fmt.Errorf("line %d: %s closes no block", t.line, t.text)
			}
			if fn := open[len(open)-1]; fn >= 0 {
				funcs[fn].last = t.line
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("%d blocks not closed", len(open))
	}
	return funcs, nil
}

// luaCodeLines counts the code lines of Lua source: lines with a token other than a comment.
func luaCodeLines(src string) (int, error) {
	toks, err := luaTokens(src)
	if err != nil {
		return 0, err
	}
	lines := map[int]bool{}
	for _, t := range toks {
		lines[t.line] = true
	}
	return len(lines), nil
}

// checkLuaSize reports every function of a Lua file longer than maxLuaFunctionLines and a file
// of more than maxLuaCodeLines code lines.
func checkLuaSize(file, src string) error {
	funcs, err := luaFunctions(src)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for _, f := range funcs {
		if n := f.last - f.first + 1; n > maxLuaFunctionLines {
			errs = append(errs, fmt.Errorf("%s:%d: function %s has %d lines, more than %d", file, f.first, f.name, n, maxLuaFunctionLines))
		}
	}
	n, err := luaCodeLines(src)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if n > maxLuaCodeLines {
		errs = append(errs, fmt.Errorf("%s: %d code lines, more than %d", file, n, maxLuaCodeLines))
	}
	return errors.Join(errs...)
}

func TestLuaSizeCheckFindsFunctionsAndCodeLines(t *testing.T) {
	src := "-- a comment\nlocal function f(a)\n  if a then\n    for i = 1, 2 do end\n  end\n\n" +
		"  local g = function() return '[[end]]' end\n  repeat a = a - 1 until a < 0\n  return a -- end\nend\n"
	funcs, err := luaFunctions(src)
	require.NoError(t, err)
	assert.Equal(t, []luaFunction{{name: "f", first: 2, last: 10}, {name: "g", first: 7, last: 7}}, funcs)
	n, err := luaCodeLines(src)
	require.NoError(t, err)
	assert.Equal(t, 8, n)
	long := "local function long()\n" + strings.Repeat("  x = 1\n", maxLuaFunctionLines-2) + "end\n"
	assert.NoError(t, checkLuaSize("test", long))
	long = "local function long()\n" + strings.Repeat("  x = 1\n", maxLuaFunctionLines-1) + "end\n"
	assert.ErrorContains(t, checkLuaSize("test", long), "test:1: function long has 61 lines")
	big := strings.Repeat("-- comment\nx = 1\n\n", maxLuaCodeLines+1)
	assert.ErrorContains(t, checkLuaSize("test", big), "test: 151 code lines, more than 150")
	_, err = luaFunctions("local function f()\n")
	assert.Error(t, err)
}

// TestEveryLuaFunctionAndFileIsSmall runs checkLuaSize over every script and fragment in lua/.
func TestEveryLuaFunctionAndFileIsSmall(t *testing.T) {
	checked := 0
	for _, dir := range []string{"lua", "lua/lib"} {
		files, err := luaFiles.ReadDir(dir)
		require.NoError(t, err)
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".lua") {
				continue
			}
			src, err := luaFiles.ReadFile(path.Join(dir, f.Name()))
			require.NoError(t, err)
			assert.NoError(t, checkLuaSize(path.Join(dir, f.Name()), string(src)))
			checked++
		}
	}
	assert.Greater(t, checked, 50, "scripts and fragments checked")
}

// TestEveryFragmentDeclaresTheFragmentsItUses checks the first line of every fragment of
// lua/lib, "-- fragment NAME; needs: ...": it lists every fragment whose names the fragment
// uses and no other, each before it in fragmentOrder, and every file of lua/lib is a fragment
// of fragmentOrder. A script's header lists the fragments it uses itself (assembleCode checks
// it), so together a fragment is declared wherever it is used.
func TestEveryFragmentDeclaresTheFragmentsItUses(t *testing.T) {
	frags, err := readFragments()
	require.NoError(t, err)
	files, err := luaFiles.ReadDir("lua/lib")
	require.NoError(t, err)
	assert.Len(t, fragmentOrder, len(files), "the fragments in fragmentOrder and the files in lua/lib")
	definedBy := map[string]string{}
	for name, f := range frags {
		for _, def := range f.defines {
			assert.Empty(t, definedBy[def], "%s is defined by fragments %s and %s", def, definedBy[def], name)
			definedBy[def] = name
		}
	}
	position := map[string]int{}
	for i, name := range fragmentOrder {
		position[name] = i
	}
	for _, name := range fragmentOrder {
		used := map[string]bool{}
		for id := range namesUsed(frags[name].body) {
			if by := definedBy[id]; by != "" && by != name {
				used[by] = true
			}
		}
		for _, need := range frags[name].needs {
			assert.True(t, used[need], "fragment %s needs %s but uses none of its names", name, need)
			assert.Less(t, position[need], position[name], "fragment %s comes before %s, which it needs", name, need)
			delete(used, need)
		}
		for _, load := range frags[name].loads {
			assert.True(t, used[load], "fragment %s loads %s but uses none of its names", name, load)
			assert.Contains(t, namesUsed(frags[name].body), "load_fragments", "fragment %s loads %s but never calls load_fragments", name, load)
			delete(used, load)
		}
		for by := range used {
			t.Errorf("fragment %s uses names of fragment %s, which its first line does not list", name, by)
		}
	}
}
