// Package browsertest holds the console's browser test: headless Chromium
// (Debian's, installed by the test when missing and run as root) driven
// with chromedp against a real API server and an in-process Outrigger. It
// is its own package because its TestMain starts a control plane, which
// the console's unit tests do not need.
package browsertest
