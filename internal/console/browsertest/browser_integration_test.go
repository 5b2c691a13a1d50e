//go:build integration

package browsertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/dev"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testobj"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// screenshotDir is where screenshots go: OUTRIGGER_CONSOLE_SCREENSHOTS
// (docs/console.md's come from there), else the test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("OUTRIGGER_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser starts headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1400, 1000),
		// Root in a container has no user namespaces for the sandbox,
		// and a small /dev/shm.
		chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	// The browser starts here rather than in the test's first action, and
	// is started again when it exits before it listens: it was seen to,
	// once, on a machine busy building, and that is not what a test checks.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
		if _, err = chromedp.Run(ctx, chromedp.Navigate("about:blank")); err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancel)
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("Chromium did not start (attempt %d of 3): %v", attempt, err)
	}
	t.Fatalf("Chromium did not start: %v", err)
	return nil
}

// serveConsole serves a console for the test's cluster on loopback, as its
// admin unless opts.Client says otherwise, reading the call metrics from
// this process's registry, where the Outrigger the test started records
// them.
func serveConsole(t *testing.T, opts console.Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if opts.Client == nil {
		opts.Client = testenv.Client
	}
	if opts.Gatherer == nil {
		opts.Gatherer = ctrlmetrics.Registry
	}
	opts.Interval = 250 * time.Millisecond
	l, err := console.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = console.Serve(ctx, console.New(opts), l) }()
	return "http://" + l.Addr().String() + "/"
}

// waitFor polls a JavaScript predicate in the page until it is true.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		dump, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText.slice(0, 4000)`))
		t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, dump)
	}
}

