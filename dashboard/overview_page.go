package dashboard

// This file owns the overview's paging: which topics one view of the overview shows (a page of
// overviewPageSize topics in name order, from the first after ?after=), what it reads from Redis
// for them, and the links to the pages before and after.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
)

// overviewPageSize is how many topics one view of the overview shows.
const overviewPageSize = 50

// topicsPage is one page of the overview: its topics' statistics, where it is among the topics
// on the dashboard, and the links to the pages around it.
type topicsPage struct {
	Stats      []redisdelay.GroupStats
	Missing    []string // topics of Options.Topics not in the registry (yet)
	From, To   int      // the page's topics are the From-th to the To-th (from 1) of Total
	Total      int
	Prev, Next string // URLs of the pages before and after this one; "" when there is none
	First      string // URL of the first page; "" on the first page
}

// topicsPage reads the page of topics that r asks for (?after=, a topic name: the page starts
// with the first topic after it in name order). The default dead-letter topics of the topics
// on the dashboard are not listed on their own: their messages are the dead letters of their
// source topic's group (GroupStats.DeadLetters), so they are read with the source topic, and
// show only when they have consumer groups of their own, or messages that no group of the
// source counts. The cost is bounded by overviewPageSize, not by the number of topics: one
// HGETALL of the topic registry, whose reply holds every topic name (a few bytes each), then
// Inspector.Stats of the page's topics and their dead-letter topics (see docs/operations.md).
func (s *server) topicsPage(ctx context.Context, r *http.Request) (topicsPage, error) {
	registry, err := s.registry(ctx)
	if err != nil {
		return topicsPage{}, err
	}
	var p topicsPage
	var names []string
	for t := range registry {
		if s.topics == nil || s.topics[t] {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	for _, t := range s.opts.Topics {
		if registry[t] == 0 && !slices.Contains(p.Missing, t) {
			p.Missing = append(p.Missing, t)
		}
	}
	listed := slices.DeleteFunc(slices.Clone(names), func(t string) bool { return isDeadLetterTopic(t, names) })
	after := r.URL.Query().Get("after")
	start, found := slices.BinarySearch(listed, after)
	if found {
		start++
	}
	end := min(start+overviewPageSize, len(listed))
	p.From, p.To, p.Total = start+1, end, len(listed)
	s.pageLinks(&p, r, listed, start, end)
	var read []string
	for _, t := range listed[start:end] {
		read = append(append(read, t), deadLetterTopics(t, names)...)
	}
	if len(read) > 0 {
		p.Stats, err = s.in.Stats(ctx, read...)
	}
	return p, err
}

// registry returns every topic of the topic registry with its partitions (at least 1), in one
// HGETALL, within the Inspector's OperationTimeout.
func (s *server) registry(ctx context.Context) (map[string]int, error) {
	in := seam.InspectorOf(s.in)
	ctx, cancel := context.WithTimeout(ctx, in.OperationTimeout())
	defer cancel()
	registry, err := in.Store().RegisteredTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("dashboard: read the topic registry: %w", err)
	}
	for t, n := range registry {
		registry[t] = max(n, 1)
	}
	return registry, nil
}

// isDeadLetterTopic reports whether topic could be the default dead-letter topic of a group
// of one of names (sorted): whether topic = src + redisdelay.DeadLetterInfix + group for some
// src of names.
func isDeadLetterTopic(topic string, names []string) bool {
	for k := 0; ; k++ {
		i := strings.Index(topic[k:], redisdelay.DeadLetterInfix)
		if i < 0 {
			return false
		}
		k += i
		if _, ok := slices.BinarySearch(names, topic[:k]); ok && k+len(redisdelay.DeadLetterInfix) < len(topic) {
			return true
		}
	}
}

// deadLetterTopics returns the topics of names (sorted) that could be default dead-letter
// topics of topic's groups, and theirs: those that start with topic + redisdelay.DeadLetterInfix.
func deadLetterTopics(topic string, names []string) []string {
	prefix := topic + redisdelay.DeadLetterInfix
	i, _ := slices.BinarySearch(names, prefix)
	j := i
	for j < len(names) && strings.HasPrefix(names[j], prefix) {
		j++
	}
	return names[i:j]
}

// pageLinks sets the links of p, the page of names[start:end], to the first page and the pages
// before and after it, keeping r's other query parameters (such as refresh=off).
func (s *server) pageLinks(p *topicsPage, r *http.Request, names []string, start, end int) {
	at := func(after string) string {
		q := r.URL.Query()
		q.Del("done")
		q.Del("after")
		if after != "" {
			q.Set("after", after)
		}
		u := s.opts.Prefix + "/"
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		return u
	}
	if start > 0 {
		p.First = at("")
		prev := max(start-overviewPageSize, 0)
		p.Prev = at("")
		if prev > 0 {
			p.Prev = at(names[prev-1])
		}
	}
	if end < len(names) {
		p.Next = at(names[end-1])
	}
}
