package main

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// delayed prepares message i of the delayed case: plain, due 1 to 20 ms after its publish, so
// that its due time is a number the script computes (a message due at once shares the call's
// clock reading) and the claim phase still finds it due. Every build has it.
func delayed(i int, m *message.Message) bool {
	delay.Message(m, delay.For(time.Duration(1+i%20)*time.Millisecond))
	return true
}
