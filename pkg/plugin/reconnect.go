package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// A plugin crashes, hangs, is upgraded: the connection to it is redialled
// with exponential backoff, and calls made meanwhile wait for it (within
// their deadline) rather than fail fast. gRPC's own default backoff grows to
// two minutes, so a plugin restarted after a long outage would sit unused
// for up to that long; the plugin is on the same machine or next to it, so
// the backoff here stops growing at a few seconds.

// DefaultReconnectMaxDelay is the longest wait between two attempts to
// reach a plugin that went away.
const DefaultReconnectMaxDelay = 5 * time.Second

func reconnectOptions(endpoint string, maxDelay time.Duration) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   maxDelay,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithChainUnaryInterceptor(annotateUnreachable(endpoint)),
		grpc.WithChainStreamInterceptor(annotateUnreachableStream(endpoint)),
	}
}

// annotateUnreachable makes a call that failed while the plugin could not be
// reached say so: the error ends up in the Events of the Nodes and Services
// it held up, where "context deadline exceeded" alone would not tell an
// operator that the plugin is down.
func annotateUnreachable(endpoint string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := beforeDeadline(ctx, cc)
		defer cancel()
		return explainUnreachable(cc, endpoint, invoker(ctx, method, req, reply, cc, opts...))
	}
}

// annotateUnreachableStream is annotateUnreachable for streaming calls
// (LOAD_BALANCER_STREAM).
func annotateUnreachableStream(endpoint string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := beforeDeadline(ctx, cc)
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, explainUnreachable(cc, endpoint, err)
		}
		return &explainedStream{ClientStream: s, cc: cc, endpoint: endpoint, cancel: cancel, single: !desc.ServerStreams}, nil
	}
}

// explainedStream explains its errors as annotateUnreachable does, and
// releases its deadline when the call is over.
type explainedStream struct {
	grpc.ClientStream
	cc       *grpc.ClientConn
	endpoint string
	cancel   context.CancelFunc
	single   bool // one answer: the call is over once it is received
}

func (s *explainedStream) SendMsg(m any) error {
	return explainUnreachable(s.cc, s.endpoint, s.ClientStream.SendMsg(m))
}

func (s *explainedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.single {
		s.cancel()
	}
	return explainUnreachable(s.cc, s.endpoint, err)
}

// beforeDeadline: while waiting for the plugin to come back, stop waiting a
// little before the caller's deadline, so that the caller gets the error
// of explainUnreachable, which says why, rather than its own bare timeout.
func beforeDeadline(ctx context.Context, cc *grpc.ClientConn) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && cc.GetState() != connectivity.Ready {
		margin := min(time.Until(dl)/10, 200*time.Millisecond)
		return context.WithDeadline(ctx, dl.Add(-margin))
	}
	return ctx, func() {}
}

// explainUnreachable adds to a call's timeout or unavailability that the
// plugin is unreachable, when it is.
func explainUnreachable(cc *grpc.ClientConn, endpoint string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded) {
		return err
	}
	if state := cc.GetState(); state != connectivity.Ready {
		return status.Error(st.Code(), fmt.Sprintf("plugin at %s unreachable (connection %s, reconnecting with backoff): %s",
			endpoint, strings.ToLower(state.String()), st.Message()))
	}
	return err
}

// watchConnection logs the plugin connection going away and coming back,
// until ctx ends.
func watchConnection(ctx context.Context, conn *grpc.ClientConn, endpoint string) {
	log := klog.Background().WithName("plugin").WithValues("endpoint", endpoint)
	state := conn.GetState()
	for conn.WaitForStateChange(ctx, state) {
		next := conn.GetState()
		switch {
		case next == connectivity.TransientFailure && state != connectivity.TransientFailure:
			log.Info("Lost the plugin; reconnecting with backoff")
		case next == connectivity.Ready && state != connectivity.Ready:
			log.Info("Connected to the plugin")
		}
		state = next
	}
}
