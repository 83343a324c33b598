package redisdelay_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// metadataRead matches a read of a message's metadata: an index or a Get on a Metadata value,
// or an index of md, the name a function that is handed one uses.
var metadataRead = regexp.MustCompile(`Metadata\[|Metadata\.Get\(|\bmd\[`)

// TestOnlyTheOptionsFileAndTheMarshalerReadMessageMetadata holds the rule of
// docs/development.md: a message's metadata is read once, in options.go, into one typed value
// that every other file reads; marshaler.go stores the metadata whole.
func TestOnlyTheOptionsFileAndTheMarshalerReadMessageMetadata(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var readers []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		if metadataRead.Match(text) {
			readers = append(readers, f)
		}
	}
	slices.Sort(readers)
	require.Equal(t, []string{"marshaler.go", "options.go"}, readers)
}
