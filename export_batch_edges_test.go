package redisdelay

import (
	"context"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// RefOpScriptForTest runs refop.lua for ref in group on topic (op "cancel" or "reschedule" to
// now) without the Inspector's check that the group is registered, as when the group is
// removed between that check and the script. It returns the outcome's word.
func RefOpScriptForTest(ctx context.Context, in *Inspector, topic, group, ref, op string) (string, error) {
	r, ok := store.ParseRef(ref, in.config.Partitions)
	if !ok {
		return "", ErrNotFound
	}
	g := store.Partition{Topic: topic, N: r.Partition}.Of(group)
	member, err := in.wholeMember(ctx, store.Due(g), r)
	if err != nil {
		return "", err
	}
	o, _, err := in.store.RefOp(ctx, g, store.RefOp(op), member, store.Call{Token: store.NewToken(), TTL: in.callTTL}, store.Outgoing{})
	return outcomeOf(o).String(), err
}
