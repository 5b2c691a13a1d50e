package dataplane

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// ConfigKey is the key of the Secret's data holding the Config.
const ConfigKey = "config.json"

// HealthPort is where the data plane answers /healthz and /readyz unless
// told otherwise; a Gateway listener cannot use it.
const HealthPort = 15021

// Watch programs p from the Config in one Secret until ctx ends: the
// newest version of the Secret is applied as it arrives (a watch on that one
// object, never a list of others). applied is told each outcome. A version
// that fails to apply is tried again with backoff (1 s doubling to 1 min)
// until it applies or a newer one arrives: a port busy for a moment must not
// leave the data plane on old programming for good.
func Watch(ctx context.Context, client kubernetes.Interface, namespace, name string, p *Proxy, applied func(error)) {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "secrets", namespace, fields.OneTermEqualSelector("metadata.name", name))
	// latest holds the newest version not yet taken by the loop below;
	// the informer's one handler goroutine is its only writer.
	latest := make(chan *corev1.Secret, 1)
	offer := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		select {
		case <-latest:
		default:
		}
		latest <- s
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    offer,
		UpdateFunc: func(_, obj any) { offer(obj) },
	})
	go inf.Run(ctx.Done())
	applyLoop(ctx, latest, p, applied)
}

// applyLoop applies each Secret it is given, retrying a failed one with
// backoff until it applies or a newer one comes.
func applyLoop(ctx context.Context, latest <-chan *corev1.Secret, p *Proxy, applied func(error)) {
	var (
		current   *corev1.Secret
		appliedRV string
		delay     time.Duration
		retry     <-chan time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case current = <-latest:
			delay, retry = 0, nil
		case <-retry:
		}
		if current == nil || current.ResourceVersion == appliedRV {
			continue
		}
		cfg, err := Unmarshal(current.Data[ConfigKey])
		if err == nil {
			err = p.Apply(cfg)
		}
		applied(err)
		if err != nil {
			delay = min(max(2*delay, time.Second), time.Minute)
			retry = time.After(delay)
			continue
		}
		appliedRV, retry = current.ResourceVersion, nil
	}
}

// NewCommand is `outrigger gateway-dataplane`: the data plane of one
// Gateway, as the pods of the Deployment Outrigger makes for it run.
func NewCommand() *cobra.Command {
	var (
		namespace, secret, kubeconfig, listen string
		healthPort                            int
	)
	cmd := &cobra.Command{
		Use:   "gateway-dataplane",
		Short: "Serve one Gateway's listeners, programmed from the Secret Outrigger keeps for it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if namespace == "" || secret == "" {
				return errors.New("--namespace and --secret are required")
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "outrigger-gateway-dataplane"
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("API client: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := klog.NewKlogr().WithName("gateway-dataplane")
			return serve(ctx, log, client, namespace, secret, listen, healthPort)
		},
	}
	cmd.Flags().StringVar(&namespace, "namespace", "", "Namespace of the Secret holding the data plane's programming.")
	cmd.Flags().StringVar(&secret, "secret", "", "Name of that Secret.")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file; in a pod, its ServiceAccount is used.")
	cmd.Flags().IntVar(&healthPort, "health-port", HealthPort, "Port of /healthz, /readyz (ready once programmed) and /metrics.")
	cmd.Flags().StringVar(&listen, "listen-address", "", "Address the listeners and the health port bind; empty: every address (as in a pod).")
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a pod: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig: %w", err)
	}
	return cfg, nil
}

// A stopping data plane first fails its readiness and keeps serving for
// shutdownDelay, the time the endpoints take to drop it, then drains for up
// to drainTimeout; the two fit in the pod's default 30 s grace period.
const (
	shutdownDelay = 10 * time.Second
	drainTimeout  = 15 * time.Second
)

// bytesPerConnection is what a TLS client connection costs the data plane
// at most while it waits (goroutine, buffers, TLS state): the memory limit
// divided by it, with a quarter kept for everything else, is the connection
// limit when none is given.
const bytesPerConnection = 48 << 10

// limitsFor sets the connection limit from the process's memory limit
// (GOMEMLIMIT, which the Deployment sets from the container's limit).
func limitsFor(memLimit int64) Limits {
	var l Limits
	if memLimit > 0 && memLimit < math.MaxInt64 {
		l.MaxConnections = max(int(memLimit/4*3/bytesPerConnection), 256)
	}
	return l.withDefaults()
}

func serve(ctx context.Context, log logr.Logger, client kubernetes.Interface, namespace, secret, listen string, healthPort int) error {
	log.V(1).Info("Garbage collector", "gcPercent", TuneGC(), "memoryLimit", debug.SetMemoryLimit(-1))
	p := New(Options{
		Log:    log,
		Limits: limitsFor(debug.SetMemoryLimit(-1)),
		ListenTCP: func(port int32) (net.Listener, error) {
			return ListenTCP(net.JoinHostPort(listen, strconv.Itoa(int(port))))
		},
		ListenUDP: func(port int32) (net.PacketConn, error) {
			return net.ListenPacket("udp", net.JoinHostPort(listen, strconv.Itoa(int(port))))
		},
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg, p)
	var ready, draining atomic.Bool
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if !ready.Load() {
			http.Error(w, "not programmed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	health := &http.Server{Addr: net.JoinHostPort(listen, strconv.Itoa(healthPort)), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := health.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Health endpoint failed")
		}
	}()
	defer health.Close()
	log.Info("Watching the data plane's programming", "namespace", namespace, "secret", secret)
	Watch(ctx, client, namespace, secret, p, func(err error) {
		metrics.Applied(err)
		if err != nil {
			// The previous programming stays; the controller refuses
			// what it can see is invalid, so this is rare.
			log.Error(err, "Programming not applied")
			return
		}
		ready.Store(true)
		log.Info("Programmed")
	})
	draining.Store(true)
	log.Info("Stopping: not ready, serving until the endpoints drop this pod", "delay", shutdownDelay)
	<-time.After(shutdownDelay)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	p.Drain(dctx)
	log.Info("Drained")
	return nil
}
