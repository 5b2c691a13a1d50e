package console

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestCommandRejectsBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--range", "lb"}, "--range"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig", "--range", "pods=198.18.0.0/16@8"}, "node mask"},
	}
	for _, tc := range cases {
		cmd := NewCommand()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %s", tc.args, err, tc.want)
		}
	}
}