// pressEnterOn focuses the element the selector names and presses Enter,
// as a keyboard user would. The focus is moved inside the page, in one
// step: the console re-renders its tables on every update, so a node ID
// taken by a DevTools query may name a replaced row by the time it is
// focused ("Could not find node with given id"). The page keeps focus
// across its re-renders, so the key reaches the same summary.
func pressEnterOn(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	waitFor(t, ctx, "focus on "+selector, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.focus(); return document.activeElement === e; })()`, selector))
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 1000 {
		t.Fatalf("screenshot %s is %d bytes", name, len(png))
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func lbService(ns, name string, port int32) *corev1.Service {
	return testobj.LBService(ns, name, testobj.Selector(), testobj.Port(corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(8080)}))
}

// TestConsoleInBrowser drives the page in headless Chromium against a real
// API server with Outrigger (sim provider) running: the Services' VIPs and
// backends show, a pending Service says why, the call chart moves, the page
// meets the accessibility basics, and an action reaches the sim cloud.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	shots := screenshotDir(t)
	cloud := testenv.StartCloud(t)
	// Room for two load balancers: the third Service stays pending.
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 2})
	nodes := []string{testenv.Name("node"), testenv.Name("node"), testenv.Name("node")}
	for _, n := range nodes {
		if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, n, nil)
	}
	port := freeport.Reserve(t) // held until Outrigger binds it, with SO_REUSEPORT
	testenv.StartOutrigger(t, cloud, fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--permit-port-sharing", "--cloud-qps=50", "--cloud-burst=50")
	url := serveConsole(t, console.Options{
		Ranges:  []console.Range{{Name: "sim-vips", Prefix: mustPrefix(t, "198.18.0.0/15")}},
		Actions: dev.SimActions{Cloud: cloud.Cloud},
	})

	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stream", `document.querySelector("#status").className === "live"`)
	for _, n := range nodes {
		waitFor(t, ctx, n+" initialized", fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-node=%q]'); return !!r && r.cells[2].textContent === "yes" && r.cells[3].textContent.startsWith("sim://"); })()`, n))
	}

	ns := testenv.Name("console")
	if _, err := testenv.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	callsBefore := eval[float64](t, ctx, `(() => { const p = [...document.querySelectorAll('#chart-rate polyline[data-series="EnsureLoadBalancer"]')]; return p.length; })()`)
	for i, name := range []string{"web", "api", "pending"} {
		if _, err := testenv.Client.CoreV1().Services(ns).Create(context.Background(), lbService(ns, name, int32(80+i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if name != "pending" {
			// The third is created once both have their load balancers,
			// so it is the one the quota refuses.
			testenv.Eventually(t, 60*time.Second, name+" provisioned", func() (bool, error) {
				s, err := testenv.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
				return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, err
			})
		}
	}

	for _, name := range []string{"web", "api"} {
		s, err := testenv.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vip := s.Status.LoadBalancer.Ingress[0].IP
		row := fmt.Sprintf(`document.querySelector('tr[data-lb="%s/%s"]')`, ns, name)
		waitFor(t, ctx, name+" shows its VIP", fmt.Sprintf(`(() => { const r = %s; return !!r && r.querySelector(".vip").textContent === %q && r.dataset.state === "Ready"; })()`, row, vip))
		waitFor(t, ctx, name+" counts its backends", fmt.Sprintf(`%s.querySelector(".backends-health").textContent === "3/3"`, row))
	}
	waitFor(t, ctx, "the pending Service's reason", fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-lb="%s/pending"]'); return !!r && r.dataset.state === "Pending" && r.querySelector(".reason").textContent.includes("QuotaExceeded"); })()`, ns))
	waitFor(t, ctx, "the pool usage", `document.querySelector('[data-pool="sim-vips"] .usage').textContent.startsWith("2 used")`)

	// The backends are behind the Service's disclosure, opened from the
	// keyboard.
	summary := fmt.Sprintf(`tr[data-lb="%s/web"] summary`, ns)
	pressEnterOn(t, ctx, summary)
	for _, n := range nodes {
		waitFor(t, ctx, n+" listed as a healthy backend of web", fmt.Sprintf(`!!document.querySelector('tr[data-lb="%s/web"] li.ok[data-node=%q]')`, ns, n))
	}
	waitFor(t, ctx, "web's Events", fmt.Sprintf(`document.querySelector('tr[data-lb="%s/web"] details').innerText.includes("EnsuredLoadBalancer")`, ns))

	// The calls chart moved: it draws the EnsureLoadBalancer calls the
	// Services caused, above zero.
	if callsBefore != 0 {
		t.Fatalf("the chart drew EnsureLoadBalancer calls before any Service existed")
	}
	waitFor(t, ctx, "the calls chart to draw EnsureLoadBalancer", `(() => {
		const l = document.querySelector('#chart-rate polyline[data-series="EnsureLoadBalancer"]');
		return !!l && l.getAttribute("points").split(" ").some((p) => parseFloat(p.split(",")[1]) < 170);
	})()`)
	waitFor(t, ctx, "the timeline", fmt.Sprintf(`document.querySelector("#tl-list").innerText.includes("Service/%s/pending")`, ns))
	screenshot(t, ctx, shots, "console-overview.png")
	if _, err := chromedp.Run(ctx, chromedp.ScrollIntoView(chromedp.CSS("#calls"))); err != nil {
		t.Fatal(err)
	}
	callsPNG, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#calls")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "console-calls.png"), callsPNG, 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("filters", func(t *testing.T) {
		// The server filters: the rows the page draws are what it sent for
		// the view in the filter boxes, the counts still of everything.
		lbCount := eval[string](t, ctx, `document.querySelector("#lbs-count").textContent`)
		// Typed as a user types: one view asked for after the keystrokes.
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#lb-filter"), ns+"/pend")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "only the pending Service", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#lb-table tbody tr")]; return document.body.dataset.view.startsWith("services=") && rows.length === 1 && rows[0].dataset.lb === %q; })()`, ns+"/pending"))
		if got := eval[string](t, ctx, `document.querySelector("#lbs-count").textContent`); got != lbCount {
			t.Errorf("the Service count says %q under a filter, want %q as before", got, lbCount)
		}
		setFilter := func(id, value string) {
			t.Helper()
			js := fmt.Sprintf(`(() => { const i = document.querySelector(%q); i.value = %q; i.dispatchEvent(new Event("input")); })()`, id, value)
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](js)); err != nil {
				t.Fatal(err)
			}
		}
		setFilter("#lb-filter", ns)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#lb-pending"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the namespace's Services not ready", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#lb-table tbody tr")]; return document.body.dataset.view.includes("notReady=1") && rows.length === 1 && rows[0].dataset.lb === %q; })()`, ns+"/pending"))
		setFilter("#node-filter", nodes[1])
		waitFor(t, ctx, "one node", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#node-table tbody tr")]; return document.body.dataset.view.includes("nodes=") && rows.length === 1 && rows[0].dataset.node === %q; })()`, nodes[1]))
		setFilter("#lb-filter", "")
		setFilter("#node-filter", "")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#lb-pending"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "every row back", fmt.Sprintf(`document.body.dataset.view === "" && !!document.querySelector('tr[data-lb="%s/web"]') && !!document.querySelector('tr[data-node=%q]')`, ns, nodes[2]))
	})

	t.Run("accessibility", func(t *testing.T) {
		// Every form control has a label, every button and chart a name.
		unlabelled := eval[[]string](t, ctx, `[...document.querySelectorAll("input")].filter((i) => !i.labels || !i.labels.length).map((i) => i.id || i.outerHTML)`)
		if len(unlabelled) > 0 {
			t.Errorf("inputs without a label: %v", unlabelled)
		}
		unnamed := eval[[]string](t, ctx, `[...document.querySelectorAll("button, svg[role=img], [role=meter]")].filter((e) => !(e.getAttribute("aria-label") || e.getAttribute("aria-labelledby") || e.textContent.trim())).map((e) => e.outerHTML.slice(0, 80))`)
		if len(unnamed) > 0 {
			t.Errorf("controls or images without an accessible name: %v", unnamed)
		}
		// Text contrast is at least 4.5:1 (WCAG AA) for every text element
		// shown, against the nearest opaque background.
		low := eval[[]string](t, ctx, contrastCheck)
		if len(low) > 0 {
			t.Errorf("text below 4.5:1 contrast: %v", low)
		}
		// The check itself finds light grey on white.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const p = document.createElement("p"); p.id = "faint"; p.style.color = "#bbbbbb"; p.textContent = "faint"; document.querySelector("main").prepend(p); })()`)); err != nil {
			t.Fatal(err)
		}
		if low := eval[[]string](t, ctx, contrastCheck); len(low) != 1 || !strings.HasPrefix(low[0], "P.") {
			t.Errorf("the contrast check does not catch #bbb on white: %v", low)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#faint").remove()`)); err != nil {
			t.Fatal(err)
		}
		// The keyboard reaches everything: on a fresh page the first Tab
		// lands on the skip link, the next ones on the section links.
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the stream after reload", `document.querySelector("#status").className === "live"`)
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
		if got := eval[string](t, ctx, `document.activeElement.textContent`); got != "Skip to content" {
			t.Errorf("first Tab focuses %q, want the skip link", got)
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
		if got := eval[string](t, ctx, `document.activeElement.getAttribute("href") || ""`); !strings.HasPrefix(got, "#") {
			t.Errorf("Tab moves on to the section links, got %q", got)
		}
	})

	t.Run("actions", func(t *testing.T) {
		victim := nodes[2]
		sel := fmt.Sprintf(`button[data-key="act:stop:%s"]`, victim)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, victim+" stopped in the sim cloud", func() (bool, error) {
			in, ok := cloud.Get(victim)
			return ok && in.State == simcloud.StateStopped, nil
		})
		waitFor(t, ctx, "the action's result", fmt.Sprintf(`document.querySelector("#status").textContent.includes("instance %s")`, victim))
	})

	t.Run("secure port", func(t *testing.T) {
		// The manager serves the same console on its secure port, behind
		// /metrics' authentication: anonymous callers are refused, the
		// cluster admin (client certificate) is served.
		base := fmt.Sprintf("https://127.0.0.1:%d/console/", port)
		anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := anon.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous GET %s: %s, want 401 or 403", base, resp.Status)
		}
		cfg := rest.CopyConfig(testenv.Config)
		cfg.Host = base
		cfg.CAData, cfg.CAFile, cfg.Insecure = nil, "", true
		admin, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{"": "<title>Outrigger console</title>", "api/snapshot": fmt.Sprintf(`"namespace":%q`, ns)} {
			resp, err := admin.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			body := new(strings.Builder)
			_, _ = io.Copy(body, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), want) {
				t.Errorf("admin GET %s%s: %s, body without %s", base, path, resp.Status, want)
			}
		}
	})
}

