package awsemu

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// awsError is an error of an AWS Query API (EC2's, Elastic Load
// Balancing's): HTTP status 400 unless said otherwise.
type awsError struct {
	status  int
	code    string
	message string
}

func (e *awsError) Error() string { return e.code + ": " + e.message }

func awsErrorf(code, format string, args ...any) *awsError {
	return &awsError{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

// queryAction answers one action: a response to encode, or an error (an
// *awsError says what the service would answer; any other is a 500).
type queryAction func(r *http.Request) (any, error)

// queryAPI is one AWS service the cloud serves in the Query protocol: every
// call a POST (or GET) of Action, Version and the call's parameters, as a
// form; XML answers in the service's own shape.
type queryAPI struct {
	// service prefixes the counted operations: "EC2" counts
	// "EC2:DescribeInstances".
	service string
	actions map[string]queryAction
	// unsupported are real actions of the service the sim cloud does not
	// implement: they fail with UnsupportedOperation, whereas names the
	// service does not have fail with InvalidAction.
	unsupported map[string]bool
	// dryRun honours DryRun=true, as EC2 does.
	dryRun bool
	// fault says a throttled call (status 429) or an injected fault (500)
	// in the service's words.
	fault       func(status int, code, message string) *awsError
	writeError  func(w http.ResponseWriter, requestID string, e *awsError)
	writeResult func(w http.ResponseWriter, requestID, action string, resp any)
}

// serveQuery answers one call to api: parsed, signed (the signature is not
// checked, only that there is one), counted, passed through the cloud's
// fault knobs, then the action's answer.
func (aws *AWS) serveQuery(w http.ResponseWriter, r *http.Request, api queryAPI) {
	requestID := newRequestID()
	if err := r.ParseForm(); err != nil {
		api.writeError(w, requestID, awsErrorf("MalformedQueryString", "cannot parse the request: %v", err))
		return
	}
	action := r.Form.Get("Action")
	if action == "" {
		api.writeError(w, requestID, awsErrorf("MissingAction", "The request must contain the parameter Action."))
		return
	}
	// A client that reaches here unsigned has not found its credentials:
	// the service would refuse it.
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") && r.Form.Get("X-Amz-Signature") == "" {
		api.writeError(w, requestID, &awsError{status: http.StatusUnauthorized, code: "AuthFailure", message: "AWS was not able to validate the provided access credentials"})
		return
	}
	h, ok := api.actions[action]
	op := api.service + ":" + action
	if !ok {
		op = api.service + ":unknown"
	}
	if aws.cloud.Gate(w, r, op, func(status int, code, message string) {
		api.writeError(w, requestID, api.fault(status, code, message))
	}) {
		return
	}
	switch {
	case ok:
	case api.unsupported[action]:
		api.writeError(w, requestID, awsErrorf("UnsupportedOperation", "The sim cloud does not implement %s.", action))
		return
	default:
		api.writeError(w, requestID, awsErrorf("InvalidAction", "The action %s is not valid for this web service.", action))
		return
	}
	if v := r.Form.Get("Version"); v == "" {
		api.writeError(w, requestID, awsErrorf("MissingParameter", "The request must contain the parameter Version."))
		return
	}
	if dry, _ := strconv.ParseBool(r.Form.Get("DryRun")); dry && api.dryRun {
		api.writeError(w, requestID, &awsError{status: http.StatusPreconditionFailed, code: "DryRunOperation", message: "Request would have succeeded, but DryRun flag is set."})
		return
	}
	resp, err := h(r)
	if err != nil {
		e, ok := err.(*awsError)
		if !ok {
			e = &awsError{status: http.StatusInternalServerError, code: "InternalError", message: err.Error()}
		}
		api.writeError(w, requestID, e)
		return
	}
	api.writeResult(w, requestID, action, resp)
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
