package redisdelay_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestInspectorConfigValidateNamesTheFieldAndValue(t *testing.T) {
	type C = redisdelay.InspectorConfig
	checkValidate(t, C{Client: testClient(t)}, C.Validate, []configCase[C]{
		{"zero values are the defaults", func(*C) {}, nil},
		{"every field in range", func(c *C) {
			c.KeyPrefix, c.Partitions, c.OperationTimeout = "app:", redisdelay.MaxPartitions, time.Second
		}, nil},
		{"no client", func(c *C) { c.Client = nil }, []string{"InspectorConfig.Client", "required"}},
		{"hash tag in the prefix", func(c *C) { c.KeyPrefix = "{app}:" }, []string{"InspectorConfig.KeyPrefix", `"{app}:"`}},
		{"negative partitions", func(c *C) { c.Partitions = -1 }, []string{"InspectorConfig.Partitions", "-1"}},
		{"too many partitions", func(c *C) { c.Partitions = redisdelay.MaxPartitions + 1 }, []string{"InspectorConfig.Partitions", "1025"}},
		{"negative operation timeout", func(c *C) { c.OperationTimeout = -time.Second }, []string{"InspectorConfig.OperationTimeout", "-1s"}},
	})
}

// An Inspector names the Redis and the key prefix it reads, without credentials and without a
// Redis call (nothing listens on these addresses).
func TestInspectorNamesItsRedisAndPrefixWithoutCredentials(t *testing.T) {
	for _, c := range []struct {
		client redis.UniversalClient
		prefix string
		addr   string
	}{
		{redis.NewClient(&redis.Options{Addr: "10.0.0.5:6380", Username: "ops", Password: "secret"}), "", "10.0.0.5:6380"},
		{redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:7000", "b:7001"}, Password: "secret"}), "shop", "a:7000,b:7001"},
		{redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"two": "b:6379", "one": "a:6379"}}), "x", "a:6379,b:6379"},
	} {
		t.Cleanup(func() { _ = c.client.Close() })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: c.client, KeyPrefix: c.prefix}, nil)
		require.NoError(t, err)
		assert.Equal(t, c.addr, in.Addr())
		assert.NotContains(t, in.Addr(), "secret")
		want := c.prefix
		if want == "" {
			want = redisdelay.DefaultKeyPrefix
		}
		assert.Equal(t, want, in.KeyPrefix())
	}
}
