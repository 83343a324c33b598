package main

// The --group rule of every command that takes it: a topic with exactly one consumer group
// uses it when --group is not given; a topic with none or several is an error that lists them.

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
)

// addGroupFlags adds the required --topic and --group, which pickGroup fills in when it is not
// given.
func addGroupFlags(cmd *cobra.Command, topic, group *string) {
	cmd.Flags().StringVar(topic, "topic", "", "topic (required)")
	cmd.Flags().StringVar(group, "group", "", "consumer group (default: the topic's only consumer group; with none or several, give it)")
	_ = cmd.MarkFlagRequired("topic")
}

// groupNeed says what pickGroup does without --group beyond the one-group rule.
type groupNeed struct {
	// parked adds the hint of --parked to the error of a topic with no group (list and show
	// take it).
	parked bool
	// explicit makes --group required even when the topic has one group (remove-group): the
	// error lists the groups.
	explicit bool
}

// pickGroup sets *group, when --group was not given (empty), to the only consumer group of
// topic. A topic with no group or several, or any topic when need.explicit, is an error that
// names the topic, lists its groups sorted and asks for --group; an unknown topic is an error
// wrapping ErrNotFound. It reads the topic's groups with Inspector.Stats (one script per
// partition), within --timeout.
func (a *app) pickGroup(ctx context.Context, topic string, group *string, need groupNeed) error {
	if *group != "" {
		return nil
	}
	groups, err := a.groupsOf(ctx, topic)
	if err != nil {
		return err
	}
	switch {
	case len(groups) == 1 && !need.explicit:
		*group = groups[0]
		return nil
	case len(groups) == 0 && need.parked:
		return fmt.Errorf("topic %q has no consumer group; pass --group, or --parked for the messages that wait for its first group", topic)
	case len(groups) == 0:
		return fmt.Errorf("topic %q has no consumer group; pass --group", topic)
	}
	names := make([]string, len(groups))
	for n, g := range groups {
		names[n] = printable(g)
	}
	noun := "consumer groups"
	if len(names) == 1 {
		noun = "consumer group"
	}
	return fmt.Errorf("topic %q has %s %s; pass --group to name one", topic, noun, strings.Join(names, ", "))
}

// groupsOf returns the consumer groups of topic, sorted (Stats reports them so), or an error
// wrapping ErrNotFound for an unknown topic.
func (a *app) groupsOf(ctx context.Context, topic string) ([]string, error) {
	stats, err := a.in.Stats(ctx, topic)
	if err != nil {
		return nil, err
	}
	var groups []string
	for _, s := range stats {
		if s.Group != redisdelay.ParkedGroup {
			groups = append(groups, s.Group)
		}
	}
	return groups, nil
}
