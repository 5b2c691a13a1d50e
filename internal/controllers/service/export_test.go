package service

// The finalizer writes, for the tests of what they keep and refuse against
// a real API server.
var (
	AddFinalizer    = addFinalizer
	RemoveFinalizer = removeFinalizer
)
