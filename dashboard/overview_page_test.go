package dashboard_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

var (
	rowTopicRE = regexp.MustCompile(`<tr data-topic="([^"]*)" data-group="([^"]*)"`)
	nextRE     = regexp.MustCompile(`<a href="([^"]*)" rel="next">`)
	prevRE     = regexp.MustCompile(`<a href="([^"]*)" rel="prev">`)
	firstRE    = regexp.MustCompile(`<a href="([^"]*)">First page</a>`)
	pageOfRE   = regexp.MustCompile(`<p class="muted" id="page-of">([^<]*)</p>`)
)

// rowTopics returns the topic of each row of an overview page, in order.
func rowTopics(body string) []string {
	var out []string
	for _, m := range rowTopicRE.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// pageOf returns the overview's line that says which topics it shows.
func pageOf(body string) string {
	if m := pageOfRE.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// pageLink returns the URL of the overview's link that re matches, "" when there is none.
func pageLink(body string, re *regexp.Regexp) string {
	if m := re.FindStringSubmatch(body); m != nil {
		return html.UnescapeString(m[1])
	}
	return ""
}

func TestOverviewShowsOnePageOfTopicsAtACostThatDoesNotGrowWithTheTopics(t *testing.T) {
	q := newQueue(t)
	sub := q.subscriber("billing", 0)
	initialize := func(from, to int) {
		require.NoError(t, parallel(to-from, func(n int) error { return sub.SubscribeInitialize(fmt.Sprintf("topic-%04d", from+n)) }))
	}
	initialize(0, 300)
	// Each topic has its dead-letter topic in the registry, which the overview does not list on
	// its own; topic-0049, the last topic of the first page, has 2 dead letters there.
	q.deadLetters("topic-0049", "billing", 2)
	in, counter := q.countedInspector(t)
	h, err := dashboard.New(in, dashboard.Options{RefreshInterval: -1})
	require.NoError(t, err)
	srv := q.serveHandler(h)
	view := func(u string) (response, int64) {
		before := counter.n.Load()
		res := get(t, srv.URL+u)
		require.Equal(t, http.StatusOK, res.status, res.body)
		return res, counter.n.Load() - before
	}
	view("/") // loads the scripts

	first, cost := view("/")
	topics := rowTopics(first.body)
	require.Len(t, topics, 50)
	assert.Equal(t, "topic-0000", topics[0])
	assert.Equal(t, "topic-0049", topics[49])
	assert.Equal(t, "2", cell(t, first.body, "topic-0049", "billing", "dead"))
	assert.Equal(t, "Topics 1–50 of 300, in name order", pageOf(first.body))
	assert.Empty(t, pageLink(first.body, prevRE), "the first page has no previous one")
	assert.Equal(t, int64(1+50*3+50*2), cost, "HGETALL of the registry; HGET, SMEMBERS and the stats script per topic; HGET and SMEMBERS per dead-letter topic")

	seen, pages := walkPages(t, view)
	assert.Equal(t, 6, pages, "300 topics in pages of 50")
	assert.Len(t, seen, 300, "every topic once")

	initialize(300, 600)
	again, costAgain := view("/")
	assert.Equal(t, topics, rowTopics(again.body))
	assert.Equal(t, "Topics 1–50 of 600, in name order", pageOf(again.body))
	assert.Equal(t, cost, costAgain, "twice the topics, the same commands per view")
	assert.Less(t, len(again.body), 100_000, "a page of 50 topics")
	last := get(t, srv.URL+"/?after=topic-0590")
	assert.Equal(t, []string{"topic-0591", "topic-0592", "topic-0593", "topic-0594", "topic-0595", "topic-0596", "topic-0597", "topic-0598", "topic-0599"}, rowTopics(last.body))
	assert.Empty(t, pageLink(last.body, nextRE), "the last page has no next one")
	assert.NotEmpty(t, pageLink(last.body, firstRE))
}

// walkPages follows the overview's next links from the first page to the last, checking each
// page's cost and links, and returns the topics of every row and the number of pages.
func walkPages(t *testing.T, view func(u string) (response, int64)) (seen []string, pages int) {
	for u := "/"; u != ""; pages++ {
		res, c := view(u)
		assert.LessOrEqual(t, c, int64(1+2*50*3), u)
		page := rowTopics(res.body)
		assert.NotContains(t, page, "topic-0049.dead-letter.billing", "a dead-letter topic is its source's dead letters")
		seen = append(seen, page...)
		if pages == 1 {
			assert.Equal(t, "/", pageLink(res.body, prevRE), "the second page goes back to the first")
			assert.Equal(t, "topic-0050", page[0])
		}
		u = pageLink(res.body, nextRE)
	}
	return seen, pages
}