// contrastCheck returns the text elements whose contrast is below 4.5:1.
const contrastCheck = `(() => {
	const parse = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null; const v = m[1].split(",").map(Number); return { r: v[0], g: v[1], b: v[2], a: v.length > 3 ? v[3] : 1 }; };
	const lum = (c) => { const f = (x) => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
	const bg = (e) => { for (; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a === 1) return c; } return { r: 255, g: 255, b: 255, a: 1 }; };
	const out = [];
	for (const e of document.querySelectorAll("body *")) {
		if (!e.offsetParent && getComputedStyle(e).position !== "fixed") continue;
		const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
		if (!own) continue;
		const fg = parse(getComputedStyle(e).color), b = bg(e);
		const l1 = lum(fg), l2 = lum(b);
		const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		if (ratio < 4.5) out.push(e.tagName + "." + e.className + ": " + ratio.toFixed(2));
	}
	return [...new Set(out)];
})()`

// TestScreenshotRunningConsole screenshots a console already running (the
// one `outrigger dev` prints) for docs/console.md: set
// OUTRIGGER_CONSOLE_URL, and OUTRIGGER_CONSOLE_SCREENSHOTS for where.
func TestScreenshotRunningConsole(t *testing.T) {
	url := os.Getenv("OUTRIGGER_CONSOLE_URL")
	if url == "" {
		t.Skip("set OUTRIGGER_CONSOLE_URL to screenshot a running console")
	}
	ctx := browser(t)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stream", `document.querySelector("#status").className === "live"`)
	waitFor(t, ctx, "the charts", `!!document.querySelector("#chart-rate polyline")`)
	// Open the first Service that is not ready, to show why.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const d = document.querySelector('tr[data-state="Pending"] details') || document.querySelector("tr details"); if (d) d.open = true; })()`)); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, screenshotDir(t), "dev-console.png")
}
