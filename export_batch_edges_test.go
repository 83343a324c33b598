package redisdelay

import "context"

// RefOpScriptForTest runs refop.lua for ref in group on topic (op "cancel" or "reschedule" to
// now) without the Inspector's check that the group is registered, as when the group is
// removed between that check and the script. It returns the script's state letter.
func RefOpScriptForTest(ctx context.Context, in *Inspector, topic, group, ref, op string) (string, error) {
	r, ok := parseRef(ref, in.config.Partitions)
	if !ok {
		return "", ErrNotFound
	}
	member, err := in.wholeMember(ctx, in.store.keys.group(partitionName(topic, r.partition), group).due, r)
	if err != nil {
		return "", err
	}
	state, _, err := in.store.refOp(ctx, partitionName(topic, r.partition), group, op, member, publishCall{token: newToken(), ttl: in.callTTL}, outgoing{})
	return state, err
}
