package redisdelay

// Paging through a consumer group's messages: the options that select a page of List, the
// page, and the cursor that resumes after it.

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultListLimit and MaxListLimit bound ListOptions.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// listLimit returns the most messages on a page for ListOptions.Limit.
func listLimit(limit int) int {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	return min(limit, MaxListLimit)
}

// ListOptions selects a page of List.
type ListOptions struct {
	State State
	// Cursor is ListPage.NextCursor of the previous page, "" for the first.
	Cursor string
	// Limit is the most messages on the page; DefaultListLimit when zero, at most
	// MaxListLimit.
	Limit int
}

// ListPage is one page of List.
type ListPage struct {
	Messages []MessageInfo
	// NextCursor continues after this page; "" when there is nothing more.
	NextCursor string
}

// cursor is the position after the last message of a List page: in a partition, after a
// message (unless it is the zero cursor, of the first page).
type cursor struct {
	partition int
	at        store.Cursor
}

// in returns where a page starts in partition p: after c in c's partition, else at the
// beginning.
func (c cursor) in(p int) store.Cursor {
	if p != c.partition {
		return store.Cursor{}
	}
	return c.at
}

// maxCursorMember bounds the member of a cursor, which list.lua compares byte by byte: longer
// than any member a list returns (a short form, or an ID with a key and an attempt count).
const maxCursorMember = 2048

func encodeCursor(c cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(c.partition) + " " + strconv.FormatInt(c.at.ScoreUs, 10) + " " + c.at.Member))
}

func decodeCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	f := strings.SplitN(string(b), " ", 3)
	if err != nil || len(f) != 3 {
		return cursor{}, fmt.Errorf("malformed cursor %s", quote(s))
	}
	p, err1 := strconv.Atoi(f[0])
	us, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || p < 0 || len(f[2]) > maxCursorMember {
		return cursor{}, fmt.Errorf("malformed cursor %s", quote(s))
	}
	return cursor{partition: p, at: store.Cursor{ScoreUs: us, Member: f[2], After: true}}, nil
}
