package redisdelay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// configCase is one row of a Validate table: a config (edited from a valid one) and what its
// error must name, the field and the offending value; none for a valid config.
type configCase[C any] struct {
	name string
	edit func(*C)
	// mention holds what the error names, the field first; nil means the config is valid.
	mention []string
}

// checkValidate runs the table against validate, starting each row from base. An invalid row
// must fail with an error naming its field and value; a valid one must pass.
func checkValidate[C any](t *testing.T, base C, validate func(C) error, cases []configCase[C]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := validate(c)
			if tc.mention == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "redisdelay: "), "%v", err)
			for _, s := range tc.mention {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

// testClient is a client that is never connected: Validate makes no Redis call.
func testClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestPublisherConfigValidateNamesTheFieldAndValue(t *testing.T) {
	client := testClient(t)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _, _ = cluster.Close(), ring.Close() })
	type C = redisdelay.PublisherConfig
	batching := func(b redisdelay.BatchConfig) func(*C) {
		return func(c *C) { c.Batching = map[string]redisdelay.BatchConfig{"orders": b} }
	}
	checkValidate(t, C{Client: client}, C.Validate, []configCase[C]{
		{"zero values are the defaults", func(*C) {}, nil},
		{"every field in range", func(c *C) {
			c.KeyPrefix, c.OperationTimeout, c.MaxMessageBytes, c.Partitions = "app:", time.Second, 1, redisdelay.MaxPartitions
			c.OnDuplicate, c.KeyRetention, c.DebounceMaxWait = redisdelay.KeepLater, time.Hour, time.Microsecond
			c.DurableReplicas, c.DurableTimeout = 1, time.Second-time.Millisecond
			c.Batching = map[string]redisdelay.BatchConfig{"orders": {MaxItems: 1, MaxWait: time.Millisecond, MaxBytes: redisdelay.MaxBatchBytes}}
		}, nil},
		{"a cluster client for durable publishes", func(c *C) {
			c.Client, c.DurableReplicas = cluster, 1
		}, nil},
		{"no client", func(c *C) { c.Client = nil }, []string{"PublisherConfig.Client", "required"}},
		{"hash tag in the prefix", func(c *C) { c.KeyPrefix = "app{1}:" }, []string{"PublisherConfig.KeyPrefix", `"app{1}:"`}},
		{"negative operation timeout", func(c *C) { c.OperationTimeout = -time.Second }, []string{"PublisherConfig.OperationTimeout", "-1s"}},
		{"negative max message bytes", func(c *C) { c.MaxMessageBytes = -1 }, []string{"PublisherConfig.MaxMessageBytes", "-1"}},
		{"negative partitions", func(c *C) { c.Partitions = -1 }, []string{"PublisherConfig.Partitions", "-1"}},
		{"too many partitions", func(c *C) { c.Partitions = redisdelay.MaxPartitions + 1 }, []string{"PublisherConfig.Partitions", "1025"}},
		{"unknown duplicate policy", func(c *C) { c.OnDuplicate = "keep-newest" }, []string{"PublisherConfig.OnDuplicate", `"keep-newest"`}},
		{"negative key retention", func(c *C) { c.KeyRetention = -time.Millisecond }, []string{"PublisherConfig.KeyRetention", "-1ms"}},
		{"negative debounce max wait", func(c *C) { c.DebounceMaxWait = -time.Second }, []string{"PublisherConfig.DebounceMaxWait", "-1s"}},
		{"debounce max wait under a microsecond", func(c *C) { c.DebounceMaxWait = time.Nanosecond }, []string{"PublisherConfig.DebounceMaxWait", "1ns"}},
		{"compact tier off", func(c *C) { c.CompactHorizon = -1 }, nil},
		{"compact horizon at its bounds", func(c *C) { c.CompactHorizon = redisdelay.MaxCompactHorizon }, nil},
		// The package's tests lower the floor to 10 ms (export_test.go); under it is refused.
		{"compact horizon under the floor", func(c *C) { c.CompactHorizon = time.Millisecond }, []string{"PublisherConfig.CompactHorizon", "1ms"}},
		{"compact horizon over the maximum", func(c *C) { c.CompactHorizon = redisdelay.MaxCompactHorizon + time.Second }, []string{"PublisherConfig.CompactHorizon", "288h0m1s"}},
		{"negative durable replicas", func(c *C) { c.DurableReplicas = -1 }, []string{"PublisherConfig.DurableReplicas", "-1"}},
		{"durable publishes on a ring", func(c *C) { c.Client, c.DurableReplicas = ring, 1 }, []string{"PublisherConfig.DurableReplicas", "*redis.Ring"}},
		{"negative durable timeout", func(c *C) { c.DurableReplicas, c.DurableTimeout = 1, -time.Second }, []string{"PublisherConfig.DurableTimeout", "-1s"}},
		{"durable timeout as long as the operation timeout", func(c *C) { c.DurableReplicas, c.DurableTimeout = 1, redisdelay.DefaultOperationTimeout },
			[]string{"PublisherConfig.DurableTimeout", "5s"}},
		// BatchConfig is validated as a part of PublisherConfig.Batching.
		{"batch of no items", batching(redisdelay.BatchConfig{MaxWait: time.Second}), []string{`PublisherConfig.Batching["orders"]`, "MaxItems:0"}},
		{"batch wait under a millisecond", batching(redisdelay.BatchConfig{MaxItems: 1, MaxWait: time.Millisecond - time.Microsecond}),
			[]string{`PublisherConfig.Batching["orders"]`, "MaxWait:999µs"}},
		{"negative batch bytes", batching(redisdelay.BatchConfig{MaxItems: 1, MaxWait: time.Second, MaxBytes: -1}),
			[]string{`PublisherConfig.Batching["orders"]`, "MaxBytes:-1"}},
		{"batch bytes over MaxBatchBytes", batching(redisdelay.BatchConfig{MaxItems: 1, MaxWait: time.Second, MaxBytes: redisdelay.MaxBatchBytes + 1}),
			[]string{`PublisherConfig.Batching["orders"]`, "MaxBytes:1048577"}},
	})
}

