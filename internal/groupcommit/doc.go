// Package groupcommit combines concurrent commit calls into shared store calls (group commit):
// each call's items go whole, in call order, into exactly one round, and each round is one call
// of a store function that stores all of its items or none. The Publisher keeps one Committer
// per topic partition, whose store function runs the publish script.
package groupcommit
