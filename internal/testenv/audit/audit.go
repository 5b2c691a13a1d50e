// Package audit reads the test API server's audit log: who wrote what.
package audit

import (
	"bufio"
	"encoding/json"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"os"
	"testing"
)

// Writers reads the API server's audit log (AuditLog) into
// "resource/name[/subresource]" -> the users who patched or updated it (the
// impersonated user where there was one).
func Writers(t testing.TB) map[string]map[string]bool {
	t.Helper()
	f, err := os.Open(testenv.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Verb             string                     `json:"verb"`
			User             struct{ Username string }  `json:"user"`
			ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
			ObjectRef        struct {
				Resource, Name, Subresource string
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || (ev.Verb != "patch" && ev.Verb != "update") {
			continue
		}
		key := ev.ObjectRef.Resource + "/" + ev.ObjectRef.Name
		if ev.ObjectRef.Subresource != "" {
			key += "/" + ev.ObjectRef.Subresource
		}
		user := ev.User.Username
		if ev.ImpersonatedUser != nil {
			user = ev.ImpersonatedUser.Username
		}
		if out[key] == nil {
			out[key] = map[string]bool{}
		}
		out[key][user] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