func TestSubscriberConfigValidateNamesTheFieldAndValue(t *testing.T) {
	type C = redisdelay.SubscriberConfig
	checkValidate(t, C{Client: testClient(t)}, C.Validate, []configCase[C]{
		{"zero values are the defaults", func(*C) {}, nil},
		{"every field at its bound", func(c *C) {
			c.KeyPrefix, c.ConsumerGroup, c.LeaseTimeout, c.ClaimBatchSize = "app:", "billing", 10*time.Millisecond, 10000
			c.RecheckInterval, c.OperationTimeout, c.MaxAttempts = time.Millisecond, time.Second, redisdelay.UnlimitedAttempts
			c.Partitions, c.NewGroupWindow = redisdelay.MaxPartitions, time.Millisecond
		}, nil},
		{"no new-group window", func(c *C) { c.NewGroupWindow = -1 }, nil},
		{"no client", func(c *C) { c.Client = nil }, []string{"SubscriberConfig.Client", "required"}},
		{"hash tag in the prefix", func(c *C) { c.KeyPrefix = "}app:" }, []string{"SubscriberConfig.KeyPrefix", `"}app:"`}},
		{"hash tag in the group", func(c *C) { c.ConsumerGroup = "g{1}" }, []string{"SubscriberConfig.ConsumerGroup", `"g{1}"`}},
		{"partition suffix in the group", func(c *C) { c.ConsumerGroup = "billing#2" }, []string{"SubscriberConfig.ConsumerGroup", `"billing#2"`}},
		{"lease under 10ms", func(c *C) { c.LeaseTimeout = 9 * time.Millisecond }, []string{"SubscriberConfig.LeaseTimeout", "9ms"}},
		{"negative lease", func(c *C) { c.LeaseTimeout = -time.Second }, []string{"SubscriberConfig.LeaseTimeout", "-1s"}},
		{"negative claim batch size", func(c *C) { c.ClaimBatchSize = -1 }, []string{"SubscriberConfig.ClaimBatchSize", "-1"}},
		{"claim batch size over 10000", func(c *C) { c.ClaimBatchSize = 10001 }, []string{"SubscriberConfig.ClaimBatchSize", "10001"}},
		{"recheck under 1ms", func(c *C) { c.RecheckInterval = time.Millisecond - time.Microsecond }, []string{"SubscriberConfig.RecheckInterval", "999µs"}},
		{"negative operation timeout", func(c *C) { c.OperationTimeout = -time.Second }, []string{"SubscriberConfig.OperationTimeout", "-1s"}},
		{"max attempts below unlimited", func(c *C) { c.MaxAttempts = -2 }, []string{"SubscriberConfig.MaxAttempts", "-2"}},
		{"negative partitions", func(c *C) { c.Partitions = -1 }, []string{"SubscriberConfig.Partitions", "-1"}},
		{"too many partitions", func(c *C) { c.Partitions = redisdelay.MaxPartitions + 1 }, []string{"SubscriberConfig.Partitions", "1025"}},
		{"new-group window under 1ms", func(c *C) { c.NewGroupWindow = time.Microsecond }, []string{"SubscriberConfig.NewGroupWindow", "1µs"}},
	})
	// The group's name is refused as any bad name is.
	assert.ErrorIs(t, redisdelay.SubscriberConfig{Client: testClient(t), ConsumerGroup: "g{1}"}.Validate(), redisdelay.ErrInvalidName)
}

// The constructors refuse what Validate refuses, with its error.
func TestConstructorsRefuseAnInvalidConfig(t *testing.T) {
	_, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: testClient(t), Partitions: -1}, nil)
	assert.ErrorContains(t, err, "PublisherConfig.Partitions is -1")
	_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: testClient(t), LeaseTimeout: time.Millisecond}, nil)
	assert.ErrorContains(t, err, "SubscriberConfig.LeaseTimeout is 1ms")
	_, err = redisdelay.NewInspector(redisdelay.InspectorConfig{Client: testClient(t), OperationTimeout: -time.Second}, nil)
	assert.ErrorContains(t, err, "InspectorConfig.OperationTimeout is -1s")
}
