package console

import (
	"context"
	"errors"
)

// Action is something the page offers to do; Target names what kind of
// object it needs ("node", or "" for none).
type Action struct {
	Name   string `json:"name"`
	Label  string `json:"label"`
	Target string `json:"target,omitempty"`
}

// Actions are what the page may change. Only simulated clouds offer them
// (`outrigger dev` gives the sim cloud's): the console of a real cluster is
// read-only.
type Actions interface {
	List() []Action
	// Do runs the named action and says what it did.
	Do(ctx context.Context, name, target string) (string, error)
}

// ErrUnknownAction is returned by Do for a name List does not offer.
var ErrUnknownAction = errors.New("unknown action")
