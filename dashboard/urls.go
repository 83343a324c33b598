package dashboard

// This file owns the dashboard's URLs: how a request names its topic and group, and the paths
// of the group and message pages that the pages link to and the forms post to.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/watermill-redisdelay/redisdelay"
)

// target returns the topic and group a request names (ParkedGroup on the pages of a topic's
// parked messages), or reports the error and false: 400 for a name that cannot exist, 404 for
// a topic outside Options.Topics.
func (s *server) target(w http.ResponseWriter, r *http.Request) (topic, group string, ok bool) {
	topic, group = r.PathValue("topic"), r.PathValue("group")
	err := redisdelay.ValidateName("topic", topic)
	if strings.Contains(r.Pattern, "{group}") {
		err = errors.Join(err, redisdelay.ValidateName("consumer group", group))
	} else {
		group = redisdelay.ParkedGroup
	}
	if err != nil {
		s.fail(w, err)
		return "", "", false
	}
	if s.topics != nil && !s.topics[topic] {
		s.fail(w, fmt.Errorf("topic %q is not on this dashboard: %w", topic, redisdelay.ErrNotFound))
		return "", "", false
	}
	return topic, group, true
}

// groupPath is the path of a group's page; for ParkedGroup, of the page of the topic's parked
// messages.
func (s *server) groupPath(topic, group string) string {
	if group == redisdelay.ParkedGroup {
		return s.opts.Prefix + "/topic/" + url.PathEscape(topic) + "/parked"
	}
	return s.opts.Prefix + "/topic/" + url.PathEscape(topic) + "/group/" + url.PathEscape(group)
}

// groupURL is the URL of a group's page with query q (nil for none). Names are path-escaped,
// so any name, '/' included, is one path segment; "." and ".." are the exception, since
// browsers resolve them (escaped too) before they send the request.
func (s *server) groupURL(topic, group string, q url.Values) string {
	u := s.groupPath(topic, group)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// messageURL is the URL of a message's page, or of one of its actions, with query q.
func (s *server) messageURL(topic, group, action string, q url.Values) string {
	u := s.groupPath(topic, group) + "/message" + action
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}
