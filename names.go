package redisdelay

// This file owns the rules for topic and consumer group names (ValidateName) and for message
// keys (ValidateKey).

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// MaxNameLength is the longest topic, consumer group or schedule name, in bytes, that
// ValidateName accepts: the whole name, whatever its parts. A name that contains
// DeadLetterInfix (a dead-letter topic) may be up to MaxDeadLetterTopicLength.
const MaxNameLength = 512

// MaxDeadLetterTopicLength is the longest name, in bytes, that ValidateName accepts when the
// name contains DeadLetterInfix: 3 × MaxNameLength + 2 × len(DeadLetterInfix) = 1562, the
// length of the dead-letter topic of a dead-letter topic. So the default dead-letter topic of
// every topic and consumer group of at most MaxNameLength bytes is valid, and so is the
// dead-letter topic of a subscription to that dead-letter topic: Subscribe accepts every such
// topic and group, and a dead-letter topic's subscribers too. A longer dead-letter topic (a
// subscription to the dead letters of dead letters with long names) is refused by Subscribe
// and SubscribeInitialize with an error wrapping ErrInvalidName that names its length.
const MaxDeadLetterTopicLength = 3*MaxNameLength + 2*len(DeadLetterInfix)

// ValidateName reports whether name can be used as a topic, consumer group or schedule name;
// kind names it in the error. A name must be non-empty, at most MaxNameLength bytes
// (MaxDeadLetterTopicLength when it contains DeadLetterInfix), valid UTF-8 without control
// characters or characters that change the direction of text (Unicode Bidi_Control: U+061C,
// U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), so that it reads the same in logs, metric
// labels, the CLI and the dashboard, free of '{' and '}' (braces would change the Redis Cluster
// hash tag that keeps all keys of a topic in one slot), not "." or ".." (which no URL path can
// name), and must not end in '#' and digits, which name the partitions of a topic. Any other
// character, ':' and '/' included, is allowed. The error wraps ErrInvalidName and names what
// is wrong, quoting at most 64 bytes of the name.
func ValidateName(kind, name string) error {
	if err := checkName(kind, name); err != nil {
		return fmt.Errorf("redisdelay: %w", err)
	}
	return nil
}

// checkName is ValidateName without the "redisdelay: " prefix, for errors that name the field
// the name came from first.
func checkName(kind, name string) error {
	limit := MaxNameLength
	if strings.Contains(name, DeadLetterInfix) {
		limit = MaxDeadLetterTopicLength
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	case len(name) > limit:
		return fmt.Errorf("%w: %s name %s is %d bytes, more than %d", ErrInvalidName, kind, quote(name), len(name), limit)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s name %s is not valid UTF-8", ErrInvalidName, kind, quote(name))
	case name == "." || name == "..":
		return fmt.Errorf("%w: %s name %s is a path step that no URL can name", ErrInvalidName, kind, quote(name))
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("%w: %s name %s contains '{' or '}', which would break the Redis Cluster hash tag", ErrInvalidName, kind, quote(name))
	case store.HasPartitionSuffix(name) || store.HasPartitionSuffix(firstPart(name)):
		return fmt.Errorf("%w: %s name %s ends in '#' and digits, which name topic partitions", ErrInvalidName, kind, quote(name))
	}
	if r, ok := hiddenRune(name); ok {
		return fmt.Errorf("%w: %s name %s holds %s %U", ErrInvalidName, kind, quote(name), hiddenKind(r), r)
	}
	return nil
}

// hiddenKind names the kind of a rune hiddenRune returned, for errors.
func hiddenKind(r rune) string {
	if unicode.IsControl(r) {
		return "the control character"
	}
	return "the direction-changing character"
}

// hiddenRune returns the first rune of s that would not read as itself in a log line, a
// terminal or a web page: a control character, or a format character that changes the
// direction of the text around it (Unicode Bidi_Control). Names and keys refuse them.
func hiddenRune(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return r, true
		}
	}
	return 0, false
}

// firstPart returns name up to its first DeadLetterInfix, or all of it.
func firstPart(name string) string {
	part, _, _ := strings.Cut(name, DeadLetterInfix)
	return part
}

// DeadLetterInfix joins a topic and a consumer group in the name of their dead-letter topic. A
// topic whose name contains it shares the hash slot of the part before it, so that moving a
// message to its dead-letter topic is one atomic script call, on Redis Cluster too.
const DeadLetterInfix = ".dead-letter."

// MaxKeyLength is the longest message key, in bytes.
const MaxKeyLength = 256

// ValidateKey reports whether key can be a message key: non-empty, at most MaxKeyLength bytes,
// valid UTF-8 without control characters or characters that change the direction of text (see
// ValidateName), so that it reads the same in logs, the CLI, the dashboard and Redis. The error wraps ErrInvalidKey and names what is wrong.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("%w: the key is %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: the key is not valid UTF-8", ErrInvalidKey)
	}
	if r, ok := hiddenRune(key); ok {
		return fmt.Errorf("%w: the key holds %s %U", ErrInvalidKey, hiddenKind(r), r)
	}
	return nil
}
