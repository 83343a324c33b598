package redisdelay_test

import (
	"testing"
	"time"

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
