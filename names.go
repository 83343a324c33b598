package redisdelay

// This file owns the rules for topic and consumer group names (ValidateName).

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// MaxNameLength is the longest topic or consumer group name, in bytes, that ValidateName
// accepts; in a name that contains DeadLetterInfix, the limit holds for each part around it.
// So every topic that Publish accepts can be subscribed by every consumer group that Subscribe
// accepts: the default dead-letter topic, topic + DeadLetterInfix + group, is valid too.
const MaxNameLength = 512

// ValidateName reports whether name can be used as a topic or a consumer group name. A name must
// be non-empty, at most MaxNameLength bytes (each part around DeadLetterInfix, see
// MaxNameLength), valid UTF-8 without control characters (so that it reads the same in logs,
// metric labels, the CLI and the dashboard), free of '{' and '}' (braces would change the Redis
// Cluster hash tag that keeps all keys of a topic in one slot), not "." or ".." (which no URL
// path can name), and must not end in '#' and digits, which name the partitions of a topic. Any
// other character, ':' and '/' included, is allowed. The error wraps ErrInvalidName and names
// what is wrong, quoting at most 64 bytes of the name.
func ValidateName(kind, name string) error {
	if err := checkName(kind, name); err != nil {
		return fmt.Errorf("redisdelay: %w", err)
	}
	return nil
}

// checkName is ValidateName without the "redisdelay: " prefix, for errors that name the field
// the name came from first.
func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s name %s is not valid UTF-8", ErrInvalidName, kind, quote(name))
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s name %s holds a control character", ErrInvalidName, kind, quote(name))
	case name == "." || name == "..":
		return fmt.Errorf("%w: %s name %s is a path step that no URL can name", ErrInvalidName, kind, quote(name))
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("%w: %s name %s contains '{' or '}', which would break the Redis Cluster hash tag", ErrInvalidName, kind, quote(name))
	case store.HasPartitionSuffix(name) || store.HasPartitionSuffix(firstPart(name)):
		return fmt.Errorf("%w: %s name %s ends in '#' and digits, which name topic partitions", ErrInvalidName, kind, quote(name))
	}
	for rest := name; ; {
		part, after, found := strings.Cut(rest, DeadLetterInfix)
		if len(part) > MaxNameLength {
			return fmt.Errorf("%w: %s name %s has a part of %d bytes, more than %d", ErrInvalidName, kind, quote(name), len(part), MaxNameLength)
		}
		if !found {
			return nil
		}
		rest = after
	}
}

// firstPart returns name up to its first DeadLetterInfix, or all of it.
func firstPart(name string) string {
	part, _, _ := strings.Cut(name, DeadLetterInfix)
	return part
}
