package retryhint

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
)

func TestRequeue(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		res     reconcile.Result
		err     error
		wantRes reconcile.Result
		wantErr bool
	}{
		{name: "hint", err: cloudproviderapi.NewRetryError("slow down", 7*time.Second), wantRes: reconcile.Result{RequeueAfter: 7 * time.Second}},
		{name: "wrapped hint", err: fmt.Errorf("ensuring load balancer: %w", cloudproviderapi.NewRetryError("slow down", 3*time.Second)), wantRes: reconcile.Result{RequeueAfter: 3 * time.Second}},
		{name: "zero hint keeps the backoff", err: cloudproviderapi.NewRetryError("slow down", 0), wantErr: true},
		{name: "plain error", err: boom, wantErr: true},
		{name: "call in flight waits for its return", err: fmt.Errorf("x: %w", cloud.ErrCallInFlight), wantRes: reconcile.Result{RequeueAfter: inFlightRecheck}},
		{name: "call left running waits for its return", err: fmt.Errorf("x: %w", cloud.ErrStillRunning), wantRes: reconcile.Result{RequeueAfter: inFlightRecheck}},
		{name: "success passes through", res: reconcile.Result{RequeueAfter: time.Minute}, wantRes: reconcile.Result{RequeueAfter: time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return tc.res, tc.err })
			res, err := Requeue(inner).Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "x"}})
			if (err != nil) != tc.wantErr || (tc.wantErr && !errors.Is(err, tc.err)) {
				t.Errorf("err = %v, want error %t", err, tc.wantErr)
			}
			if !tc.wantErr && res != tc.wantRes {
				t.Errorf("result = %+v, want %+v", res, tc.wantRes)
			}
		})
	}
}
